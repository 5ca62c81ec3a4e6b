/* The stream gate: preloaded (LD_PRELOAD) into the checks' worker on cuda (harness/stream_gate.py).

While the harness holds it (kp_gate_hold .. kp_gate_release: one checked call and the harness's
first reads of its outputs), work that the candidate queues on any stream other than the
caller's current stream is held back on the device. Before the first launch, copy, memset,
graph launch or cuBLAS/cuDNN call on such a stream, a wait on a word of the gate's is queued on
that stream (cuStreamWaitValue32); the host writes the word to let it go on. The words are
page-locked host memory mapped into the device, written by the CPU: a write queued on a stream
could sit behind the very wait it is to satisfy, where two streams share a hardware queue.

The gate follows the joins. An event recorded on a held stream stands for the work queued there
so far (the stream's next work goes behind a new wait), and a stream made to wait for the event
(cudaStreamWaitEvent) depends on that much of it. When the harness has queued its reads of the
outputs on the caller's stream it opens exactly what the caller's stream was made to wait for
(kp_gate_open_callers_waits), waits for the reads, and only then lets the rest go
(kp_gate_release). Work the caller's stream waits for is read finished; work it does not wait
for has not run when the reads run, every time: no race for the harness to win or lose.

The candidate's own blocking calls open what they wait for, and no more: a stream or event
synchronize opens that stream's or event's held work and what it waits for (the call then waits
for exactly that, as it would without the gate); a device synchronize or a free opens
everything. A query of held work opens and drains it (held work then looks like work that
finishes), but a query does not wait, so the hold no longer tests that call: it counts as
"imprecise" (kp_gate_counts), as does anything opened for a blocking call once forward has
returned (the caching allocator's, under the harness's reads), everything opened where the gate
cannot tell what a call waits for, and events a launch records itself. The harness then holds
another case. A watchdog thread opens a hold that lasts far too long (a wait the gate did not
follow) or a queuing call stuck for tens of milliseconds (loading a kernel lazily may wait for
the device to go idle), counted the same way. What the gate follows changes only with calls
CUDA accepted.

The candidate's own code never links against this file: a kernel library's imports are
checked against an allow-list (harness/symbols.py) that names none of the kp_gate_* functions.
It declares the few CUDA types it needs instead of including CUDA's headers and finds the real
functions at run time, so that it builds with a C compiler alone. CUDA driver calls are used for
its own queries: a runtime query that answers "not ready" leaves that as the thread's last
error, which the next launch check of PyTorch's would report as a failure.
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
typedef int status_t; /* cublasStatus_t, cudnnStatus_t, ... */
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

enum { cudaSuccess = 0, cudaErrorUnknown = 999, NOT_READY = 600 };
enum { MEMCPY_DEVICE_TO_DEVICE = 3 };
enum { WAIT_VALUE_GEQ = 0, HOST_ALLOC_MAPPED_PORTABLE = 0x3, STREAM_NON_BLOCKING = 0x1 };
enum { POINTER_ATTRIBUTE_MEMORY_TYPE = 2 };
#define STREAM_LEGACY ((cudaStream_t)0x1)
#define STREAM_PER_THREAD ((cudaStream_t)0x2)
#define MAX_HELD 1024 /* streams held in one hold */
#define MAX_DEPS 32   /* held segments one stream or event depends on */
#define MAX_NODES 1024 /* streams and events whose dependencies are followed */
#define MAX_HANDLES 64 /* the candidate's own cuBLAS handles */

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
   (loaded privately, as Python's extensions load the CUDA runtime, it is not in the global
   scope; a process may hold two runtimes, PyTorch's and the toolkit's of a kernel). */
static void *real(const char *name, const char *library) {
    void *function = dlsym(RTLD_NEXT, name);
    if (function)
        return function;
    struct symbol_search search = {library, name, NULL};
    dl_iterate_phdr(find_symbol, &search);
    return search.found;
}

