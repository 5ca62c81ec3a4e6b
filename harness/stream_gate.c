/* The stream gate: preloaded (LD_PRELOAD) into the checks' worker on cuda (harness/stream_gate.py).

While the harness holds it (kp_gate_hold .. kp_gate_release: one checked call and the harness's
first reads of its outputs), work that the candidate queues on any stream other than the
caller's current stream is held back on the device. Before the first launch, copy, cuBLAS or cuDNN
call on such a stream, a wait on a word of the gate's is queued on that stream
(cuStreamWaitValue32); the host writes the word when the harness releases the gate, after its
reads on the caller's stream are done. The words are page-locked host memory mapped into the
device and written by the CPU: a write queued on a stream of the gate's own could sit behind
the very wait it is to satisfy, where the two streams share one of the device's hardware queues. Work that the caller's stream waits for (a side stream joined
back with an event) is only delayed, and its outputs are read once it is done; work that the
caller's stream does not wait for has not run when the harness reads the outputs, every time,
and not only when the harness's read wins a race against it.

The candidate's own blocking calls open what they would otherwise wait for forever: a device
synchronize and the synchronous copies and frees open everything; a stream or event
synchronize first waits (at most the hold's limit) for what it names to finish without it. A
watchdog thread opens everything when a hold lasts far longer than it should (a busy loop on a
query, a copy from pageable memory). Opening early only makes that call's check the race it
was before the gate; kp_gate_counts says it happened.

The candidate's own code never calls into this file: the kernel library's imports are checked
against an allow-list (harness/symbols.py) that names none of the kp_gate_* functions.

Declares the few CUDA types it needs instead of including CUDA's headers, and finds the real
functions at run time (dlsym), so that it builds with a C compiler alone.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int cudaError_t;
typedef int CUresult;
typedef int cublasStatus_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef unsigned long long CUdeviceptr;
typedef struct {
    unsigned x, y, z;
} dim3;
typedef struct {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    void *attrs;
    unsigned numAttrs;
} cudaLaunchConfig_t;
typedef struct {
    int type; /* cudaMemoryType: 0 unregistered, 1 host, 2 device, 3 managed */
    int device;
    void *devicePointer;
    void *hostPointer;
} cudaPointerAttributes;

enum { cudaSuccess = 0, cudaErrorNotReady = 600, cudaErrorUnknown = 999 };
enum { MEMCPY_DEVICE_TO_DEVICE = 3 };
enum { WAIT_VALUE_GEQ = 0, CAPTURE_STATUS_NONE = 0, HOST_ALLOC_MAPPED_PORTABLE = 0x3 };
#define STREAM_LEGACY ((cudaStream_t)0x1)
#define STREAM_PER_THREAD ((cudaStream_t)0x2)
#define MAX_HELD 256

/* ---- the real functions --------------------------------------------------------------- */

struct symbol_search {
    const char *library; /* part of the file name of the libraries to look in */
    const char *name;
    void *found;
};

static int find_symbol(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct symbol_search *search = data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, search->library))
        return 0;
    void *handle = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
    search->found = handle ? dlsym(handle, search->name) : NULL;
    return search->found != NULL;
}

/* ``name`` as the library after this one defines it: the next definition in the global scope,
   else the first loaded library whose file name contains ``library`` and that defines it
   (loaded privately, as PyTorch and Python's extensions load the CUDA runtime, it is not in the
   global scope; a process may hold two runtimes, PyTorch's and the toolkit's of a kernel). */
static void *real(const char *name, const char *library) {
    void *function = dlsym(RTLD_NEXT, name);
    if (function)
        return function;
    struct symbol_search search = {library, name, NULL};
    dl_iterate_phdr(find_symbol, &search);
    return search.found;
}

