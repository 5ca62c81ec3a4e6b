/* The stream gate's two parts share these: stream_gate.c (the state, the holds and what opens
   them, what the harness calls) and stream_gate_calls.c (the CUDA calls it interposes). Why it
   works as it does: the comment at the top of stream_gate.c. Nothing here is exported from the
   library but the kp_gate_* functions and the interposed CUDA calls. */
#ifndef KP_STREAM_GATE_H
#define KP_STREAM_GATE_H

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

#define INTERNAL __attribute__((visibility("hidden")))

/* ``name`` as the library after this one defines it (stream_gate.c). */
INTERNAL void *kpg_real(const char *name, const char *library);

#define CUDART "libcudart.so"
#define REAL(type, name, library)                                                     \
    static __typeof__(type) real_##name;                                              \
    if (!real_##name)                                                                 \
        real_##name = (type)kpg_real(#name, library);
/* The same in an interposed call, which returns ``failure`` where the real one is missing. */
#define REAL_OR(failure, type, name, library)                                         \
    REAL(type, name, library)                                                         \
    if (!real_##name)                                                                 \
        return failure;

/* What the interposed calls ask of the gate (stream_gate.c). */
INTERNAL int kpg_holding(void);
INTERNAL cudaStream_t kpg_normal(cudaStream_t stream, int per_thread);
INTERNAL int kpg_capturing(cudaStream_t stream);
INTERNAL void kpg_gate(cudaStream_t stream, int per_thread);
INTERNAL void kpg_queuing(int starts);
INTERNAL void kpg_before_stream_wait(cudaStream_t stream);
INTERNAL void kpg_before_event_wait(cudaEvent_t event);
INTERNAL void kpg_before_stream_query(cudaStream_t stream);
INTERNAL void kpg_before_event_query(cudaEvent_t event);
INTERNAL void kpg_before_legacy_wait(int per_thread);
INTERNAL void kpg_open_everything_for_a_wait(void);
INTERNAL void kpg_imprecise(void);
INTERNAL void kpg_recorded(cudaEvent_t event, cudaStream_t stream, int per_thread);
INTERNAL void kpg_waited(cudaStream_t stream, cudaEvent_t event);
INTERNAL void kpg_forget(void *key, int is_event);
INTERNAL void kpg_stream_destroyed(cudaStream_t stream);
INTERNAL void kpg_remember_handle(void *handle, cudaStream_t stream, int add);
INTERNAL void kpg_forget_handle(void *handle);
INTERNAL int kpg_memory_type(const void *pointer);

#endif