#define CUDART "libcudart.so"
#define REAL(type, name, library)                                                     \
    static __typeof__(type) real_##name;                                              \
    if (!real_##name)                                                                 \
        real_##name = (type)real(#name, library);

static struct {
    CUresult (*wait_value)(void *, CUdeviceptr, uint32_t, unsigned);
    CUresult (*stream_query)(void *);
    CUresult (*event_query)(void *);
    CUresult (*is_capturing)(void *, int *);
    CUresult (*stream_flags)(void *, unsigned *);
    CUresult (*pointer_attribute)(void *, int, CUdeviceptr);
} driver;

/* ---- the gate's state (under ``lock``) ------------------------------------------------- */

struct held_stream {
    cudaStream_t stream;
    uint32_t target; /* the value its newest wait waits for */
    uint32_t opened; /* the value its word holds */
    int fresh_wait;  /* its next work goes behind a new wait (an event marked the work so far) */
    int in_use;
};

struct dep {
    int slot;
    uint32_t value; /* work of ``slot`` up to this wait */
};

struct node { /* a stream or an event, and the held work it waits for */
    void *key;
    int is_event;
    int count;
    int overflow; /* more than MAX_DEPS: what it waits for is not known */
    struct dep deps[MAX_DEPS];
};

struct handle {
    void *handle;
    cudaStream_t stream;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int holding;
static atomic_int after_forward; /* forward has returned: what opens now is not the candidate's wait */
static pthread_t holder;          /* the thread that holds: the one that calls forward */
static cudaStream_t caller_stream;
static double watchdog_s, hold_started;
static atomic_llong queuing_since_ns; /* a queuing call in progress since (0: none) */
static struct held_stream held[MAX_HELD];
static struct node nodes[MAX_NODES];
static int node_count;
static struct handle handles[MAX_HANDLES]; /* cuBLAS handles made by the candidate's code */
static volatile uint32_t *host_words;       /* the words, as the CPU writes them */
static CUdeviceptr words;                   /* the same words, as the device reads them */
static long waits_queued, streams_held, imprecise, failures;
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

/* Lock held. The slot of ``stream`` in this hold (taken if ``take``); -1 if none. */
static int slot_of(cudaStream_t stream, int take) {
    int free_slot = -1;
    for (int i = 0; i < MAX_HELD; i++) {
        if (held[i].in_use && held[i].stream == stream)
            return i;
        if (!held[i].in_use && held[i].opened >= held[i].target && free_slot < 0)
            free_slot = i;
    }
    if (take && free_slot >= 0) {
        held[free_slot].stream = stream;
        held[free_slot].in_use = 1;
        held[free_slot].fresh_wait = 0;
        streams_held++;
    } else if (take) {
        failed("holding more streams than the gate has words for", MAX_HELD);
    }
    return take ? free_slot : -1;
}

/* Lock held. Let the slot's work up to ``value`` go on. */
static void open_to(int slot, uint32_t value) {
    if (value > held[slot].target)
        value = held[slot].target;
    if (value <= held[slot].opened)
        return;
    held[slot].opened = value;
    __atomic_store_n(&host_words[slot], value, __ATOMIC_SEQ_CST);
}

static int is_open(int slot) { return held[slot].opened >= held[slot].target; }

/* Lock held. Open everything; whether anything was closed. */
static int open_all(void) {
    int any = 0;
    for (int i = 0; i < MAX_HELD; i++)
        if (!is_open(i)) {
            open_to(i, held[i].target);
            any = 1;
        }
    return any;
}

/* Lock held. The node of ``key`` (taken if ``take``); NULL if none or no room. */
static struct node *node_of(void *key, int is_event, int take) {
    for (int i = 0; i < node_count; i++)
        if (nodes[i].key == key && nodes[i].is_event == is_event)
            return &nodes[i];
    if (!take)
        return NULL;
    if (node_count == MAX_NODES) {
        failed("following more streams and events than the gate has room for", MAX_NODES);
        return NULL;
    }
    struct node *node = &nodes[node_count++];
    memset(node, 0, sizeof *node);
    node->key = key;
    node->is_event = is_event;
    return node;
}

static void add_dep(struct node *node, int slot, uint32_t value) {
    for (int i = 0; i < node->count; i++)
        if (node->deps[i].slot == slot) {
            if (value > node->deps[i].value)
                node->deps[i].value = value;
            return;
        }
    if (node->count == MAX_DEPS) {
        node->overflow = 1;
        return;
    }
    node->deps[node->count++] = (struct dep){slot, value};
}

/* Lock held. Open what ``node`` waits for; 1 if any of it was held, 2 if what it waits for is
   not known (more than MAX_DEPS), 0 if nothing it waits for is held. */
static int open_deps(const struct node *node) {
    if (!node)
        return 0;
    int involved = 0;
    for (int i = 0; i < node->count; i++) {
        int slot = node->deps[i].slot;
        if (held[slot].opened < node->deps[i].value) {
            open_to(slot, node->deps[i].value);
            involved = 1;
        }
    }
    return node->overflow ? 2 : involved;
}

static cudaStream_t normal(cudaStream_t stream, int per_thread) {
    if (stream == NULL)
        return per_thread ? STREAM_PER_THREAD : STREAM_LEGACY;
    return stream;
}

static int capturing(cudaStream_t stream) {
    int status = 0;
    return driver.is_capturing && driver.is_capturing(stream, &status) == 0 && status != 0;
}

static void queuing(int starts);

/* Work is about to be queued on ``stream``: hold it back unless it is the caller's stream. The
   new wait's value is reserved under the lock and queued outside it: queuing may block (a full
   command queue), and the watchdog must still be able to open. */
static void gate(cudaStream_t stream, int per_thread) {
    if (!atomic_load(&holding))
        return;
    stream = normal(stream, per_thread);
    if (stream == caller_stream || capturing(stream))
        return;
    pthread_mutex_lock(&lock);
    int slot = -1;
    uint32_t target = 0;
    if (!atomic_load(&holding)) {
    } else if (stream == STREAM_PER_THREAD && !pthread_equal(pthread_self(), holder)) {
        failed("work on another thread's per-thread default stream, which one word cannot hold", 0);
    } else {
        slot = slot_of(stream, 1);
        if (slot >= 0 && (is_open(slot) || held[slot].fresh_wait)) {
            target = ++held[slot].target;
            held[slot].fresh_wait = 0;
        } else {
            slot = -1;
        }
    }
    pthread_mutex_unlock(&lock);
    if (slot < 0)
        return;
    queuing(1);
    CUresult result = driver.wait_value(stream, word(slot), target, WAIT_VALUE_GEQ);
    queuing(0);
    pthread_mutex_lock(&lock);
    if (result == 0) {
        waits_queued++;
    } else {
        failed("cuStreamWaitValue32", result);
        open_to(slot, target); /* nothing waits for the value reserved */
    }
    pthread_mutex_unlock(&lock);
}

static void queuing(int starts) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    atomic_store(&queuing_since_ns, starts ? (long long)t.tv_sec * 1000000000LL + t.tv_nsec : 0);
}

/* Poll ``done(what)`` for at most ``limit_s``; whether it came true. */
static int poll_until(int (*done)(void *), void *what, double limit_s) {
    double deadline = now() + limit_s;
    while (!done(what)) {
        if (now() > deadline)
            return 0;
        usleep(20);
    }
    return 1;
}

static int stream_done(void *stream) { return driver.stream_query(stream) != NOT_READY; }
static int event_done(void *event) { return driver.event_query(event) != NOT_READY; }

/* Lock held. Something was opened for a blocking call: after forward has returned that call is
   not the candidate's wait (the caching allocator's, under the harness's reads), and the hold
   no longer tests the candidate. */
static void opened_for_a_wait(int opened) {
    if (opened && atomic_load(&after_forward))
        imprecise++;
}

/* Lock not held. Open everything and wait until every held stream has finished: what a call
   whose waits the gate cannot follow is let go with is done before the call goes on. */
static void open_and_drain_all(void) {
    cudaStream_t streams[MAX_HELD];
    int count = 0;
    pthread_mutex_lock(&lock);
    if (open_all())
        imprecise++;
    for (int i = 0; i < MAX_HELD; i++)
        if (held[i].in_use && held[i].stream)
            streams[count++] = held[i].stream;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < count; i++)
        poll_until(stream_done, streams[i], watchdog_s);
}