#define CUDART "libcudart.so"
#define REAL(type, name, library)                                                   \
    static __typeof__(type) real_##name;                                                     \
    if (!real_##name)                                                               \
        real_##name = (type)real(#name, library);

typedef CUresult (*stream_value_fn)(void *, CUdeviceptr, uint32_t, unsigned);
typedef cudaError_t (*stream_fn)(cudaStream_t);
typedef cudaError_t (*event_fn)(cudaEvent_t);

static stream_value_fn wait_value;
static stream_fn query_stream;
static event_fn query_event;

/* ---- the gate's state ------------------------------------------------------------------ */

struct held_stream {
    cudaStream_t stream;
    uint32_t target; /* the value its word must reach: the last wait queued on it */
    int closed;      /* a wait is queued that its word does not yet satisfy */
    int in_use;      /* this hold touched the stream (or it was destroyed while closed) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int holding;
static cudaStream_t caller_stream;
static double block_limit_s, watchdog_s, hold_started;
static struct held_stream held[MAX_HELD];
static volatile uint32_t *host_words; /* the words, as the CPU writes them */
static CUdeviceptr words;              /* the same words, as the device reads them */
static long gated, opened_early, failures;
static char error_text[512];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void failed(const char *what, int code) {
    failures++;
    if (!error_text[0])
        snprintf(error_text, sizeof error_text, "%s returned %d", what, code);
}

static CUdeviceptr word(int slot) { return words + (CUdeviceptr)slot * sizeof(uint32_t); }

/* Lock held. The slot of ``stream`` in this hold, taken if need be; -1 when full. */
static int slot_of(cudaStream_t stream) {
    int free_slot = -1;
    for (int i = 0; i < MAX_HELD; i++) {
        if (held[i].in_use && held[i].stream == stream)
            return i;
        if (!held[i].in_use && !held[i].closed && free_slot < 0)
            free_slot = i;
    }
    if (free_slot >= 0) {
        held[free_slot].stream = stream;
        held[free_slot].in_use = 1;
    }
    return free_slot;
}

/* Lock held. Write the slot's word: its stream goes on. */
static int open_slot(int i) {
    if (!held[i].closed)
        return 0;
    __atomic_store_n(&host_words[i], held[i].target, __ATOMIC_SEQ_CST);
    held[i].closed = 0;
    return 1;
}

/* Lock held. Open every closed slot; how many there were. */
static int open_all(void) {
    int opened = 0;
    for (int i = 0; i < MAX_HELD; i++)
        opened += open_slot(i);
    return opened;
}

static int is_capturing(cudaStream_t stream) {
    REAL(cudaError_t(*)(cudaStream_t, int *), cudaStreamIsCapturing, CUDART);
    int status = CAPTURE_STATUS_NONE;
    if (!real_cudaStreamIsCapturing || real_cudaStreamIsCapturing(stream, &status) != cudaSuccess)
        return 0;
    return status != CAPTURE_STATUS_NONE;
}

/* Work is about to be queued on ``stream``: hold it back unless it is the caller's stream. */
static void gate(cudaStream_t stream, int per_thread) {
    if (!atomic_load(&holding))
        return;
    if (stream == NULL)
        stream = per_thread ? STREAM_PER_THREAD : STREAM_LEGACY;
    if (stream == caller_stream || is_capturing(stream))
        return;
    pthread_mutex_lock(&lock);
    if (atomic_load(&holding)) {
        int i = slot_of(stream);
        if (i >= 0 && !held[i].closed) {
            uint32_t target = held[i].target + 1;
            CUresult result = wait_value(stream, word(i), target, WAIT_VALUE_GEQ);
            if (result == 0) {
                held[i].target = target;
                held[i].closed = 1;
                gated++;
            } else {
                failed("cuStreamWaitValue32", result);
            }
        }
    }
    pthread_mutex_unlock(&lock);
}

/* A blocking call is about to wait for everything: nothing may stay held. */
static void open_everything(void) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    if (open_all())
        opened_early++;
    pthread_mutex_unlock(&lock);
}

/* A blocking call is about to wait for ``done()``: give it the hold's limit to come true with
   the gate closed (work the caller's stream does not depend on), then open everything. */
static void wait_or_open(int (*done)(void *), void *what) {
    if (!atomic_load(&holding))
        return;
    double deadline = now() + block_limit_s;
    while (now() < deadline) {
        if (done(what))
            return;
        usleep(20);
    }
    open_everything();
}

static int stream_done(void *stream) { return query_stream((cudaStream_t)stream) != cudaErrorNotReady; }
static int event_done(void *event) { return query_event((cudaEvent_t)event) != cudaErrorNotReady; }

static void before_stream_wait(cudaStream_t stream) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HELD; i++)
        if (held[i].in_use && held[i].stream == stream)
            open_slot(i); /* waiting for a held stream is the call's point */
    pthread_mutex_unlock(&lock);
    wait_or_open(stream_done, stream);
}

