/* The stream gate: preloaded (LD_PRELOAD) into the checks' worker on cuda (harness/workers/stream_hold.py).

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
checked against an allow-list (harness/static/symbols.py) that names none of the kp_gate_* functions.
It declares the few CUDA types it needs instead of including CUDA's headers and finds the real
functions at run time, so that it builds with a C compiler alone. CUDA driver calls are used for
its own queries: a runtime query that answers "not ready" leaves that as the thread's last
error, which the next launch check of PyTorch's would report as a failure.
*/
#define _GNU_SOURCE
#include "stream_gate.h"

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
INTERNAL void *kpg_real(const char *name, const char *library) {
    void *function = dlsym(RTLD_NEXT, name);
    if (function)
        return function;
    struct symbol_search search = {library, name, NULL};
    dl_iterate_phdr(find_symbol, &search);
    return search.found;
}

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

INTERNAL cudaStream_t kpg_normal(cudaStream_t stream, int per_thread) {
    if (stream == NULL)
        return per_thread ? STREAM_PER_THREAD : STREAM_LEGACY;
    return stream;
}

INTERNAL int kpg_capturing(cudaStream_t stream) {
    int status = 0;
    return driver.is_capturing && driver.is_capturing(stream, &status) == 0 && status != 0;
}

/* Work is about to be queued on ``stream``: hold it back unless it is the caller's stream. The
   new wait's value is reserved under the lock and queued outside it: queuing may block (a full
   command queue), and the watchdog must still be able to open. */
INTERNAL void kpg_gate(cudaStream_t stream, int per_thread) {
    if (!atomic_load(&holding))
        return;
    stream = kpg_normal(stream, per_thread);
    if (stream == caller_stream || kpg_capturing(stream))
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
    kpg_queuing(1);
    CUresult result = driver.wait_value(stream, word(slot), target, WAIT_VALUE_GEQ);
    kpg_queuing(0);
    pthread_mutex_lock(&lock);
    if (result == 0) {
        waits_queued++;
    } else {
        failed("cuStreamWaitValue32", result);
        open_to(slot, target); /* nothing waits for the value reserved */
    }
    pthread_mutex_unlock(&lock);
}

INTERNAL void kpg_queuing(int starts) {
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

/* The candidate is about to wait for ``what`` (a stream or an event: a synchronize, a copy to
   pageable memory) or, with ``query``, to ask whether it is done. Open its held work and what
   that waits for, and nothing else: a wait then waits for exactly that. A query does not wait,
   so what it let go is drained here (held work then looks like work that finishes, not work
   that never starts) and the hold no longer tests this call (imprecise). Where what it waits
   for is not known, open and drain everything (imprecise). A wait made around the interposed
   calls is not followed: the watchdog opens it. */
static void before(void *what, int is_event, int query) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    int opened = is_event ? open_deps(node_of(what, 1, 0)) : open_stream(what);
    if (query)
        imprecise += opened != 0;
    else
        opened_for_a_wait(opened);
    pthread_mutex_unlock(&lock);
    int (*done)(void *) = is_event ? event_done : stream_done;
    if (opened == 2 || (query && opened && !poll_until(done, what, watchdog_s)))
        open_and_drain_all();
}

INTERNAL void kpg_before_stream_wait(cudaStream_t stream) { before(stream, 0, 0); }
INTERNAL void kpg_before_event_wait(cudaEvent_t event) { before(event, 1, 0); }
INTERNAL void kpg_before_stream_query(cudaStream_t stream) { before(stream, 0, 1); }
INTERNAL void kpg_before_event_query(cudaEvent_t event) { before(event, 1, 1); }

/* The candidate's call waits for the legacy default stream (a copy to or from pageable
   memory): that stream's work and what it waits for, and the blocking streams, which the
   legacy stream waits for. */
INTERNAL void kpg_before_legacy_wait(int per_thread) {
    if (!atomic_load(&holding))
        return;
    if (per_thread) {
        kpg_before_stream_wait(STREAM_PER_THREAD);
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
            kpg_gate(handles[i].stream, 0);
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

/* ---- what the interposed calls ask of the gate ---------------------------------------- */

INTERNAL int kpg_holding(void) { return atomic_load(&holding); }

INTERNAL void kpg_imprecise(void) {
    pthread_mutex_lock(&lock);
    imprecise++;
    pthread_mutex_unlock(&lock);
}

/* A call that waits for everything (a device synchronize, a free): open everything. */
INTERNAL void kpg_open_everything_for_a_wait(void) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    opened_for_a_wait(open_all());
    pthread_mutex_unlock(&lock);
}

/* The driver's type of the memory at ``pointer``: 1 page-locked host, 2 device, 4 managed; 0
   for pageable host memory, which the driver does not know. */
INTERNAL int kpg_memory_type(const void *pointer) {
    int type = 0;
    if (!driver.pointer_attribute ||
        driver.pointer_attribute(&type, POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)pointer) != 0)
        return 0;
    return type;
}

/* The candidate's own cuBLAS handles and the streams they were given (gated at every hold). */
INTERNAL void kpg_remember_handle(void *handle, cudaStream_t stream, int add) {
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

INTERNAL void kpg_forget_handle(void *handle) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HANDLES; i++)
        if (handles[i].handle == handle)
            handles[i].handle = NULL;
    pthread_mutex_unlock(&lock);
}

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

/* CUDA accepted a record of ``event`` on ``stream``: the stream's next work goes behind a new
   wait at once, whatever queues it (cuBLAS's own launches too). */
INTERNAL void kpg_recorded(cudaEvent_t event, cudaStream_t stream, int per_thread) {
    if (!atomic_load(&holding) || kpg_capturing(stream))
        return;
    pthread_mutex_lock(&lock);
    int fresh = recorded(event, stream);
    pthread_mutex_unlock(&lock);
    if (fresh)
        kpg_gate(stream, per_thread);
}

/* CUDA accepted that ``stream`` waits for ``event``: it waits for what the event stands for. */
INTERNAL void kpg_waited(cudaStream_t stream, cudaEvent_t event) {
    if (!atomic_load(&holding) || kpg_capturing(stream))
        return;
    pthread_mutex_lock(&lock);
    struct node *from = node_of(event, 1, 0);
    struct node *to = from ? node_of(stream, 0, 1) : NULL;
    if (from && to) {
        for (int i = 0; i < from->count; i++)
            add_dep(to, from->deps[i].slot, from->deps[i].value);
        to->overflow |= from->overflow;
    }
    pthread_mutex_unlock(&lock);
}

/* Lock held. Forget what ``key`` stood for: a new stream or event may get its address. */
static void forget(void *key, int is_event) {
    struct node *node = node_of(key, is_event, 0);
    if (node)
        node->key = NULL;
}

INTERNAL void kpg_forget(void *key, int is_event) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    forget(key, is_event);
    pthread_mutex_unlock(&lock);
}

/* A destroyed stream's queued work still runs: its slot stays until the release opens it. */
INTERNAL void kpg_stream_destroyed(cudaStream_t stream) {
    if (!atomic_load(&holding))
        return;
    pthread_mutex_lock(&lock);
    int i = slot_of(stream, 0);
    if (i >= 0)
        held[i].stream = NULL; /* never matches a stream again; opened at the release */
    forget(stream, 0);
    pthread_mutex_unlock(&lock);
}
