/* The CUDA calls the stream gate interposes (its design: the comment at the top of
   stream_gate.c). Each calls on to the real function, after telling the gate what it is about
   to queue or to wait for. */
#define _GNU_SOURCE
#include "stream_gate.h"

#include <dlfcn.h>

/* ---- calls that queue work ------------------------------------------------------------- */

#define LAUNCH(name, per_thread)                                                              \
    cudaError_t name(const void *function, dim3 grid, dim3 block, void **args, size_t shared, \
                     cudaStream_t stream) {                                                   \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(const void *, dim3, dim3, void **, size_t,   \
                cudaStream_t), name, CUDART);                                                 \
        kpg_gate(stream, per_thread);                                                         \
        kpg_queuing(1);                                                                       \
        cudaError_t result = real_##name(function, grid, block, args, shared, stream);        \
        kpg_queuing(0);                                                                       \
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
            kpg_imprecise();
        }
}

#define LAUNCH_EX(name, per_thread)                                                         \
    cudaError_t name(const cudaLaunchConfig_t *config, const void *function, void **args) { \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(const cudaLaunchConfig_t *, const void *,  \
                void **), name, CUDART);                                                    \
        if (config && kpg_holding()) {                                                      \
            kpg_gate(config->stream, per_thread);                                           \
            launch_attributes(config);                                                      \
        }                                                                                   \
        kpg_queuing(1);                                                                     \
        cudaError_t result = real_##name(config, function, args);                           \
        kpg_queuing(0);                                                                     \
        return result;                                                                      \
    }
LAUNCH_EX(cudaLaunchKernelExC, 0)
LAUNCH_EX(cudaLaunchKernelExC_ptsz, 1)

static int on_device(const void *pointer) {
    int type = kpg_memory_type(pointer);
    return type == 2 || type == 4;
}

/* An asynchronous copy is queued work, unless it writes pageable host memory: the host then
   waits for the copy, so for the stream before it. */
static void before_copy(const void *dst, const void *src, int kind, cudaStream_t stream, int per_thread) {
    (void)src;
    if (!kpg_holding())
        return;
    if (kind == MEMCPY_DEVICE_TO_DEVICE || kpg_memory_type(dst) != 0)
        kpg_gate(stream, per_thread);
    else
        kpg_before_stream_wait(kpg_normal(stream, per_thread));
}

#define COPY_ASYNC(name, per_thread)                                                            \
    cudaError_t name(void *dst, const void *src, size_t count, int kind, cudaStream_t stream) { \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(void *, const void *, size_t, int,             \
                cudaStream_t), name, CUDART);                                                   \
        before_copy(dst, src, kind, stream, per_thread);                                        \
        return real_##name(dst, src, count, kind, stream);                                      \
    }
COPY_ASYNC(cudaMemcpyAsync, 0)
COPY_ASYNC(cudaMemcpyAsync_ptsz, 1)

#define COPY_2D_ASYNC(name, per_thread)                                                      \
    cudaError_t name(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, \
                     size_t height, int kind, cudaStream_t stream) {                         \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(void *, size_t, const void *, size_t,       \
                size_t, size_t, int, cudaStream_t), name, CUDART);                           \
        before_copy(dst, src, kind, stream, per_thread);                                     \
        return real_##name(dst, dpitch, src, spitch, width, height, kind, stream);           \
    }
COPY_2D_ASYNC(cudaMemcpy2DAsync, 0)
COPY_2D_ASYNC(cudaMemcpy2DAsync_ptsz, 1)

/* A symbol is device memory: a copy to one is queued work; one from it waits if it writes
   pageable host memory. */
#define SYMBOL_COPY_ASYNC(name, per_thread, destination)                                    \
    cudaError_t name(void *a, const void *b, size_t count, size_t offset, int kind,         \
                     cudaStream_t stream) {                                                 \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(void *, const void *, size_t, size_t, int, \
                cudaStream_t), name, CUDART);                                               \
        if (destination)                                                                    \
            before_copy(destination, b, kind, stream, per_thread);                          \
        else                                                                                \
            kpg_gate(stream, per_thread);                                                   \
        return real_##name(a, b, count, offset, kind, stream);                              \
    }
SYMBOL_COPY_ASYNC(cudaMemcpyToSymbolAsync, 0, NULL)
SYMBOL_COPY_ASYNC(cudaMemcpyToSymbolAsync_ptsz, 1, NULL)
SYMBOL_COPY_ASYNC(cudaMemcpyFromSymbolAsync, 0, a)
SYMBOL_COPY_ASYNC(cudaMemcpyFromSymbolAsync_ptsz, 1, a)

#define SET_ASYNC(name, per_thread)                                                        \
    cudaError_t name(void *dst, int value, size_t count, cudaStream_t stream) {            \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(void *, int, size_t, cudaStream_t), name, \
                CUDART);                                                                   \
        kpg_gate(stream, per_thread);                                                      \
        return real_##name(dst, value, count, stream);                                     \
    }