/* Lock held. Open ``stream``'s held work and what it waits for; as open_deps. */
static int open_stream(cudaStream_t stream) {
    int involved = 0;
    int i = slot_of(stream, 0);
    if (i >= 0 && !is_open(i)) {
        open_to(i, held[i].target);
        involved = 1;
    }
    int deps = open_deps(node_of(stream, 0, 0));
    return deps == 2 ? 2 : (involved || deps);
}

/* The candidate is about to wait for ``stream`` (a synchronize, a copy from pageable memory):
   open its held work and what that waits for, which the call then waits for; nothing else.
   Where what it waits for is not known, open and drain everything (imprecise). A wait that is
   not followed (a dependency made around the interposed calls) is opened by the watchdog. */
static void before_stream_wait(cudaStream_t stream) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    int opened = open_stream(stream);
    opened_for_a_wait(opened);
    pthread_mutex_unlock(&lock);
    if (opened == 2)
        open_and_drain_all();
}

static void before_event_wait(cudaEvent_t event) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    int opened = open_deps(node_of(event, 1, 0));
    opened_for_a_wait(opened);
    pthread_mutex_unlock(&lock);
    if (opened == 2)
        open_and_drain_all();
}

/* A query of held work: that work is opened and drained, so that held work looks like work
   that finishes rather than work that never starts; but a query does not wait, so what it let
   go would have run on after forward returned: the hold no longer tests this call
   (imprecise). A query of anything else is left alone. */
static void before_stream_query(cudaStream_t stream) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    int opened = open_stream(stream);
    if (opened)
        imprecise++;
    pthread_mutex_unlock(&lock);
    if (opened == 2 || (opened && !poll_until(stream_done, stream, watchdog_s)))
        open_and_drain_all();
}

static void before_event_query(cudaEvent_t event) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    int opened = open_deps(node_of(event, 1, 0));
    if (opened)
        imprecise++;
    pthread_mutex_unlock(&lock);
    if (opened == 2 || (opened && !poll_until(event_done, event, watchdog_s)))
        open_and_drain_all();
}

/* The candidate's call waits for the legacy default stream (a copy to or from pageable
   memory): that stream's work and what it waits for, and the blocking streams, which the
   legacy stream waits for. */
static void before_legacy_wait(int per_thread) {
    if (!atomic_load(&holding))
        return;
    if (per_thread) {
        before_stream_wait(STREAM_PER_THREAD);
        return;
    }
    pthread_mutex_lock(&lock);
    int opened = open_stream(STREAM_LEGACY);
    for (int i = 0; i < MAX_HELD && opened != 2; i++) {
        unsigned flags = STREAM_NON_BLOCKING;
        cudaStream_t stream = held[i].stream;
        int special = stream == STREAM_LEGACY || stream == STREAM_PER_THREAD || !stream;
        if (held[i].in_use && !special && driver.stream_flags(stream, &flags) == 0 &&
            !(flags & STREAM_NON_BLOCKING)) {
            int more = open_stream(stream);
            opened = more == 2 ? 2 : (opened || more);
        }
    }
    opened_for_a_wait(opened);
    pthread_mutex_unlock(&lock);
    if (opened == 2)
        open_and_drain_all();
}