static void *watchdog(void *unused) {
    (void)unused;
    for (;;) {
        usleep(2000);
        if (atomic_load(&holding) && now() - hold_started > watchdog_s) {
            pthread_mutex_lock(&lock);
            if (open_all())
                opened_early++;
            hold_started = now();
            pthread_mutex_unlock(&lock);
        }
    }
    return NULL;
}

/* ---- what the harness calls ------------------------------------------------------------ */

/* Once per process, after CUDA is initialized: the gate's words (page-locked host memory
   mapped into the device, zeroed) and the watchdog. 0 on success; kp_gate_error() says what
   failed. */
int kp_gate_init(void) {
    REAL(cudaError_t(*)(void **, size_t, unsigned), cudaHostAlloc, CUDART);
    REAL(cudaError_t(*)(void **, void *, unsigned), cudaHostGetDevicePointer, CUDART);
    REAL(cudaError_t(*)(cudaStream_t), cudaStreamQuery, CUDART);
    REAL(cudaError_t(*)(cudaEvent_t), cudaEventQuery, CUDART);
    if (!real_cudaHostAlloc || !real_cudaHostGetDevicePointer || !real_cudaStreamQuery ||
        !real_cudaEventQuery) {
        snprintf(error_text, sizeof error_text, "the CUDA runtime (%s) is not loaded", CUDART);
        return -1;
    }
    query_stream = real_cudaStreamQuery;
    query_event = real_cudaEventQuery;
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!driver)
        driver = dlopen("libcuda.so.1", RTLD_NOW);
    wait_value = driver ? (stream_value_fn)dlsym(driver, "cuStreamWaitValue32_v2") : NULL;
    if (driver && !wait_value) /* a driver whose plain name is the current version */
        wait_value = (stream_value_fn)dlsym(driver, "cuStreamWaitValue32");
    if (!wait_value) {
        snprintf(error_text, sizeof error_text,
                 "the CUDA driver (libcuda.so.1) has no stream memory operations");
        return -1;
    }
    void *host = NULL, *device = NULL;
    int code;
    if ((code = real_cudaHostAlloc(&host, MAX_HELD * sizeof(uint32_t), HOST_ALLOC_MAPPED_PORTABLE)) !=
            cudaSuccess ||
        (code = real_cudaHostGetDevicePointer(&device, host, 0)) != cudaSuccess) {
        snprintf(error_text, sizeof error_text, "mapping the gate's words: CUDA error %d", code);
        return -1;
    }
    memset(host, 0, MAX_HELD * sizeof(uint32_t));
    host_words = host;
    words = (CUdeviceptr)(uintptr_t)device;
    pthread_t thread;
    if (pthread_create(&thread, NULL, watchdog, NULL) != 0) {
        snprintf(error_text, sizeof error_text, "could not start the gate's watchdog thread");
        return -1;
    }
    pthread_detach(thread);
    return 0;
}

/* Hold back work queued on streams other than ``stream`` (the caller's current stream) from
   now until kp_gate_release. */
void kp_gate_hold(uintptr_t stream, double limit_s, double watchdog_after_s) {
    pthread_mutex_lock(&lock);
    open_all();
    for (int i = 0; i < MAX_HELD; i++)
        held[i].in_use = 0;
    caller_stream = (cudaStream_t)stream;
    block_limit_s = limit_s;
    watchdog_s = watchdog_after_s;
    hold_started = now();
    gated = opened_early = failures = 0;
    error_text[0] = '\0';
    atomic_store(&holding, 1);
    pthread_mutex_unlock(&lock);
}

/* Let everything held go on; no stream is held after this. */
void kp_gate_release(void) {
    pthread_mutex_lock(&lock);
    atomic_store(&holding, 0);
    open_all();
    pthread_mutex_unlock(&lock);
}

/* Of the last hold: streams held, whether something was opened before the release, driver
   calls that failed. */
void kp_gate_counts(long *out) {
    pthread_mutex_lock(&lock);
    out[0] = gated;
    out[1] = opened_early;
    out[2] = failures;
    pthread_mutex_unlock(&lock);
}

const char *kp_gate_error(void) { return error_text; }

/* ---- the interposed CUDA calls --------------------------------------------------------- */

