/* A kernel library as the stream gate meets one: it calls the CUDA runtime it was linked
   against (the fake libcudart.so.13 here), and is loaded privately (RTLD_LOCAL), as Python
   loads a candidate's extension. */
#include <stddef.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef struct {
    unsigned x, y, z;
} dim3;

cudaError_t __cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaEventRecord(void *, cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, void *, unsigned);
cudaError_t cudaEventSynchronize(void *);
cudaError_t cudaEventQuery(void *);
cudaError_t cudaFree(void *);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaEventDestroy(void *);

static const dim3 grid = {2, 3, 4}, block = {32, 1, 1};

int launch(cudaStream_t stream) {
    return __cudaLaunchKernel((const void *)0xf00, grid, block, (void **)0x1234, 128, stream);
}

int launch_per_thread(cudaStream_t stream) {
    return __cudaLaunchKernel_ptsz((const void *)0xf00, grid, block, (void **)0x1234, 128, stream);
}

int launch_classic(cudaStream_t stream) {
    return cudaLaunchKernel((const void *)0xf00, grid, block, (void **)0x1234, 128, stream);
}

int copy(void *dst, const void *src, int kind, cudaStream_t stream) {
    return cudaMemcpyAsync(dst, src, 64, kind, stream);
}

int sync_device(void) { return cudaDeviceSynchronize(); }
int sync_stream(cudaStream_t stream) { return cudaStreamSynchronize(stream); }
int destroy(cudaStream_t stream) { return cudaStreamDestroy(stream); }
int query_stream(cudaStream_t stream) { return cudaStreamQuery(stream); }
int record(void *event, cudaStream_t stream) { return cudaEventRecord(event, stream); }
int wait_event(cudaStream_t stream, void *event) { return cudaStreamWaitEvent(stream, event, 0); }
int wait_event_flags(cudaStream_t stream, void *event, unsigned flags) {
    return cudaStreamWaitEvent(stream, event, flags);
}
int destroy_event(void *event) { return cudaEventDestroy(event); }
int sync_event(void *event) { return cudaEventSynchronize(event); }
int query_event(void *event) { return cudaEventQuery(event); }
int free_memory(void *pointer) { return cudaFree(pointer); }
int copy_sync(void *dst, const void *src, int kind) { return cudaMemcpy(dst, src, 64, kind); }