static long long nanoseconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *watchdog(void *unused) {
    (void)unused;
    double stuck_since = 0;
    for (;;) {
        usleep(2000);
        if (!atomic_load(&holding))
            continue;
        long long since = atomic_load(&queuing_since_ns);
        int stuck = since && nanoseconds() - since > 20000000LL; /* a queuing call, 20 ms */
        if (!stuck && now() - hold_started <= watchdog_s)
            continue;
        if (pthread_mutex_trylock(&lock) == 0) {
            if (open_all())
                imprecise++;
            hold_started = now();
            pthread_mutex_unlock(&lock);
            stuck_since = 0;
        } else if (!stuck_since) {
            stuck_since = now();
        } else if (now() - stuck_since > 0.1) { /* the lock's holder is stuck in the driver */
            for (int i = 0; i < MAX_HELD; i++)
                __atomic_store_n(&host_words[i], held[i].target, __ATOMIC_SEQ_CST);
        }
    }
    return NULL;
}

/* ---- what the harness calls ------------------------------------------------------------ */

/* Once per process, after CUDA is initialized: the driver's calls, the gate's words (page-locked
   host memory mapped into the device, zeroed) and the watchdog. 0 on success; kp_gate_error()
   says what failed. */
int kp_gate_init(void) {
    REAL(cudaError_t(*)(void **, size_t, unsigned), cudaHostAlloc, CUDART);
    REAL(cudaError_t(*)(void **, void *, unsigned), cudaHostGetDevicePointer, CUDART);
    if (!real_cudaHostAlloc || !real_cudaHostGetDevicePointer) {
        snprintf(error_text, sizeof error_text, "the CUDA runtime (%s) is not loaded", CUDART);
        return -1;
    }
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!library)
        library = dlopen("libcuda.so.1", RTLD_NOW);
    if (library) {
        driver.wait_value = dlsym(library, "cuStreamWaitValue32_v2");
        if (!driver.wait_value) /* a driver whose plain name is the current version */
            driver.wait_value = dlsym(library, "cuStreamWaitValue32");
        driver.stream_query = dlsym(library, "cuStreamQuery");
        driver.event_query = dlsym(library, "cuEventQuery");
        driver.is_capturing = dlsym(library, "cuStreamIsCapturing");
        driver.stream_flags = dlsym(library, "cuStreamGetFlags");
        driver.pointer_attribute = dlsym(library, "cuPointerGetAttribute");
    }
    if (!driver.wait_value || !driver.stream_query || !driver.event_query ||
        !driver.is_capturing || !driver.stream_flags || !driver.pointer_attribute) {
        snprintf(error_text, sizeof error_text,
                 "the CUDA driver (libcuda.so.1) lacks stream memory operations or queries");
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
   now until kp_gate_release; the watchdog opens everything after ``watchdog_after_s``. */
void kp_gate_hold(uintptr_t stream, double watchdog_after_s) {
    pthread_mutex_lock(&lock);
    open_all();
    for (int i = 0; i < MAX_HELD; i++)
        held[i].in_use = 0;
    node_count = 0;
    caller_stream = (cudaStream_t)stream;
    holder = pthread_self();
    atomic_store(&after_forward, 0);
    watchdog_s = watchdog_after_s;
    hold_started = now();
    waits_queued = streams_held = imprecise = failures = 0;
    error_text[0] = '\0';
    atomic_store(&holding, 1);
    pthread_mutex_unlock(&lock);
    /* The candidate's own cuBLAS handles queue work on the stream they were given before. */
    for (int i = 0; i < MAX_HANDLES; i++)
        if (handles[i].handle)
            gate(handles[i].stream, 0);
}

/* Forward has returned: from now on, what a blocking call opens is not the candidate's wait. */
void kp_gate_forward_returned(void) { atomic_store(&after_forward, 1); }

/* Let go what the caller's stream was made to wait for (its joins), and nothing else. */
void kp_gate_open_callers_waits(void) {
    pthread_mutex_lock(&lock);
    if (open_deps(node_of(caller_stream, 0, 0)) == 2)
        imprecise++; /* it waits for more than the gate followed */
    pthread_mutex_unlock(&lock);
}

/* Let go everything held; no stream is held after this. */
void kp_gate_release(void) {
    pthread_mutex_lock(&lock);
    atomic_store(&holding, 0);
    open_all();
    pthread_mutex_unlock(&lock);
}

/* Of the last hold: waits queued, streams held, opens the gate could not make precise (the
   hold no longer tests that call), driver calls that failed. */
void kp_gate_counts(long *out) {
    pthread_mutex_lock(&lock);
    out[0] = waits_queued;
    out[1] = streams_held;
    out[2] = imprecise;
    out[3] = failures;
    pthread_mutex_unlock(&lock);
}

const char *kp_gate_error(void) { return error_text; }

/* ---- the interposed calls that queue work ---------------------------------------------- */

#define LAUNCH(name, per_thread)                                                              \
    cudaError_t name(const void *function, dim3 grid, dim3 block, void **args, size_t shared, \
                     cudaStream_t stream) {                                                   \
        REAL(cudaError_t(*)(const void *, dim3, dim3, void **, size_t, cudaStream_t), name,   \
             CUDART);                                                                         \
        if (!real_##name)                                                                     \
            return cudaErrorUnknown;                                                          \
        gate(stream, per_thread);                                                             \
        queuing(1);                                                                           \
        cudaError_t result = real_##name(function, grid, block, args, shared, stream);        \
        queuing(0);                                                                           \
        return result;                                                                        \
    }
LAUNCH(cudaLaunchKernel, 0)
LAUNCH(cudaLaunchKernel_ptsz, 1)
LAUNCH(__cudaLaunchKernel, 0) /* what nvcc 13's <<<...>>> calls */
LAUNCH(__cudaLaunchKernel_ptsz, 1)
LAUNCH(cudaLaunchCooperativeKernel, 0)
LAUNCH(cudaLaunchCooperativeKernel_ptsz, 1)

typedef struct {
    int id;
    char pad[4];
    char value[64];
} launch_attribute;

/* Events a launch records itself (ProgrammaticEvent, LaunchCompletionEvent) fire before the
   kernel's work is done: what waits for them cannot be followed as a join. */
static void launch_attributes(const cudaLaunchConfig_t *config) {
    const launch_attribute *attributes = config->attrs;
    for (unsigned i = 0; attributes && i < config->numAttrs; i++)
        if (attributes[i].id == 7 || attributes[i].id == 12) {
            pthread_mutex_lock(&lock);
            imprecise++;
            pthread_mutex_unlock(&lock);
        }
}

#define LAUNCH_EX(name, per_thread)                                                              \
    cudaError_t name(const cudaLaunchConfig_t *config, const void *function, void **args) {     \
        REAL(cudaError_t(*)(const cudaLaunchConfig_t *, const void *, void **), name, CUDART);  \
        if (!real_##name)                                                                        \
            return cudaErrorUnknown;                                                             \
        if (config && atomic_load(&holding)) {                                                   \
            gate(config->stream, per_thread);                                                    \
            launch_attributes(config);                                                           \
        }                                                                                        \
        queuing(1);                                                                              \
        cudaError_t result = real_##name(config, function, args);                                \
        queuing(0);                                                                              \
        return result;                                                                           \
    }
LAUNCH_EX(cudaLaunchKernelExC, 0)
LAUNCH_EX(cudaLaunchKernelExC_ptsz, 1)

/* The driver's type of the memory at ``pointer``: 1 page-locked host, 2 device, 4 managed; 0
   for pageable host memory, which the driver does not know. */
static int memory_type(const void *pointer) {
    int type = 0;
    if (!driver.pointer_attribute ||
        driver.pointer_attribute(&type, POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)pointer) != 0)
        return 0;
    return type;
}

static int on_device(const void *pointer) {
    int type = memory_type(pointer);
    return type == 2 || type == 4;
}

/* An asynchronous copy is queued work, unless it writes pageable host memory: the host then
   waits for the copy, so for the stream before it. */
static void before_copy(const void *dst, const void *src, int kind, cudaStream_t stream, int per_thread) {
    (void)src;
    if (!atomic_load(&holding))
        return;
    if (kind == MEMCPY_DEVICE_TO_DEVICE || memory_type(dst) != 0)
        gate(stream, per_thread);
    else
        before_stream_wait(normal(stream, per_thread));
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

/* A symbol is device memory: a copy to one is queued work; one from it waits if it writes
   pageable host memory. */
#define SYMBOL_COPY_ASYNC(name, per_thread, destination)                                       \
    cudaError_t name(void *a, const void *b, size_t count, size_t offset, int kind,            \
                     cudaStream_t stream) {                                                    \
        REAL(cudaError_t(*)(void *, const void *, size_t, size_t, int, cudaStream_t), name,    \
             CUDART);                                                                          \
        if (!real_##name)                                                                      \
            return cudaErrorUnknown;                                                           \
        if (destination)                                                                       \
            before_copy(destination, b, kind, stream, per_thread);                             \
        else                                                                                   \
            gate(stream, per_thread);                                                          \
        return real_##name(a, b, count, offset, kind, stream);                                 \
    }
SYMBOL_COPY_ASYNC(cudaMemcpyToSymbolAsync, 0, NULL)
SYMBOL_COPY_ASYNC(cudaMemcpyToSymbolAsync_ptsz, 1, NULL)
SYMBOL_COPY_ASYNC(cudaMemcpyFromSymbolAsync, 0, a)
SYMBOL_COPY_ASYNC(cudaMemcpyFromSymbolAsync_ptsz, 1, a)

#define SET_ASYNC(name, per_thread)                                            \
    cudaError_t name(void *dst, int value, size_t count, cudaStream_t stream) { \
        REAL(cudaError_t(*)(void *, int, size_t, cudaStream_t), name, CUDART); \
        if (!real_##name)                                                      \
            return cudaErrorUnknown;                                           \
        gate(stream, per_thread);                                              \
        return real_##name(dst, value, count, stream);                         \
    }
SET_ASYNC(cudaMemsetAsync, 0)
SET_ASYNC(cudaMemsetAsync_ptsz, 1)

#define SET_2D_ASYNC(name, per_thread)                                                         \
    cudaError_t name(void *dst, size_t pitch, int value, size_t width, size_t height,          \
                     cudaStream_t stream) {                                                    \
        REAL(cudaError_t(*)(void *, size_t, int, size_t, size_t, cudaStream_t), name, CUDART); \
        if (!real_##name)                                                                      \
            return cudaErrorUnknown;                                                           \
        gate(stream, per_thread);                                                              \
        return real_##name(dst, pitch, value, width, height, stream);                          \
    }
SET_2D_ASYNC(cudaMemset2DAsync, 0)
SET_2D_ASYNC(cudaMemset2DAsync_ptsz, 1)

/* Device memory set on the legacy (or per-thread) default stream: queued, not waited for. */
#define SET(name, params, args, per_thread)               \
    cudaError_t name params {                             \
        REAL(cudaError_t(*) params, name, CUDART);        \
        if (!real_##name)                                 \
            return cudaErrorUnknown;                      \
        gate(NULL, per_thread);                           \
        return real_##name args;                          \
    }
SET(cudaMemset, (void *dst, int value, size_t count), (dst, value, count), 0)
SET(cudaMemset_ptds, (void *dst, int value, size_t count), (dst, value, count), 1)
SET(cudaMemset2D, (void *dst, size_t pitch, int value, size_t width, size_t height),
    (dst, pitch, value, width, height), 0)
SET(cudaMemset2D_ptds, (void *dst, size_t pitch, int value, size_t width, size_t height),
    (dst, pitch, value, width, height), 1)

#define GRAPH_LAUNCH(name, per_thread)                            \
    cudaError_t name(void *graph, cudaStream_t stream) {          \
        REAL(cudaError_t(*)(void *, cudaStream_t), name, CUDART); \
        if (!real_##name)                                         \
            return cudaErrorUnknown;                              \
        gate(stream, per_thread);                                 \
        return real_##name(graph, stream);                        \
    }
GRAPH_LAUNCH(cudaGraphLaunch, 0)
GRAPH_LAUNCH(cudaGraphLaunch_ptsz, 1)

/* Libraries queue their kernels on the stream their handle was given: gated when it is given
   (PyTorch gives its handles the current stream before each call). */
#define SET_STREAM(name, library)                                   \
    status_t name(void *handle, cudaStream_t stream) {              \
        REAL(status_t(*)(void *, cudaStream_t), name, library);     \
        if (!real_##name)                                           \
            return 1;                                               \
        gate(stream, 0);                                            \
        return real_##name(handle, stream);                         \
    }
SET_STREAM(cudnnSetStream, "libcudnn.so")
SET_STREAM(cufftSetStream, "libcufft.so")
SET_STREAM(cusparseSetStream, "libcusparse.so")
SET_STREAM(cusolverDnSetStream, "libcusolver.so")
SET_STREAM(curandSetStream, "libcurand.so")

/* cuBLAS handles made by the candidate's own code (not PyTorch's): their stream is gated at
   every hold, since work may be queued on it without a stream being named in the hold. */
static int made_by(void *address, const char *library) {
    Dl_info info;
    return dladdr(address, &info) && info.dli_fname && strstr(info.dli_fname, library);
}

static void remember_handle(void *handle, cudaStream_t stream, int add) {
    pthread_mutex_lock(&lock);
    int free_slot = -1, found = 0;
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (handles[i].handle == handle && handle) {
            handles[i].stream = stream;
            found = 1;
        } else if (!handles[i].handle && free_slot < 0) {
            free_slot = i;
        }
    }
    if (add && !found && free_slot >= 0)
        handles[free_slot] = (struct handle){handle, stream};
    pthread_mutex_unlock(&lock);
}

status_t cublasCreate_v2(void **handle) {
    REAL(status_t(*)(void **), cublasCreate_v2, "libcublas.so");
    if (!real_cublasCreate_v2)
        return 1;
    status_t status = real_cublasCreate_v2(handle);
    if (status == 0 && !made_by(__builtin_return_address(0), "/torch/lib/")) {
        remember_handle(*handle, STREAM_LEGACY, 1);
        gate(STREAM_LEGACY, 0); /* made, not before: making it may use that stream itself */
    }
    return status;
}

status_t cublasSetStream_v2(void *handle, cudaStream_t stream) {
    REAL(status_t(*)(void *, cudaStream_t), cublasSetStream_v2, "libcublas.so");
    if (!real_cublasSetStream_v2)
        return 1;
    remember_handle(handle, normal(stream, 0), 0);
    gate(stream, 0);
    return real_cublasSetStream_v2(handle, stream);
}

status_t cublasDestroy_v2(void *handle) {
    REAL(status_t(*)(void *), cublasDestroy_v2, "libcublas.so");
    if (!real_cublasDestroy_v2)
        return 1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HANDLES; i++)
        if (handles[i].handle == handle)
            handles[i].handle = NULL;
    pthread_mutex_unlock(&lock);
    return real_cublasDestroy_v2(handle);
}

status_t cublasLtMatmul(void *handle, void *desc, const void *alpha, const void *a, void *a_layout,
                        const void *b, void *b_layout, const void *beta, const void *c,
                        void *c_layout, void *d, void *d_layout, const void *algo, void *workspace,
                        size_t workspace_size, cudaStream_t stream) {
    REAL(status_t(*)(void *, void *, const void *, const void *, void *, const void *, void *,
                     const void *, const void *, void *, void *, void *, const void *, void *,
                     size_t, cudaStream_t),
         cublasLtMatmul, "libcublasLt.so");
    if (!real_cublasLtMatmul)
        return 1;
    gate(stream, 0);
    return real_cublasLtMatmul(handle, desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d,
                               d_layout, algo, workspace, workspace_size, stream);
}

/* ---- events and joins ------------------------------------------------------------------ */

/* Lock held. ``event`` now stands for the work queued on ``stream`` so far and what that
   waits for; whether the stream's next work must go behind a new wait. */
static int recorded(cudaEvent_t event, cudaStream_t stream) {
    struct node *node = node_of(event, 1, 1);
    if (!node)
        return 0;
    node->count = node->overflow = 0;
    struct node *waits = node_of(stream, 0, 0);
    if (waits) {
        for (int i = 0; i < waits->count; i++)
            add_dep(node, waits->deps[i].slot, waits->deps[i].value);
        node->overflow |= waits->overflow;
    }
    int slot = slot_of(stream, 0);
    if (slot >= 0 && !is_open(slot)) {
        add_dep(node, slot, held[slot].target);
        held[slot].fresh_wait = 1;
        return 1;
    }
    return 0;
}

/* The record is made first: only one CUDA accepted changes what the gate follows. The stream's
   next work then goes behind a new wait at once, whatever queues it (cuBLAS's own launches
   too). */
#define EVENT_RECORD(name, per_thread, params, args)                     \
    cudaError_t name params {                                            \
        REAL(cudaError_t(*) params, name, CUDART);                       \
        if (!real_##name)                                                \
            return cudaErrorUnknown;                                     \
        cudaError_t result = real_##name args;                           \
        cudaStream_t on = normal(stream, per_thread);                    \
        if (result == cudaSuccess && atomic_load(&holding) && !capturing(on)) { \
            pthread_mutex_lock(&lock);                                   \
            int fresh = recorded(event, on);                             \
            pthread_mutex_unlock(&lock);                                 \
            if (fresh)                                                   \
                gate(on, per_thread);                                    \
        }                                                                \
        return result;                                                   \
    }
EVENT_RECORD(cudaEventRecord, 0, (cudaEvent_t event, cudaStream_t stream), (event, stream))
EVENT_RECORD(cudaEventRecord_ptsz, 1, (cudaEvent_t event, cudaStream_t stream), (event, stream))
EVENT_RECORD(cudaEventRecordWithFlags, 0, (cudaEvent_t event, cudaStream_t stream, unsigned flags),
             (event, stream, flags))
EVENT_RECORD(cudaEventRecordWithFlags_ptsz, 1,
             (cudaEvent_t event, cudaStream_t stream, unsigned flags), (event, stream, flags))

/* ``stream`` waits for what ``event`` stands for (once CUDA has accepted the wait). */
#define STREAM_WAIT_EVENT(name, per_thread)                                          \
    cudaError_t name(cudaStream_t stream, cudaEvent_t event, unsigned flags) {       \
        REAL(cudaError_t(*)(cudaStream_t, cudaEvent_t, unsigned), name, CUDART);     \
        if (!real_##name)                                                            \
            return cudaErrorUnknown;                                                 \
        cudaError_t result = real_##name(stream, event, flags);                      \
        cudaStream_t on = normal(stream, per_thread);                                \
        if (result == cudaSuccess && atomic_load(&holding) && !capturing(on)) {      \
            pthread_mutex_lock(&lock);                                               \
            struct node *from = node_of(event, 1, 0);                                \
            struct node *to = from ? node_of(on, 0, 1) : NULL;                       \
            if (from && to) {                                                        \
                for (int i = 0; i < from->count; i++)                                \
                    add_dep(to, from->deps[i].slot, from->deps[i].value);            \
                to->overflow |= from->overflow;                                      \
            }                                                                        \
            pthread_mutex_unlock(&lock);                                             \
        }                                                                            \
        return result;                                                               \
    }
STREAM_WAIT_EVENT(cudaStreamWaitEvent, 0)
STREAM_WAIT_EVENT(cudaStreamWaitEvent_ptsz, 1)

/* Lock held. Forget what ``key`` stood for: a new stream or event may get its address. */
static void forget(void *key, int is_event) {
    struct node *node = node_of(key, is_event, 0);
    if (node)
        node->key = NULL;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    REAL(cudaError_t(*)(cudaEvent_t), cudaEventDestroy, CUDART);
    if (!real_cudaEventDestroy)
        return cudaErrorUnknown;
    if (atomic_load(&holding)) {
        pthread_mutex_lock(&lock);
        forget(event, 1);
        pthread_mutex_unlock(&lock);
    }
    return real_cudaEventDestroy(event);
}

/* A destroyed stream's queued work still runs: its slot stays until the release opens it. */
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    REAL(cudaError_t(*)(cudaStream_t), cudaStreamDestroy, CUDART);
    if (!real_cudaStreamDestroy)
        return cudaErrorUnknown;
    if (atomic_load(&holding)) {
        pthread_mutex_lock(&lock);
        int i = slot_of(stream, 0);
        if (i >= 0)
            held[i].stream = NULL; /* never matches a stream again; opened at the release */
        forget(stream, 0);
        pthread_mutex_unlock(&lock);
    }
    return real_cudaStreamDestroy(stream);
}

/* ---- the interposed calls that wait ---------------------------------------------------- */

cudaError_t cudaDeviceSynchronize(void) {
    REAL(cudaError_t(*)(void), cudaDeviceSynchronize, CUDART);
    if (!real_cudaDeviceSynchronize)
        return cudaErrorUnknown;
    if (atomic_load(&holding)) { /* it waits for everything: open everything */
        pthread_mutex_lock(&lock);
        opened_for_a_wait(open_all());
        pthread_mutex_unlock(&lock);
    }
    return real_cudaDeviceSynchronize();
}

#define STREAM_SYNC(name, per_thread)                             \
    cudaError_t name(cudaStream_t stream) {                       \
        REAL(cudaError_t(*)(cudaStream_t), name, CUDART);         \
        if (!real_##name)                                         \
            return cudaErrorUnknown;                              \
        if (normal(stream, per_thread) == STREAM_LEGACY)          \
            before_legacy_wait(0);                                \
        else                                                      \
            before_stream_wait(normal(stream, per_thread));       \
        return real_##name(stream);                               \
    }
STREAM_SYNC(cudaStreamSynchronize, 0)
STREAM_SYNC(cudaStreamSynchronize_ptsz, 1)

#define STREAM_QUERY(name, per_thread)                            \
    cudaError_t name(cudaStream_t stream) {                       \
        REAL(cudaError_t(*)(cudaStream_t), name, CUDART);         \
        if (!real_##name)                                         \
            return cudaErrorUnknown;                              \
        before_stream_query(normal(stream, per_thread));          \
        return real_##name(stream);                               \
    }
STREAM_QUERY(cudaStreamQuery, 0)
STREAM_QUERY(cudaStreamQuery_ptsz, 1)

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    REAL(cudaError_t(*)(cudaEvent_t), cudaEventSynchronize, CUDART);
    if (!real_cudaEventSynchronize)
        return cudaErrorUnknown;
    before_event_wait(event);
    return real_cudaEventSynchronize(event);
}

/* PyTorch's caching allocators query the events of blocks freed with uses on other streams
   on every allocation, and only defer reusing a block while it answers "not ready": those
   queries are not the candidate's, and are answered as they are. */
cudaError_t cudaEventQuery(cudaEvent_t event) {
    REAL(cudaError_t(*)(cudaEvent_t), cudaEventQuery, CUDART);
    if (!real_cudaEventQuery)
        return cudaErrorUnknown;
    if (atomic_load(&holding) && !made_by(__builtin_return_address(0), "libc10_cuda"))
        before_event_query(event);
    return real_cudaEventQuery(event);
}

/* Synchronous copies: between device buffers they are queued on the default stream; with host
   memory (page-locked too) the host waits for that stream first. */
#define COPY(name, params, args, dst, src, per_thread)                 \
    cudaError_t name params {                                          \
        REAL(cudaError_t(*) params, name, CUDART);                     \
        if (!real_##name)                                              \
            return cudaErrorUnknown;                                   \
        if (atomic_load(&holding)) {                                   \
            if (on_device(dst) && on_device(src))                      \
                gate(NULL, per_thread);                                \
            else                                                       \
                before_legacy_wait(per_thread);                        \
        }                                                              \
        return real_##name args;                                       \
    }
COPY(cudaMemcpy, (void *dst, const void *src, size_t count, int kind), (dst, src, count, kind), dst,
     src, 0)
COPY(cudaMemcpy_ptds, (void *dst, const void *src, size_t count, int kind), (dst, src, count, kind),
     dst, src, 1)
COPY(cudaMemcpy2D,
     (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind),
     (dst, dpitch, src, spitch, width, height, kind), dst, src, 0)
COPY(cudaMemcpy2D_ptds,
     (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind),
     (dst, dpitch, src, spitch, width, height, kind), dst, src, 1)
COPY(cudaMemcpyToSymbol, (const void *symbol, const void *src, size_t count, size_t offset, int kind),
     (symbol, src, count, offset, kind), src, src, 0)
COPY(cudaMemcpyToSymbol_ptds,
     (const void *symbol, const void *src, size_t count, size_t offset, int kind),
     (symbol, src, count, offset, kind), src, src, 1)
COPY(cudaMemcpyFromSymbol, (void *dst, const void *symbol, size_t count, size_t offset, int kind),
     (dst, symbol, count, offset, kind), dst, dst, 0)
COPY(cudaMemcpyFromSymbol_ptds,
     (void *dst, const void *symbol, size_t count, size_t offset, int kind),
     (dst, symbol, count, offset, kind), dst, dst, 1)

/* Frees synchronize the device (a null pointer frees nothing and waits for nothing). */
#define FREE(name)                                              \
    cudaError_t name(void *pointer) {                           \
        REAL(cudaError_t(*)(void *), name, CUDART);             \
        if (!real_##name)                                       \
            return cudaErrorUnknown;                            \
        if (pointer && atomic_load(&holding)) {                 \
            pthread_mutex_lock(&lock);                          \
            opened_for_a_wait(open_all());                      \
            pthread_mutex_unlock(&lock);                        \
            cudaDeviceSynchronize();                            \
        }                                                       \
        return real_##name(pointer);                            \
    }
FREE(cudaFree)
FREE(cudaFreeHost)

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