/* Calls that queue work on a stream: the stream is gated first. */
#define LAUNCH(name, per_thread)                                                              \
    cudaError_t name(const void *function, dim3 grid, dim3 block, void **args, size_t shared, \
                     cudaStream_t stream) {                                                   \
        REAL(cudaError_t(*)(const void *, dim3, dim3, void **, size_t, cudaStream_t), name,   \
             CUDART);                                                                         \
        if (!real_##name)                                                                     \
            return cudaErrorUnknown;                                                          \
        gate(stream, per_thread);                                                             \
        return real_##name(function, grid, block, args, shared, stream);                      \
    }
LAUNCH(cudaLaunchKernel, 0)
LAUNCH(cudaLaunchKernel_ptsz, 1)
LAUNCH(__cudaLaunchKernel, 0) /* what nvcc 13's <<<...>>> calls */
LAUNCH(__cudaLaunchKernel_ptsz, 1)
LAUNCH(cudaLaunchCooperativeKernel, 0)
LAUNCH(cudaLaunchCooperativeKernel_ptsz, 1)

#define LAUNCH_EX(name, per_thread)                                                              \
    cudaError_t name(const cudaLaunchConfig_t *config, const void *function, void **args) {     \
        REAL(cudaError_t(*)(const cudaLaunchConfig_t *, const void *, void **), name, CUDART);  \
        if (!real_##name)                                                                        \
            return cudaErrorUnknown;                                                             \
        if (config)                                                                              \
            gate(config->stream, per_thread);                                                    \
        return real_##name(config, function, args);                                              \
    }
LAUNCH_EX(cudaLaunchKernelExC, 0)
LAUNCH_EX(cudaLaunchKernelExC_ptsz, 1)

/* Memory a copy can use without the host waiting: device, managed or page-locked host memory. */
static int copies_async(const void *pointer) {
    REAL(cudaError_t(*)(cudaPointerAttributes *, const void *), cudaPointerGetAttributes, CUDART);
    cudaPointerAttributes attributes = {0, 0, NULL, NULL};
    if (!real_cudaPointerGetAttributes || real_cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess)
        return 0;
    return attributes.type != 0;
}

/* A copy is queued work, unless it involves pageable host memory: then the host may wait for
   the stream to finish, so its stream is treated as waited for. */
static void before_copy(void *dst, const void *src, int kind, cudaStream_t stream, int per_thread) {
    if (!atomic_load(&holding))
        return;
    if (kind == MEMCPY_DEVICE_TO_DEVICE || (copies_async(dst) && copies_async(src)))
        gate(stream, per_thread);
    else
        before_stream_wait(stream ? stream : (per_thread ? STREAM_PER_THREAD : STREAM_LEGACY));
}

#define COPY_ASYNC(name, per_thread)                                                            \
    cudaError_t name(void *dst, const void *src, size_t count, int kind, cudaStream_t stream) { \
        REAL(cudaError_t(*)(void *, const void *, size_t, int, cudaStream_t), name, CUDART);    \
        if (!real_##name)                                                                       \
            return cudaErrorUnknown;                                                            \
        before_copy(dst, src, kind, stream, per_thread);                                        \
        return real_##name(dst, src, count, kind, stream);                                      \
    }
COPY_ASYNC(cudaMemcpyAsync, 0)
COPY_ASYNC(cudaMemcpyAsync_ptsz, 1)

#define COPY_2D_ASYNC(name, per_thread)                                                        \
    cudaError_t name(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,   \
                     size_t height, int kind, cudaStream_t stream) {                           \
        REAL(cudaError_t(*)(void *, size_t, const void *, size_t, size_t, size_t, int,         \
                            cudaStream_t),                                                     \
             name, CUDART);                                                                    \
        if (!real_##name)                                                                      \
            return cudaErrorUnknown;                                                           \
        before_copy(dst, src, kind, stream, per_thread);                                       \
        return real_##name(dst, dpitch, src, spitch, width, height, kind, stream);             \
    }
COPY_2D_ASYNC(cudaMemcpy2DAsync, 0)
COPY_2D_ASYNC(cudaMemcpy2DAsync_ptsz, 1)

#define SYMBOL_COPY_ASYNC(name, per_thread, to_symbol)                                        \
    cudaError_t name(void *a, const void *b, size_t count, size_t offset, int kind,               \
                     cudaStream_t stream) {                                                       \
        REAL(cudaError_t(*)(void *, const void *, size_t, size_t, int, cudaStream_t), name,       \
             CUDART);                                                                             \
        if (!real_##name)                                                                         \
            return cudaErrorUnknown;                                                              \
        if (to_symbol) /* a symbol is device memory: only the other end may make the host wait */ \
            before_copy((void *)b, b, kind, stream, per_thread);                                  \
        else                                                                                      \
            before_copy(a, a, kind, stream, per_thread);                                          \
        return real_##name(a, b, count, offset, kind, stream);                                    \
    }
SYMBOL_COPY_ASYNC(cudaMemcpyToSymbolAsync, 0, 1)
SYMBOL_COPY_ASYNC(cudaMemcpyToSymbolAsync_ptsz, 1, 1)
SYMBOL_COPY_ASYNC(cudaMemcpyFromSymbolAsync, 0, 0)
SYMBOL_COPY_ASYNC(cudaMemcpyFromSymbolAsync_ptsz, 1, 0)

#define SET_2D_ASYNC(name, per_thread)                                                          \
    cudaError_t name(void *dst, size_t pitch, int value, size_t width, size_t height,           \
                     cudaStream_t stream) {                                                     \
        REAL(cudaError_t(*)(void *, size_t, int, size_t, size_t, cudaStream_t), name, CUDART);  \
        if (!real_##name)                                                                       \
            return cudaErrorUnknown;                                                            \
        gate(stream, per_thread);                                                               \
        return real_##name(dst, pitch, value, width, height, stream);                           \
    }
SET_2D_ASYNC(cudaMemset2DAsync, 0)
SET_2D_ASYNC(cudaMemset2DAsync_ptsz, 1)

#define SET_ASYNC(name, per_thread)                                                       \
    cudaError_t name(void *dst, int value, size_t count, cudaStream_t stream) {           \
        REAL(cudaError_t(*)(void *, int, size_t, cudaStream_t), name, CUDART);            \
        if (!real_##name)                                                                 \
            return cudaErrorUnknown;                                                      \
        gate(stream, per_thread);                                                         \
        return real_##name(dst, value, count, stream);                                    \
    }
SET_ASYNC(cudaMemsetAsync, 0)
SET_ASYNC(cudaMemsetAsync_ptsz, 1)

#define GRAPH_LAUNCH(name, per_thread)                               \
    cudaError_t name(void *graph, cudaStream_t stream) {             \
        REAL(cudaError_t(*)(void *, cudaStream_t), name, CUDART);    \
        if (!real_##name)                                            \
            return cudaErrorUnknown;                                 \
        gate(stream, per_thread);                                    \
        return real_##name(graph, stream);                           \
    }
GRAPH_LAUNCH(cudaGraphLaunch, 0)
GRAPH_LAUNCH(cudaGraphLaunch_ptsz, 1)

/* cuBLAS queues its kernels on the stream its handle was given: gated when it is given. */
cublasStatus_t cublasSetStream_v2(void *handle, cudaStream_t stream) {
    REAL(cublasStatus_t(*)(void *, cudaStream_t), cublasSetStream_v2, "libcublas.so");
    if (!real_cublasSetStream_v2)
        return 1; /* CUBLAS_STATUS_NOT_INITIALIZED */
    gate(stream, 0);
    return real_cublasSetStream_v2(handle, stream);
}

/* cuDNN too (PyTorch's convolutions give its handle the current stream before each call). */
int cudnnSetStream(void *handle, cudaStream_t stream) {
    REAL(int (*)(void *, cudaStream_t), cudnnSetStream, "libcudnn.so");
    if (!real_cudnnSetStream)
        return 4; /* CUDNN_STATUS_INTERNAL_ERROR */
    gate(stream, 0);
    return real_cudnnSetStream(handle, stream);
}

/* A handle made during a hold works on the legacy default stream until it is given another:
   gated once it is made (not before: making it may use that stream itself). */
cublasStatus_t cublasCreate_v2(void **handle) {
    REAL(cublasStatus_t(*)(void **), cublasCreate_v2, "libcublas.so");
    if (!real_cublasCreate_v2)
        return 1;
    cublasStatus_t status = real_cublasCreate_v2(handle);
    gate(STREAM_LEGACY, 0);
    return status;
}

cublasStatus_t cublasLtMatmul(void *handle, void *desc, const void *alpha, const void *a,
                              void *a_layout, const void *b, void *b_layout, const void *beta,
                              const void *c, void *c_layout, void *d, void *d_layout,
                              const void *algo, void *workspace, size_t workspace_size,
                              cudaStream_t stream) {
    REAL(cublasStatus_t(*)(void *, void *, const void *, const void *, void *, const void *, void *,
                           const void *, const void *, void *, void *, void *, const void *, void *,
                           size_t, cudaStream_t),
         cublasLtMatmul, "libcublasLt.so");
    if (!real_cublasLtMatmul)
        return 1;
    gate(stream, 0);
    return real_cublasLtMatmul(handle, desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d,
                               d_layout, algo, workspace, workspace_size, stream);
}

/* A destroyed stream's queued work still runs: its slot stays until the release opens it. */
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    REAL(cudaError_t(*)(cudaStream_t), cudaStreamDestroy, CUDART);
    if (!real_cudaStreamDestroy)
        return cudaErrorUnknown;
    if (atomic_load(&holding)) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < MAX_HELD; i++)
            if (held[i].in_use && held[i].stream == stream)
                held[i].stream = NULL; /* never matches a stream again; opened at the release */
        pthread_mutex_unlock(&lock);
    }
    return real_cudaStreamDestroy(stream);
}

/* ---- the interposed blocking calls ----------------------------------------------------- */

cudaError_t cudaDeviceSynchronize(void) {
    REAL(cudaError_t(*)(void), cudaDeviceSynchronize, CUDART);
    if (!real_cudaDeviceSynchronize)
        return cudaErrorUnknown;
    open_everything();
    return real_cudaDeviceSynchronize();
}

#define STREAM_SYNC(name, per_thread)                                 \
    cudaError_t name(cudaStream_t stream) {                           \
        REAL(cudaError_t(*)(cudaStream_t), name, CUDART);             \
        if (!real_##name)                                             \
            return cudaErrorUnknown;                                  \
        if (stream == NULL)                                           \
            before_stream_wait(per_thread ? STREAM_PER_THREAD : STREAM_LEGACY); \
        else                                                          \
            before_stream_wait(stream);                               \
        return real_##name(stream);                                   \
    }
STREAM_SYNC(cudaStreamSynchronize, 0)
STREAM_SYNC(cudaStreamSynchronize_ptsz, 1)

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    REAL(cudaError_t(*)(cudaEvent_t), cudaEventSynchronize, CUDART);
    if (!real_cudaEventSynchronize)
        return cudaErrorUnknown;
    wait_or_open(event_done, event);
    return real_cudaEventSynchronize(event);
}

/* Synchronous copies and frees wait for the legacy stream or the whole device. */
#define BLOCKING(name, params, args)                       \
    cudaError_t name params {                              \
        REAL(cudaError_t(*) params, name, CUDART);         \
        if (!real_##name)                                  \
            return cudaErrorUnknown;                       \
        open_everything();                                 \
        return real_##name args;                           \
    }
BLOCKING(cudaMemcpy, (void *dst, const void *src, size_t count, int kind), (dst, src, count, kind))
BLOCKING(cudaMemcpy_ptds, (void *dst, const void *src, size_t count, int kind), (dst, src, count, kind))
BLOCKING(cudaMemcpy2D,
         (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind),
         (dst, dpitch, src, spitch, width, height, kind))
BLOCKING(cudaMemcpyToSymbol,
         (const void *symbol, const void *src, size_t count, size_t offset, int kind),
         (symbol, src, count, offset, kind))
BLOCKING(cudaMemcpyToSymbol_ptds,
         (const void *symbol, const void *src, size_t count, size_t offset, int kind),
         (symbol, src, count, offset, kind))
BLOCKING(cudaMemcpyFromSymbol,
         (void *dst, const void *symbol, size_t count, size_t offset, int kind),
         (dst, symbol, count, offset, kind))
BLOCKING(cudaMemcpyFromSymbol_ptds,
         (void *dst, const void *symbol, size_t count, size_t offset, int kind),
         (dst, symbol, count, offset, kind))
BLOCKING(cudaFree, (void *pointer), (pointer))
BLOCKING(cudaFreeHost, (void *pointer), (pointer))

/* 1 when this library's definitions are the ones the process's calls reach: the first in the
   global scope, as a preloaded library's are. */
int kp_gate_interposes(void) {
    void *program = dlopen(NULL, RTLD_NOW);
    int first = program && dlsym(program, "cudaStreamSynchronize") == (void *)cudaStreamSynchronize &&
                dlsym(program, "__cudaLaunchKernel") == (void *)__cudaLaunchKernel;
    if (program)
        dlclose(program);
    return first;
}
