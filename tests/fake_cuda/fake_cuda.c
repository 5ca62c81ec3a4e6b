/* A CUDA runtime and driver that run on no device, for testing the stream gate on a CPU.

Built twice by tests/fake_cuda/__init__.py: as libcuda.so.1 (-DFAKE_DRIVER: cuStreamWaitValue32,
over host memory) and as libcudart.so.13 (the runtime calls the gate forwards to,
linked against the first). Every call is appended to a log that the test reads back
(fake_log), with its arguments, so a test sees exactly what reached "CUDA" and in which order.
A stream is "ready" (cudaStreamQuery, cudaStreamSynchronize) when no wait queued on it waits
for a word that has not reached its value: the one device semantics the gate relies on.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef struct {
    unsigned x, y, z;
} dim3;

#define LOG_SIZE 65536
#define MAX_WAITS 1024

#ifdef FAKE_DRIVER

static char log_text[LOG_SIZE];
static size_t log_used;

void fake_record(const char *format, ...) {
    va_list args;
    va_start(args, format);
    int written = vsnprintf(log_text + log_used, LOG_SIZE - log_used, format, args);
    va_end(args);
    if (written > 0 && log_used + (size_t)written + 1 < LOG_SIZE) {
        log_used += (size_t)written;
        log_text[log_used++] = '\n';
        log_text[log_used] = '\0';
    }
}

const char *fake_log(void) { return log_text; }

void fake_clear(void) {
    log_used = 0;
    log_text[0] = '\0';
}

static struct {
    void *stream;
    volatile uint32_t *word;
    uint32_t value;
} waits[MAX_WAITS];
static int wait_count;

int cuStreamWaitValue32_v2(void *stream, unsigned long long address, uint32_t value, unsigned flags) {
    fake_record("wait stream=%p value=%u flags=%u", stream, value, flags);
    if (wait_count < MAX_WAITS) {
        waits[wait_count].stream = stream;
        waits[wait_count].word = (volatile uint32_t *)(uintptr_t)address;
        waits[wait_count].value = value;
        wait_count++;
    }
    return 0;
}

/* Is every wait queued anywhere satisfied? */
int fake_all_ready(void) {
    for (int i = 0; i < wait_count; i++)
        if (*waits[i].word < waits[i].value)
            return 0;
    return 1;
}

/* ``stream`` waits for everything ``joined`` waits for (an event join, as far as the gate can
   tell). */
void fake_join(void *stream, void *joined) {
    int count = wait_count;
    for (int i = 0; i < count && wait_count < MAX_WAITS; i++)
        if (waits[i].stream == joined) {
            waits[wait_count] = waits[i];
            waits[wait_count].stream = stream;
            wait_count++;
        }
}

/* Is every wait queued on ``stream`` satisfied? */
int fake_stream_ready(void *stream) {
    for (int i = 0; i < wait_count; i++)
        if (waits[i].stream == stream && *waits[i].word < waits[i].value)
            return 0;
    return 1;
}

#else /* the runtime */

void fake_record(const char *format, ...);
int fake_stream_ready(void *stream);

enum { cudaSuccess = 0, cudaErrorNotReady = 600 };

int fake_all_ready(void);

cudaError_t cudaHostAlloc(void **pointer, size_t size, unsigned flags) {
    (void)flags;
    *pointer = calloc(1, size);
    return *pointer ? cudaSuccess : 2;
}

cudaError_t cudaHostGetDevicePointer(void **device, void *host, unsigned flags) {
    (void)flags;
    *device = host; /* one address space, as with UVA */
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    return fake_stream_ready(stream) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    int ready = fake_stream_ready(stream);
    fake_record("stream_synchronize stream=%p ready=%d", stream, ready);
    return ready ? cudaSuccess : 7; /* a real one would never have returned */
}

cudaError_t cudaEventQuery(void *event) {
    (void)event;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    int ready = fake_all_ready();
    fake_record("device_synchronize ready=%d", ready);
    return ready ? cudaSuccess : 7; /* a real one would never have returned */
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, int *status) {
    (void)stream;
    *status = 0;
    return cudaSuccess;
}

/* Pointers below 0x10000 are device memory, others pageable host memory. */
cudaError_t cudaPointerGetAttributes(int *attributes, const void *pointer) {
    attributes[0] = (uintptr_t)pointer < 0x10000 ? 2 : 0;
    return cudaSuccess;
}

#define LAUNCH(name)                                                                            \
    cudaError_t name(const void *function, dim3 grid, dim3 block, void **args, size_t shared,  \
                     cudaStream_t stream) {                                                     \
        fake_record(#name " function=%p grid=%u,%u,%u block=%u,%u,%u args=%p shared=%zu "      \
                          "stream=%p",                                                          \
                    function, grid.x, grid.y, grid.z, block.x, block.y, block.z, (void *)args,  \
                    shared, stream);                                                            \
        return 42; /* a code the caller must see unchanged */                                  \
    }
LAUNCH(cudaLaunchKernel)
LAUNCH(__cudaLaunchKernel)
LAUNCH(__cudaLaunchKernel_ptsz)

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind, cudaStream_t stream) {
    fake_record("memcpy dst=%p src=%p count=%zu kind=%d stream=%p", dst, src, count, kind, stream);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    fake_record("destroy stream=%p", stream);
    return cudaSuccess;
}

#endif