SET_ASYNC(cudaMemsetAsync, 0)
SET_ASYNC(cudaMemsetAsync_ptsz, 1)

#define SET_2D_ASYNC(name, per_thread)                                                \
    cudaError_t name(void *dst, size_t pitch, int value, size_t width, size_t height, \
                     cudaStream_t stream) {                                           \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(void *, size_t, int, size_t, size_t, \
                cudaStream_t), name, CUDART);                                         \
        kpg_gate(stream, per_thread);                                                 \
        return real_##name(dst, pitch, value, width, height, stream);                 \
    }
SET_2D_ASYNC(cudaMemset2DAsync, 0)
SET_2D_ASYNC(cudaMemset2DAsync_ptsz, 1)

/* Device memory set on the legacy (or per-thread) default stream: queued, not waited for. */
#define SET(name, params, args, per_thread)                             \
    cudaError_t name params {                                           \
        REAL_OR(cudaErrorUnknown, cudaError_t(*) params, name, CUDART); \
        kpg_gate(NULL, per_thread);                                     \
        return real_##name args;                                        \
    }
SET(cudaMemset, (void *dst, int value, size_t count), (dst, value, count), 0)
SET(cudaMemset_ptds, (void *dst, int value, size_t count), (dst, value, count), 1)
SET(cudaMemset2D, (void *dst, size_t pitch, int value, size_t width, size_t height),
    (dst, pitch, value, width, height), 0)
SET(cudaMemset2D_ptds, (void *dst, size_t pitch, int value, size_t width, size_t height),
    (dst, pitch, value, width, height), 1)

#define GRAPH_LAUNCH(name, per_thread)                                                 \
    cudaError_t name(void *graph, cudaStream_t stream) {                               \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(void *, cudaStream_t), name, CUDART); \
        kpg_gate(stream, per_thread);                                                  \
        return real_##name(graph, stream);                                             \
    }
GRAPH_LAUNCH(cudaGraphLaunch, 0)
GRAPH_LAUNCH(cudaGraphLaunch_ptsz, 1)

/* Libraries queue their kernels on the stream their handle was given: gated when it is given
   (PyTorch gives its handles the current stream before each call). */
#define SET_STREAM(name, library)                                     \
    status_t name(void *handle, cudaStream_t stream) {                \
        REAL_OR(1, status_t(*)(void *, cudaStream_t), name, library); \
        kpg_gate(stream, 0);                                          \
        return real_##name(handle, stream);                           \
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

status_t cublasCreate_v2(void **handle) {
    REAL_OR(1, status_t(*)(void **), cublasCreate_v2, "libcublas.so");
    status_t status = real_cublasCreate_v2(handle);
    if (status == 0 && !made_by(__builtin_return_address(0), "/torch/lib/")) {
        kpg_remember_handle(*handle, STREAM_LEGACY, 1);
        kpg_gate(STREAM_LEGACY, 0); /* made, not before: making it may use that stream itself */
    }
    return status;
}

status_t cublasSetStream_v2(void *handle, cudaStream_t stream) {
    REAL_OR(1, status_t(*)(void *, cudaStream_t), cublasSetStream_v2, "libcublas.so");
    kpg_remember_handle(handle, kpg_normal(stream, 0), 0);
    kpg_gate(stream, 0);
    return real_cublasSetStream_v2(handle, stream);
}

status_t cublasDestroy_v2(void *handle) {
    REAL_OR(1, status_t(*)(void *), cublasDestroy_v2, "libcublas.so");
    kpg_forget_handle(handle);
    return real_cublasDestroy_v2(handle);
}

status_t cublasLtMatmul(void *handle, void *desc, const void *alpha, const void *a, void *a_layout,
                        const void *b, void *b_layout, const void *beta, const void *c,
                        void *c_layout, void *d, void *d_layout, const void *algo, void *workspace,
                        size_t workspace_size, cudaStream_t stream) {
    REAL_OR(1, status_t(*)(void *, void *, const void *, const void *, void *, const void *,
            void *, const void *, const void *, void *, void *, void *, const void *, void *,
            size_t, cudaStream_t), cublasLtMatmul, "libcublasLt.so");
    kpg_gate(stream, 0);
    return real_cublasLtMatmul(handle, desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d,
                               d_layout, algo, workspace, workspace_size, stream);
}

/* ---- events and joins ------------------------------------------------------------------ */

/* The record or the wait is made first: only what CUDA accepted changes what the gate follows. */
#define EVENT_RECORD(name, per_thread, params, args)                         \
    cudaError_t name params {                                                \
        REAL_OR(cudaErrorUnknown, cudaError_t(*) params, name, CUDART);      \
        cudaError_t result = real_##name args;                               \
        if (result == cudaSuccess)                                           \
            kpg_recorded(event, kpg_normal(stream, per_thread), per_thread); \
        return result;                                                       \
    }
EVENT_RECORD(cudaEventRecord, 0, (cudaEvent_t event, cudaStream_t stream), (event, stream))
EVENT_RECORD(cudaEventRecord_ptsz, 1, (cudaEvent_t event, cudaStream_t stream), (event, stream))
EVENT_RECORD(cudaEventRecordWithFlags, 0, (cudaEvent_t event, cudaStream_t stream, unsigned flags),
             (event, stream, flags))
EVENT_RECORD(cudaEventRecordWithFlags_ptsz, 1,
             (cudaEvent_t event, cudaStream_t stream, unsigned flags), (event, stream, flags))

#define STREAM_WAIT_EVENT(name, per_thread)                                                  \
    cudaError_t name(cudaStream_t stream, cudaEvent_t event, unsigned flags) {               \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(cudaStream_t, cudaEvent_t, unsigned), name, \
                CUDART);                                                                     \
        cudaError_t result = real_##name(stream, event, flags);                              \
        if (result == cudaSuccess)                                                           \
            kpg_waited(kpg_normal(stream, per_thread), event);                               \
        return result;                                                                       \
    }
