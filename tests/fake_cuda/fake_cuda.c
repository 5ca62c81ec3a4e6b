/* A CUDA runtime and driver that run on no device, for testing the stream gate on a CPU.

Built twice by tests/fake_cuda/__init__.py: as libcuda.so.1 (-DFAKE_DRIVER: waits on words in
host memory, the queries) and as libcudart.so.13 (the runtime calls the gate forwards to,
linked against the first). Calls are appended to a log the test reads back (fake_log), with
their arguments, so a test sees what reached "CUDA" and in which order.

The one device semantics the gate relies on is modelled: a stream depends on the waits queued
on it and on what it was made to wait for (cudaStreamWaitEvent: what the event's stream
depended on when it was recorded); a stream or event is "ready" when every word it depends on
has reached its value. A synchronize of something not ready would never return on a device:
here it returns an error code and logs ready=0, which the tests look for.
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
#define MAX_WAITS 4096
#define MAX_THINGS 4096 /* streams and events */
#define MAX_DEPENDS 256

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
    volatile uint32_t *word;
    uint32_t value;
} waits[MAX_WAITS];
static int wait_count;

static struct thing { /* a stream or an event, and the waits it depends on */
    void *key;
    int is_event;
    int count;
    int depends[MAX_DEPENDS];
} things[MAX_THINGS];
static int thing_count;

static struct thing *thing(void *key, int is_event) {
    for (int i = 0; i < thing_count; i++)
        if (things[i].key == key && things[i].is_event == is_event)
            return &things[i];
    if (thing_count == MAX_THINGS)
        abort(); /* a test that needs more: raise MAX_THINGS */
    struct thing *made = &things[thing_count++];
    memset(made, 0, sizeof *made);
    made->key = key;
    made->is_event = is_event;
    return made;
}

static void depend(struct thing *on, int wait) {
    if (on->count < MAX_DEPENDS)
        on->depends[on->count++] = wait;
}

static int ready(struct thing *what) {
    for (int i = 0; i < what->count; i++)
        if (*waits[what->depends[i]].word < waits[what->depends[i]].value)
            return 0;
    return 1;
}

int cuStreamWaitValue32_v2(void *stream, unsigned long long address, uint32_t value, unsigned flags) {
    fake_record("wait stream=%p value=%u flags=%u", stream, value, flags);
    if (wait_count == MAX_WAITS)
        abort();
    waits[wait_count].word = (volatile uint32_t *)(uintptr_t)address;
    waits[wait_count].value = value;
    depend(thing(stream, 0), wait_count++);
    return 0;
}

int fake_stream_ready(void *stream) { return ready(thing(stream, 0)); }
int fake_event_ready(void *event) { return ready(thing(event, 1)); }

int fake_all_ready(void) {
    for (int i = 0; i < wait_count; i++)
        if (*waits[i].word < waits[i].value)
            return 0;
    return 1;
}

void fake_event_record(void *event, void *stream) {
    struct thing *recorded = thing(event, 1), *source = thing(stream, 0);
    recorded->count = 0;
    for (int i = 0; i < source->count; i++)
        depend(recorded, source->depends[i]);
}

void fake_stream_wait_event(void *stream, void *event) {
    struct thing *waiting = thing(stream, 0), *recorded = thing(event, 1);
    for (int i = 0; i < recorded->count; i++)
        depend(waiting, recorded->depends[i]);
}

int cuStreamQuery(void *stream) { return fake_stream_ready(stream) ? 0 : 600; }
int cuEventQuery(void *event) { return fake_event_ready(event) ? 0 : 600; }

int cuStreamIsCapturing(void *stream, int *status) {
    (void)stream;
    *status = 0;
    return 0;
}

/* Streams from 0x1000 up were made blocking (they wait for the legacy stream). */
int cuStreamGetFlags(void *stream, unsigned *flags) {
    *flags = (uintptr_t)stream >= 0x1000 ? 0 : 1;
    return 0;
}

/* Pointers below 0x8000 are device memory, up to 0x10000 page-locked host memory; the driver
   does not know others (pageable host memory). */
int cuPointerGetAttribute(void *data, int attribute, unsigned long long pointer) {
    (void)attribute;
    if (pointer >= 0x10000)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    *(int *)data = pointer < 0x8000 ? 2 : 1;
    return 0;
}

#else /* the runtime */

void fake_record(const char *format, ...);
int fake_stream_ready(void *stream);
int fake_event_ready(void *event);
int fake_all_ready(void);
void fake_event_record(void *event, void *stream);
void fake_stream_wait_event(void *stream, void *event);

enum { cudaSuccess = 0, cudaErrorNotReady = 600, NEVER_RETURNS = 7 };

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
    int ready = fake_stream_ready(stream);
    fake_record("stream_query stream=%p ready=%d", stream, ready);
    return ready ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    int ready = fake_stream_ready(stream);
    fake_record("stream_synchronize stream=%p ready=%d", stream, ready);
    return ready ? cudaSuccess : NEVER_RETURNS;
}

cudaError_t cudaEventQuery(void *event) {
    int ready = fake_event_ready(event);
    fake_record("event_query event=%p ready=%d", event, ready);
    return ready ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(void *event) {
    int ready = fake_event_ready(event);
    fake_record("event_synchronize event=%p ready=%d", event, ready);
    return ready ? cudaSuccess : NEVER_RETURNS;
}

cudaError_t cudaEventRecord(void *event, cudaStream_t stream) {
    fake_record("event_record event=%p stream=%p", event, stream);
    fake_event_record(event, stream ? stream : (cudaStream_t)0x1);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, void *event, unsigned flags) {
    if (flags > 1)
        return 1; /* cudaErrorInvalidValue: no wait is made */
    fake_record("stream_wait_event stream=%p event=%p", stream, event);
    fake_stream_wait_event(stream ? stream : (cudaStream_t)0x1, event);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    int ready = fake_all_ready();
    fake_record("device_synchronize ready=%d", ready);
    return ready ? cudaSuccess : NEVER_RETURNS;
}

cudaError_t cudaFree(void *pointer) {
    fake_record("free pointer=%p ready=%d", pointer, fake_all_ready());
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

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind) {
    fake_record("memcpy_sync dst=%p src=%p count=%zu kind=%d legacy_ready=%d", dst, src, count, kind,
                fake_stream_ready((void *)0x1));
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(void *event) {
    fake_record("event_destroy event=%p", event);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    fake_record("destroy stream=%p", stream);
    return cudaSuccess;
}

#endif