STREAM_WAIT_EVENT(cudaStreamWaitEvent, 0)
STREAM_WAIT_EVENT(cudaStreamWaitEvent_ptsz, 1)

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    REAL_OR(cudaErrorUnknown, cudaError_t(*)(cudaEvent_t), cudaEventDestroy, CUDART);
    kpg_forget(event, 1);
    return real_cudaEventDestroy(event);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    REAL_OR(cudaErrorUnknown, cudaError_t(*)(cudaStream_t), cudaStreamDestroy, CUDART);
    kpg_stream_destroyed(stream);
    return real_cudaStreamDestroy(stream);
}

/* ---- calls that wait ---------------------------------------------------- */

cudaError_t cudaDeviceSynchronize(void) {
    REAL_OR(cudaErrorUnknown, cudaError_t(*)(void), cudaDeviceSynchronize, CUDART);
    kpg_open_everything_for_a_wait(); /* it waits for everything */
    return real_cudaDeviceSynchronize();
}

#define STREAM_SYNC(name, per_thread)                                          \
    cudaError_t name(cudaStream_t stream) {                                    \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(cudaStream_t), name, CUDART); \
        if (kpg_normal(stream, per_thread) == STREAM_LEGACY)                   \
            kpg_before_legacy_wait(0);                                         \
        else                                                                   \
            kpg_before_stream_wait(kpg_normal(stream, per_thread));            \
        return real_##name(stream);                                            \
    }
STREAM_SYNC(cudaStreamSynchronize, 0)
STREAM_SYNC(cudaStreamSynchronize_ptsz, 1)

#define STREAM_QUERY(name, per_thread)                                         \
    cudaError_t name(cudaStream_t stream) {                                    \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(cudaStream_t), name, CUDART); \
        kpg_before_stream_query(kpg_normal(stream, per_thread));               \
        return real_##name(stream);                                            \
    }
STREAM_QUERY(cudaStreamQuery, 0)
STREAM_QUERY(cudaStreamQuery_ptsz, 1)

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    REAL_OR(cudaErrorUnknown, cudaError_t(*)(cudaEvent_t), cudaEventSynchronize, CUDART);
    kpg_before_event_wait(event);
    return real_cudaEventSynchronize(event);
}

/* PyTorch's caching allocators query the events of blocks freed with uses on other streams
   on every allocation, and only defer reusing a block while it answers "not ready": those
   queries are not the candidate's, and are answered as they are. */
cudaError_t cudaEventQuery(cudaEvent_t event) {
    REAL_OR(cudaErrorUnknown, cudaError_t(*)(cudaEvent_t), cudaEventQuery, CUDART);
    if (kpg_holding() && !made_by(__builtin_return_address(0), "libc10_cuda"))
        kpg_before_event_query(event);
    return real_cudaEventQuery(event);
}

/* Synchronous copies: between device buffers they are queued on the default stream; with host
   memory (page-locked too) the host waits for that stream first. */
#define COPY(name, params, args, dst, src, per_thread)                  \
    cudaError_t name params {                                           \
        REAL_OR(cudaErrorUnknown, cudaError_t(*) params, name, CUDART); \
        if (kpg_holding()) {                                            \
            if (on_device(dst) && on_device(src))                       \
                kpg_gate(NULL, per_thread);                             \
            else                                                        \
                kpg_before_legacy_wait(per_thread);                     \
        }                                                               \
        return real_##name args;                                        \
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
#define FREE(name)                                                       \
    cudaError_t name(void *pointer) {                                    \
        REAL_OR(cudaErrorUnknown, cudaError_t(*)(void *), name, CUDART); \
        if (pointer && kpg_holding()) {                                  \
            kpg_open_everything_for_a_wait();                            \
            cudaDeviceSynchronize();                                     \
        }                                                                \
        return real_##name(pointer);                                     \
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
