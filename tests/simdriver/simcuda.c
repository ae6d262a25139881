// SPDX-License-Identifier: Apache-2.0
/*
 * simcuda: a simulated CUDA driver (libcuda.so.1) for brickscope's tests.
 *
 * Example (what tests/simdriver/build.py does):
 *
 *     cc -O2 -shared -fPIC -pthread -Wl,-soname,libcuda.so.1 -o libcuda.so.1 simcuda.c
 *
 * The real cuda-bindings load this file in place of NVIDIA's driver: they dlopen
 * "libcuda.so.1", read cuDriverGetVersion, then resolve every entry point through
 * cuGetProcAddress_v2(name, &fn, cudaVersion, flags, &status). This library
 * implements the entry points brickscope uses, following the CUDA driver API
 * documentation (Initialization, Device, Primary Context, Context, Stream and
 * Event Management chapters); every other name resolves to "not found", so the
 * bindings raise only if such a function is actually called.
 *
 * Time model. Each stream has a virtual timeline on the real CLOCK_MONOTONIC
 * clock (the clock behind Python's time.perf_counter_ns on Linux): the test hook
 * simcuda_enqueue_kernel() schedules work of a given duration starting at
 * max(now, stream tail, implicit dependencies); an event recorded on a stream
 * completes at that stream's tail at record time. The legacy default stream
 * (handle 0 or CU_STREAM_LEGACY) waits for all blocking streams of its context
 * and they wait for it; streams created with CU_STREAM_NON_BLOCKING do not.
 * Event timestamps have the documented 0.5 us resolution (floored to 500 ns).
 *
 * Memory (Memory Management chapter: cuMemAlloc, cuMemFree, cuMemcpyHtoD,
 * cuMemcpyDtoH) is host memory behind a fake device address range; the copies are
 * synchronous as documented: HtoD waits for the legacy default stream before it
 * copies, DtoH returns once its copy, ordered on the legacy stream (so after the
 * work of every blocking stream), has completed. Allocations are not cleared
 * (filled with 0xA5 so that reading one before writing shows).
 *
 * Not simulated: modules, kernels proper, graphs, IPC, green contexts,
 * non-primary contexts (cuCtxCreate resolves to "not found"), the per-thread
 * default stream as a per-thread object (CU_STREAM_PER_THREAD is one blocking
 * stream per context), and cuGetProcAddress's per-thread-default-stream flag
 * (ignored: entry points always use legacy default-stream semantics).
 *
 * Handles are tagged integers (tag, generation, index) rather than pointers, so
 * a destroyed or stale handle is detected and reported as the documented error
 * instead of crashing. All state is guarded by one mutex; waits sleep outside it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIM_EXPORT __attribute__((visibility("default")))

/* ---- driver API types and constants (values from cuda.h) ------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef uint64_t cuuint64_t;
typedef unsigned long long CUdeviceptr;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

#define CU_STREAM_DEFAULT 0x0u
#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_STREAM_LEGACY_HANDLE ((uintptr_t)0x1)
#define CU_STREAM_PER_THREAD_HANDLE ((uintptr_t)0x2)

#define CU_EVENT_BLOCKING_SYNC 0x1u
#define CU_EVENT_DISABLE_TIMING 0x2u
#define CU_EVENT_INTERPROCESS 0x4u

#define CU_CTX_SCHED_AUTO 0x0u

enum { /* CUdriverProcAddressQueryResult */
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

/* The CUDA version this driver reports (13.0), as cuDriverGetVersion encodes it. */
#define SIM_DRIVER_VERSION 13000
#define SIM_DEFAULT_DEVICES 2
#define SIM_MAX_DEVICES 16
#define SIM_TICK_NS 500ull          /* event timestamp resolution: 0.5 us */
#define SIM_SPIN_TAIL_NS 100000ull  /* non-blocking-sync waits spin for the last 100 us */

/* ---- entry-point call counters --------------------------------------------- */

#define SIM_ENTRY_POINTS(X)                                                      \
    X(cuInit) X(cuDriverGetVersion) X(cuGetProcAddress) X(cuGetErrorName)        \
    X(cuGetErrorString) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)    \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)                     \
    X(cuDevicePrimaryCtxGetState) X(cuCtxSetCurrent) X(cuCtxGetCurrent)         \
    X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery) \
    X(cuStreamGetCtx) X(cuStreamGetDevice) X(cuStreamGetFlags) X(cuEventCreate)  \
    X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize)     \
    X(cuEventElapsedTime) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)             \
    X(cuMemcpyDtoH) X(simcuda_enqueue_kernel)

#define SIM_ENUM(name) EP_##name,
enum { SIM_ENTRY_POINTS(SIM_ENUM) EP_COUNT };
#define SIM_NAME(name) #name,
static const char *const ep_names[EP_COUNT] = {SIM_ENTRY_POINTS(SIM_NAME)};

/* ---- state ------------------------------------------------------------------ */

/* Tagged handles: tag (16 bits) | generation (24 bits) | index + 1 (24 bits). */
#define TAG_CTX 0x5C7Cull
#define TAG_STREAM 0x5E7Aull
#define TAG_EVENT 0xE7E7ull
#define HANDLE(tag, gen, idx) \
    (((tag) << 48) | (((uint64_t)(gen) & 0xFFFFFFull) << 24) | ((uint64_t)(idx) + 1))
#define H_TAG(h) ((uint64_t)(h) >> 48)
#define H_GEN(h) ((uint32_t)(((uint64_t)(h) >> 24) & 0xFFFFFFull))
#define H_IDX(h) ((int64_t)((uint64_t)(h) & 0xFFFFFFull) - 1)
#define MAX_OBJECTS 0xFFFFFE

typedef struct {
    int alive;       /* a user stream slot in use */
    int legacy;      /* the context's legacy default stream */
    uint32_t gen;
    int ctx;         /* owning device/context index */
    uint32_t ctx_gen;
    unsigned flags;
    uint64_t tail;   /* CLOCK_MONOTONIC ns at which all work enqueued so far ends */
} stream_t;

typedef struct {
    int alive;
    uint32_t gen;
    int ctx;
    uint32_t ctx_gen;
    unsigned flags;
    int recorded;
    uint64_t done_ns; /* completion time of the last record */
} event_t;

typedef struct {
    uint32_t gen;            /* bumped each time the primary context is destroyed */
    unsigned refcount;       /* cuDevicePrimaryCtxRetain count; 0 = inactive */
    int sticky;              /* sticky error code (CUDA_ERROR_LAUNCH_FAILED) or 0 */
    uint64_t blocking_tail;  /* max tail over blocking streams (incl. per-thread) */
    uint64_t all_tail;       /* max tail over every stream of the context */
    stream_t legacy;         /* handle 0 / CU_STREAM_LEGACY */
    stream_t per_thread;     /* CU_STREAM_PER_THREAD (one per context here) */
} ctx_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static int g_ever_initialized; /* cuInit succeeded once: reset() restores the initialized state */
static int g_forked;         /* set in a child forked after cuInit: CUDA is unusable */
static int g_device_count = -1; /* -1: read SIMCUDA_DEVICE_COUNT at cuInit/reset */
static ctx_t g_ctx[SIM_MAX_DEVICES];
static stream_t *g_streams;
static size_t g_streams_len, g_streams_cap;
static event_t *g_events;
static size_t g_events_len, g_events_cap;
static int64_t *g_event_free;  /* free event slot indices (a stack) */
static size_t g_event_free_len;

/* device memory: host buffers behind a fake, never reused device address range */
#define SIM_DEVICE_BASE 0x7d0000000000ull
#define SIM_ALLOC_ALIGN 256ull
typedef struct {
    int alive;
    int ctx;
    uint32_t ctx_gen;
    uint64_t base;
    size_t size;
    unsigned char *host;
} alloc_t;
static alloc_t *g_allocs;
static size_t g_allocs_len, g_allocs_cap;
static uint64_t g_next_dptr = SIM_DEVICE_BASE;

/* counters and faults */
static uint64_t g_calls[EP_COUNT];
static uint64_t g_live_events, g_events_created, g_blocking_calls, g_blocked_ns;
static uint64_t g_live_streams;
static long g_fault_invalid_handle;  /* fail the next N event calls with INVALID_HANDLE */
static long g_fault_event_oom = -1;  /* >= 0: creations left before OUT_OF_MEMORY */

/* per-thread context stack: current context plus what cuCtxPushCurrent saved */
#define CTX_STACK_DEPTH 32
static __thread uint64_t tls_current;
static __thread uint64_t tls_stack[CTX_STACK_DEPTH];
static __thread int tls_depth;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

static int default_device_count(void) {
    const char *env = getenv("SIMCUDA_DEVICE_COUNT");
    if (env && *env) {
        long n = strtol(env, NULL, 10);
        if (n < 0) n = 0;
        if (n > SIM_MAX_DEVICES) n = SIM_MAX_DEVICES;
        return (int)n;
    }
    return SIM_DEFAULT_DEVICES;
}

static const char *device_name(int dev) {
    static char names[SIM_MAX_DEVICES][64];
    snprintf(names[dev], sizeof names[dev], "brickscope SimGPU %d", dev);
    return names[dev];
}

/* Common preamble: count the call, take the lock, refuse before cuInit / after fork. */
#define ENTER(ep)                                         \
    pthread_mutex_lock(&g_lock);                          \
    g_calls[EP_##ep]++;                                   \
    if (g_forked || !g_initialized) {                     \
        pthread_mutex_unlock(&g_lock);                    \
        return CUDA_ERROR_NOT_INITIALIZED;                \
    }
#define RETURN(code)                                      \
    do {                                                  \
        CUresult rc_ = (code);                            \
        pthread_mutex_unlock(&g_lock);                    \
        return rc_;                                       \
    } while (0)

/* ---- lookups (lock held) ----------------------------------------------------- */

static ctx_t *ctx_from_handle(uint64_t h, int *dev_out) {
    if (H_TAG(h) != TAG_CTX) return NULL;
    int64_t dev = H_IDX(h);
    if (dev < 0 || dev >= g_device_count) return NULL;
    ctx_t *c = &g_ctx[dev];
    if (c->refcount == 0 || c->gen != H_GEN(h)) return NULL;
    if (dev_out) *dev_out = (int)dev;
    return c;
}

static uint64_t ctx_handle(int dev) { return HANDLE(TAG_CTX, g_ctx[dev].gen, dev); }

static ctx_t *current_ctx(int *dev_out) { return ctx_from_handle(tls_current, dev_out); }

/* Resolve a stream handle; special handles use the calling thread's context. */
static CUresult stream_lookup(CUstream hs, stream_t **out, ctx_t **ctx_out) {
    uintptr_t h = (uintptr_t)hs;
    if (h == 0 || h == CU_STREAM_LEGACY_HANDLE || h == CU_STREAM_PER_THREAD_HANDLE) {
        ctx_t *c = current_ctx(NULL);
        if (!c) return CUDA_ERROR_INVALID_CONTEXT;
        *out = h == CU_STREAM_PER_THREAD_HANDLE ? &c->per_thread : &c->legacy;
        *ctx_out = c;
        return CUDA_SUCCESS;
    }
    if (H_TAG(h) != TAG_STREAM) return CUDA_ERROR_INVALID_HANDLE;
    int64_t idx = H_IDX(h);
    if (idx < 0 || (size_t)idx >= g_streams_len) return CUDA_ERROR_INVALID_HANDLE;
    stream_t *s = &g_streams[idx];
    if (!s->alive || s->gen != H_GEN(h)) return CUDA_ERROR_INVALID_HANDLE;
    ctx_t *c = &g_ctx[s->ctx];
    if (c->refcount == 0 || c->gen != s->ctx_gen) return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    *ctx_out = c;
    return CUDA_SUCCESS;
}

static event_t *event_lookup(CUevent he) {
    uint64_t h = (uint64_t)(uintptr_t)he;
    if (H_TAG(h) != TAG_EVENT) return NULL;
    int64_t idx = H_IDX(h);
    if (idx < 0 || (size_t)idx >= g_events_len) return NULL;
    event_t *e = &g_events[idx];
    if (!e->alive || e->gen != H_GEN(h)) return NULL;
    ctx_t *c = &g_ctx[e->ctx];
    if (c->refcount == 0 || c->gen != e->ctx_gen) return NULL;
    return e;
}

static int fault_invalid_handle(void) {
    if (g_fault_invalid_handle > 0) {
        g_fault_invalid_handle--;
        return 1;
    }
    return 0;
}

/* Schedule an operation of `dur` ns on stream s of context c; returns its start.
 * Implements stream order plus the legacy default stream's implicit barriers. */
static uint64_t schedule(ctx_t *c, stream_t *s, uint64_t dur) {
    uint64_t start = max_u64(now_ns(), s->tail);
    int blocking = !(s->flags & CU_STREAM_NON_BLOCKING);
    if (s->legacy)
        start = max_u64(start, c->blocking_tail);
    else if (blocking)
        start = max_u64(start, c->legacy.tail);
    uint64_t end = start + dur;
    s->tail = end;
    if (!s->legacy && blocking) c->blocking_tail = max_u64(c->blocking_tail, end);
    c->all_tail = max_u64(c->all_tail, end);
    return start;
}

/* When a zero-length operation queued now on s would complete (what a
 * synchronize on s waits for). */
static uint64_t stream_done(ctx_t *c, stream_t *s) {
    uint64_t t = s->tail;
    if (s->legacy) t = max_u64(t, c->blocking_tail);
    else if (!(s->flags & CU_STREAM_NON_BLOCKING)) t = max_u64(t, c->legacy.tail);
    return t;
}

static void init_stream(stream_t *s, int legacy, int dev, unsigned flags) {
    memset(s, 0, sizeof *s);
    s->legacy = legacy;
    s->ctx = dev;
    s->ctx_gen = g_ctx[dev].gen;
    s->flags = flags;
}

/* Destroy a primary context and everything created in it. */
static void free_allocs(int dev) { /* dev < 0: every context */
    for (size_t i = 0; i < g_allocs_len; i++) {
        alloc_t *a = &g_allocs[i];
        if (a->alive && (dev < 0 || a->ctx == dev)) {
            free(a->host);
            a->host = NULL;
            a->alive = 0;
        }
    }
}

static void ctx_destroy(int dev) {
    ctx_t *c = &g_ctx[dev];
    free_allocs(dev);
    for (size_t i = 0; i < g_events_len; i++) {
        event_t *e = &g_events[i];
        if (e->alive && e->ctx == dev) {
            e->alive = 0;
            e->gen++;
            g_live_events--;
            g_event_free[g_event_free_len++] = (int64_t)i;
        }
    }
    for (size_t i = 0; i < g_streams_len; i++) {
        stream_t *s = &g_streams[i];
        if (s->alive && s->ctx == dev) {
            s->alive = 0;
            s->gen++;
            g_live_streams--;
        }
    }
    uint32_t gen = c->gen + 1;
    memset(c, 0, sizeof *c);
    c->gen = gen;
}

static void ctx_activate(int dev) {
    ctx_t *c = &g_ctx[dev];
    uint32_t gen = c->gen;
    memset(c, 0, sizeof *c);
    c->gen = gen;
    c->refcount = 0;
    init_stream(&c->legacy, 1, dev, CU_STREAM_DEFAULT);
    init_stream(&c->per_thread, 0, dev, CU_STREAM_DEFAULT);
}

/* Sleep until CLOCK_MONOTONIC reaches t (lock NOT held). Without blocking sync,
 * the real driver spins: spin for the last SIM_SPIN_TAIL_NS to mimic its latency
 * without burning a core for the whole wait. */
static void wait_until(uint64_t t, int blocking_sync) {
    uint64_t start = now_ns();
    if (t <= start) return;
    uint64_t sleep_to = blocking_sync ? t : (t > SIM_SPIN_TAIL_NS ? t - SIM_SPIN_TAIL_NS : 0);
    if (sleep_to > start) {
        struct timespec ts = {(time_t)(sleep_to / 1000000000ull), (long)(sleep_to % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
    }
    while (now_ns() < t) {
    }
    uint64_t waited = now_ns() - start;
    pthread_mutex_lock(&g_lock);
    g_blocked_ns += waited;
    pthread_mutex_unlock(&g_lock);
}

/* ---- error strings ------------------------------------------------------------- */

static const struct {
    int code;
    const char *name;
    const char *text;
} g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* cuGetErrorName / cuGetErrorString: the name or the text of a known error code. */
static CUresult describe_error(int ep, CUresult error, int want_text, const char **pStr) {
    pthread_mutex_lock(&g_lock);
    g_calls[ep]++;
    pthread_mutex_unlock(&g_lock);
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].code == error) {
            *pStr = want_text ? g_errors[i].text : g_errors[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr) {
    return describe_error(EP_cuGetErrorName, error, 0, pStr);
}

SIM_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr) {
    return describe_error(EP_cuGetErrorString, error, 1, pStr);
}

/* ---- initialization and devices --------------------------------------------------- */

SIM_EXPORT CUresult cuInit(unsigned int Flags) {
    pthread_mutex_lock(&g_lock);
    g_calls[EP_cuInit]++;
    if (g_forked) RETURN(CUDA_ERROR_NOT_INITIALIZED);
    if (Flags != 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (g_device_count < 0) g_device_count = default_device_count();
    if (g_device_count == 0) RETURN(CUDA_ERROR_NO_DEVICE);
    g_initialized = g_ever_initialized = 1;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDriverGetVersion(int *driverVersion) {
    pthread_mutex_lock(&g_lock);
    g_calls[EP_cuDriverGetVersion]++;
    pthread_mutex_unlock(&g_lock);
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetCount(int *count) {
    ENTER(cuDeviceGetCount);
    if (!count) RETURN(CUDA_ERROR_INVALID_VALUE);
    *count = g_device_count;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    ENTER(cuDeviceGet);
    if (!device) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (ordinal < 0 || ordinal >= g_device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    ENTER(cuDeviceGetName);
    if (!name || len <= 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= g_device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "%s", device_name(dev));
    RETURN(CUDA_SUCCESS);
}

/* ---- primary contexts and the current context ------------------------------------- */

SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    ENTER(cuDevicePrimaryCtxRetain);
    if (!pctx) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= g_device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (g_ctx[dev].refcount == 0) ctx_activate(dev);
    g_ctx[dev].refcount++;
    *pctx = (CUcontext)(uintptr_t)ctx_handle(dev);
    RETURN(CUDA_SUCCESS);
}

static CUresult primary_release(CUdevice dev) {
    ENTER(cuDevicePrimaryCtxRelease);
    if (dev < 0 || dev >= g_device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (g_ctx[dev].refcount == 0) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (--g_ctx[dev].refcount == 0) ctx_destroy(dev);
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
SIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }

SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    ENTER(cuDevicePrimaryCtxGetState);
    if (!flags || !active) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= g_device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    *flags = CU_CTX_SCHED_AUTO;
    *active = g_ctx[dev].refcount > 0;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    ENTER(cuCtxSetCurrent);
    if (ctx && !ctx_from_handle((uint64_t)(uintptr_t)ctx, NULL)) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    tls_current = (uint64_t)(uintptr_t)ctx;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
    ENTER(cuCtxGetCurrent);
    if (!pctx) RETURN(CUDA_ERROR_INVALID_VALUE);
    /* A context destroyed since it was made current reads as "none". */
    *pctx = current_ctx(NULL) ? (CUcontext)(uintptr_t)tls_current : NULL;
    RETURN(CUDA_SUCCESS);
}

static CUresult ctx_push(CUcontext ctx) {
    ENTER(cuCtxPushCurrent);
    if (!ctx || !ctx_from_handle((uint64_t)(uintptr_t)ctx, NULL)) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (tls_depth == CTX_STACK_DEPTH) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    tls_stack[tls_depth++] = tls_current;
    tls_current = (uint64_t)(uintptr_t)ctx;
    RETURN(CUDA_SUCCESS);
}

static CUresult ctx_pop(CUcontext *pctx) {
    ENTER(cuCtxPopCurrent);
    if (!tls_current) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (pctx) *pctx = (CUcontext)(uintptr_t)tls_current;
    tls_current = tls_depth > 0 ? tls_stack[--tls_depth] : 0;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { return ctx_push(ctx); }
SIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return ctx_push(ctx); }
SIM_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx) { return ctx_pop(pctx); }
SIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) { return ctx_pop(pctx); }

SIM_EXPORT CUresult cuCtxGetDevice(CUdevice *device) {
    ENTER(cuCtxGetDevice);
    if (!device) RETURN(CUDA_ERROR_INVALID_VALUE);
    int dev;
    if (!current_ctx(&dev)) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    *device = dev;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSynchronize(void) {
    ENTER(cuCtxSynchronize);
    g_blocking_calls++;
    ctx_t *c = current_ctx(NULL);
    if (!c) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (c->sticky) RETURN(c->sticky);
    uint64_t t = c->all_tail;
    pthread_mutex_unlock(&g_lock);
    wait_until(t, 0);
    return CUDA_SUCCESS;
}

/* ---- streams ------------------------------------------------------------------------ */

SIM_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    ENTER(cuStreamCreate);
    if (!phStream || (Flags & ~CU_STREAM_NON_BLOCKING)) RETURN(CUDA_ERROR_INVALID_VALUE);
    int dev;
    ctx_t *c = current_ctx(&dev);
    if (!c) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (c->sticky) RETURN(c->sticky);
    size_t idx = g_streams_len;
    for (size_t i = 0; i < g_streams_len; i++)
        if (!g_streams[i].alive) {
            idx = i;
            break;
        }
    if (idx == g_streams_len) {
        if (g_streams_len == MAX_OBJECTS) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
        if (g_streams_len == g_streams_cap) {
            size_t cap = g_streams_cap ? g_streams_cap * 2 : 64;
            stream_t *p = realloc(g_streams, cap * sizeof *p);
            if (!p) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
            g_streams = p;
            g_streams_cap = cap;
        }
        g_streams_len++;
        g_streams[idx].gen = 0;
    }
    uint32_t gen = g_streams[idx].gen;
    init_stream(&g_streams[idx], 0, dev, Flags);
    g_streams[idx].gen = gen;
    g_streams[idx].alive = 1;
    g_live_streams++;
    *phStream = (CUstream)(uintptr_t)HANDLE(TAG_STREAM, gen, idx);
    RETURN(CUDA_SUCCESS);
}

static CUresult stream_destroy(CUstream hs) {
    ENTER(cuStreamDestroy);
    uintptr_t h = (uintptr_t)hs;
    if (h == 0 || h == CU_STREAM_LEGACY_HANDLE || h == CU_STREAM_PER_THREAD_HANDLE)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    stream_t *s;
    ctx_t *c;
    CUresult rc = stream_lookup(hs, &s, &c);
    if (rc) RETURN(rc);
    if (c->sticky) RETURN(c->sticky);
    /* Work still queued completes normally (the documented behaviour): the
     * context's tails already account for it. */
    s->alive = 0;
    s->gen++;
    g_live_streams--;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuStreamDestroy(CUstream hs) { return stream_destroy(hs); }
SIM_EXPORT CUresult cuStreamDestroy_v2(CUstream hs) { return stream_destroy(hs); }

SIM_EXPORT CUresult cuStreamSynchronize(CUstream hs) {
    ENTER(cuStreamSynchronize);
    g_blocking_calls++;
    stream_t *s;
    ctx_t *c;
    CUresult rc = stream_lookup(hs, &s, &c);
    if (rc) RETURN(rc);
    if (c->sticky) RETURN(c->sticky);
    uint64_t t = stream_done(c, s);
    pthread_mutex_unlock(&g_lock);
    wait_until(t, 0);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuStreamQuery(CUstream hs) {
    ENTER(cuStreamQuery);
    stream_t *s;
    ctx_t *c;
    CUresult rc = stream_lookup(hs, &s, &c);
    if (rc) RETURN(rc);
    if (c->sticky) RETURN(c->sticky);
    RETURN(stream_done(c, s) > now_ns() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS);
}

static CUresult stream_get_ctx(CUstream hs, CUcontext *pctx) {
    ENTER(cuStreamGetCtx);
    if (!pctx) RETURN(CUDA_ERROR_INVALID_VALUE);
    stream_t *s;
    ctx_t *c;
    CUresult rc = stream_lookup(hs, &s, &c);
    if (rc) RETURN(rc);
    *pctx = (CUcontext)(uintptr_t)ctx_handle(s->ctx);
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuStreamGetCtx(CUstream hs, CUcontext *pctx) { return stream_get_ctx(hs, pctx); }

/* CUDA 12.5: also returns the green context; there are none here. */
SIM_EXPORT CUresult cuStreamGetCtx_v2(CUstream hs, CUcontext *pctx, void **pGreenCtx) {
    if (pGreenCtx) *pGreenCtx = NULL;
    return stream_get_ctx(hs, pctx);
}

SIM_EXPORT CUresult cuStreamGetDevice(CUstream hs, CUdevice *device) {
    ENTER(cuStreamGetDevice);
    if (!device) RETURN(CUDA_ERROR_INVALID_VALUE);
    stream_t *s;
    ctx_t *c;
    CUresult rc = stream_lookup(hs, &s, &c);
    if (rc) RETURN(rc);
    *device = s->ctx;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuStreamGetFlags(CUstream hs, unsigned int *flags) {
    ENTER(cuStreamGetFlags);
    if (!flags) RETURN(CUDA_ERROR_INVALID_VALUE);
    stream_t *s;
    ctx_t *c;
    CUresult rc = stream_lookup(hs, &s, &c);
    if (rc) RETURN(rc);
    *flags = s->flags;
    RETURN(CUDA_SUCCESS);
}

/* ---- events -------------------------------------------------------------------------- */

SIM_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    ENTER(cuEventCreate);
    unsigned valid = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~valid)) RETURN(CUDA_ERROR_INVALID_VALUE);
    /* "CU_EVENT_INTERPROCESS ... CU_EVENT_DISABLE_TIMING must be set" */
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    int dev;
    ctx_t *c = current_ctx(&dev);
    if (!c) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (c->sticky) RETURN(c->sticky);
    if (g_fault_event_oom == 0) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    size_t idx;
    if (g_event_free_len > 0) {
        idx = (size_t)g_event_free[--g_event_free_len];
    } else {
        if (g_events_len == MAX_OBJECTS) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
        if (g_events_len == g_events_cap) {
            size_t cap = g_events_cap ? g_events_cap * 2 : 1024;
            event_t *p = realloc(g_events, cap * sizeof *p);
            int64_t *f = realloc(g_event_free, cap * sizeof *f);
            if (p) g_events = p;
            if (f) g_event_free = f;
            if (!p || !f) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
            g_events_cap = cap;
        }
        idx = g_events_len++;
        g_events[idx].gen = 0;
    }
    if (g_fault_event_oom > 0) g_fault_event_oom--;
    event_t *e = &g_events[idx];
    uint32_t gen = e->gen;
    memset(e, 0, sizeof *e);
    e->gen = gen;
    e->alive = 1;
    e->ctx = dev;
    e->ctx_gen = c->gen;
    e->flags = Flags;
    g_live_events++;
    g_events_created++;
    *phEvent = (CUevent)(uintptr_t)HANDLE(TAG_EVENT, gen, idx);
    RETURN(CUDA_SUCCESS);
}

static CUresult event_destroy(CUevent he) {
    ENTER(cuEventDestroy);
    event_t *e = event_lookup(he);
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (g_ctx[e->ctx].sticky) RETURN(g_ctx[e->ctx].sticky);
    /* A pending record is released when it completes: nothing to wait for here. */
    e->alive = 0;
    e->gen++;
    g_live_events--;
    g_event_free[g_event_free_len++] = e - g_events;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuEventDestroy(CUevent he) { return event_destroy(he); }
SIM_EXPORT CUresult cuEventDestroy_v2(CUevent he) { return event_destroy(he); }

SIM_EXPORT CUresult cuEventRecord(CUevent he, CUstream hs) {
    ENTER(cuEventRecord);
    if (fault_invalid_handle()) RETURN(CUDA_ERROR_INVALID_HANDLE);
    event_t *e = event_lookup(he);
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    /* Stricter than strictly needed for an explicit stream: callers must make a
     * context current, so tests catch code that forgets to. */
    if (!current_ctx(NULL)) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    stream_t *s;
    ctx_t *c;
    CUresult rc = stream_lookup(hs, &s, &c);
    if (rc) RETURN(rc);
    /* "hEvent and hStream must be from the same context" */
    if (s->ctx != e->ctx) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (c->sticky) RETURN(c->sticky);
    e->done_ns = schedule(c, s, 0);
    e->recorded = 1;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuEventQuery(CUevent he) {
    ENTER(cuEventQuery);
    if (fault_invalid_handle()) RETURN(CUDA_ERROR_INVALID_HANDLE);
    event_t *e = event_lookup(he);
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (g_ctx[e->ctx].sticky) RETURN(g_ctx[e->ctx].sticky);
    /* Never recorded: "all captured work is complete", so success (documented). */
    if (e->recorded && e->done_ns > now_ns()) RETURN(CUDA_ERROR_NOT_READY);
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuEventSynchronize(CUevent he) {
    ENTER(cuEventSynchronize);
    g_blocking_calls++;
    if (fault_invalid_handle()) RETURN(CUDA_ERROR_INVALID_HANDLE);
    event_t *e = event_lookup(he);
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (g_ctx[e->ctx].sticky) RETURN(g_ctx[e->ctx].sticky);
    uint64_t t = e->recorded ? e->done_ns : 0;
    int blocking_sync = (e->flags & CU_EVENT_BLOCKING_SYNC) != 0;
    pthread_mutex_unlock(&g_lock);
    wait_until(t, blocking_sync);
    return CUDA_SUCCESS;
}

static uint64_t quantize(uint64_t t) { return t - t % SIM_TICK_NS; }

static CUresult elapsed(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    ENTER(cuEventElapsedTime);
    if (!pMilliseconds) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (fault_invalid_handle()) RETURN(CUDA_ERROR_INVALID_HANDLE);
    event_t *s = event_lookup(hStart), *e = event_lookup(hEnd);
    if (!s || !e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (g_ctx[s->ctx].sticky) RETURN(g_ctx[s->ctx].sticky);
    if (g_ctx[e->ctx].sticky) RETURN(g_ctx[e->ctx].sticky);
    /* Documented: unrecorded or CU_EVENT_DISABLE_TIMING -> INVALID_HANDLE. */
    if (!s->recorded || !e->recorded) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if ((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING) RETURN(CUDA_ERROR_INVALID_HANDLE);
    /* Undocumented; timestamps of two devices share no clock. Our choice. */
    if (s->ctx != e->ctx) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    uint64_t now = now_ns();
    if (s->done_ns > now || e->done_ns > now) RETURN(CUDA_ERROR_NOT_READY);
    int64_t d = (int64_t)quantize(e->done_ns) - (int64_t)quantize(s->done_ns);
    *pMilliseconds = (float)((double)d / 1e6);
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }
SIM_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }

/* ---- memory --------------------------------------------------------------------------- */

/* The live allocation of the current context holding [dptr, dptr + n), or NULL. */
static alloc_t *alloc_lookup(ctx_t *c, int dev, CUdeviceptr dptr, size_t n) {
    for (size_t i = 0; i < g_allocs_len; i++) {
        alloc_t *a = &g_allocs[i];
        if (a->alive && a->ctx == dev && a->ctx_gen == c->gen && dptr >= a->base &&
            n <= a->size && dptr - a->base <= a->size - n)
            return a;
    }
    return NULL;
}

SIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    ENTER(cuMemAlloc);
    if (!dptr || bytesize == 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    int dev;
    ctx_t *c = current_ctx(&dev);
    if (!c) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (c->sticky) RETURN(c->sticky);
    if (g_allocs_len == g_allocs_cap) {
        size_t cap = g_allocs_cap ? 2 * g_allocs_cap : 64;
        alloc_t *grown = realloc(g_allocs, cap * sizeof *grown);
        if (!grown) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
        g_allocs = grown;
        g_allocs_cap = cap;
    }
    unsigned char *host = malloc(bytesize);
    if (!host) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    memset(host, 0xA5, bytesize);
    alloc_t *a = &g_allocs[g_allocs_len++];
    a->alive = 1;
    a->ctx = dev;
    a->ctx_gen = c->gen;
    a->base = g_next_dptr;
    a->size = bytesize;
    a->host = host;
    g_next_dptr += (bytesize + SIM_ALLOC_ALIGN - 1) / SIM_ALLOC_ALIGN * SIM_ALLOC_ALIGN + SIM_ALLOC_ALIGN;
    *dptr = a->base;
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    ENTER(cuMemFree);
    int dev;
    ctx_t *c = current_ctx(&dev);
    if (!c) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (c->sticky) RETURN(c->sticky);
    alloc_t *a = alloc_lookup(c, dev, dptr, 1);
    if (!a || a->base != dptr) RETURN(CUDA_ERROR_INVALID_VALUE);
    free(a->host);
    a->host = NULL;
    a->alive = 0;
    RETURN(CUDA_SUCCESS);
}

/* Synchronous copies: wait (lock released) for what the legacy default stream waits
 * for, then copy under the lock after checking the allocation again. */
static CUresult memcpy_sync(int ep, CUdeviceptr dptr, void *host, size_t n, int to_device) {
    pthread_mutex_lock(&g_lock);
    g_calls[ep]++;
    if (g_forked || !g_initialized) RETURN(CUDA_ERROR_NOT_INITIALIZED);
    if (n == 0) RETURN(CUDA_SUCCESS);
    if (!host) RETURN(CUDA_ERROR_INVALID_VALUE);
    int dev;
    ctx_t *c = current_ctx(&dev);
    if (!c) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (c->sticky) RETURN(c->sticky);
    if (!alloc_lookup(c, dev, dptr, n)) RETURN(CUDA_ERROR_INVALID_VALUE);
    g_blocking_calls++;
    uint64_t t = stream_done(c, &c->legacy);
    pthread_mutex_unlock(&g_lock);
    wait_until(t, 0);
    pthread_mutex_lock(&g_lock);
    alloc_t *a = alloc_lookup(c, dev, dptr, n);
    if (!a) RETURN(CUDA_ERROR_INVALID_VALUE); /* freed while we waited */
    if (to_device)
        memcpy(a->host + (dptr - a->base), host, n);
    else
        memcpy(host, a->host + (dptr - a->base), n);
    RETURN(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    return memcpy_sync(EP_cuMemcpyHtoD, dstDevice, (void *)srcHost, ByteCount, 1);
}

SIM_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    return memcpy_sync(EP_cuMemcpyDtoH, srcDevice, dstHost, ByteCount, 0);
}

/* ---- cuGetProcAddress ------------------------------------------------------------------ */

SIM_EXPORT CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
SIM_EXPORT CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, int *);

/* (name, first CUDA version with this ABI, function). cuGetProcAddress returns the
 * entry with the highest version <= the caller's cudaVersion, as the driver does
 * (e.g. "cuEventDestroy" at 4000+ is cuEventDestroy_v2). */
static const struct {
    const char *name;
    int version;
    void *fn;
} g_procs[] = {
    {"cuGetErrorString", 6000, (void *)cuGetErrorString},
    {"cuGetErrorName", 6000, (void *)cuGetErrorName},
    {"cuInit", 2000, (void *)cuInit},
    {"cuDriverGetVersion", 2020, (void *)cuDriverGetVersion},
    {"cuGetProcAddress", 11030, (void *)cuGetProcAddress},
    {"cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2},
    {"cuDeviceGet", 2000, (void *)cuDeviceGet},
    {"cuDeviceGetCount", 2000, (void *)cuDeviceGetCount},
    {"cuDeviceGetName", 2000, (void *)cuDeviceGetName},
    {"cuDevicePrimaryCtxRetain", 7000, (void *)cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", 7000, (void *)cuDevicePrimaryCtxRelease},
    {"cuDevicePrimaryCtxRelease", 11000, (void *)cuDevicePrimaryCtxRelease_v2},
    {"cuDevicePrimaryCtxGetState", 7000, (void *)cuDevicePrimaryCtxGetState},
    {"cuCtxSetCurrent", 4000, (void *)cuCtxSetCurrent},
    {"cuCtxGetCurrent", 4000, (void *)cuCtxGetCurrent},
    {"cuCtxPushCurrent", 2000, (void *)cuCtxPushCurrent},
    {"cuCtxPushCurrent", 4000, (void *)cuCtxPushCurrent_v2},
    {"cuCtxPopCurrent", 2000, (void *)cuCtxPopCurrent},
    {"cuCtxPopCurrent", 4000, (void *)cuCtxPopCurrent_v2},
    {"cuCtxGetDevice", 2000, (void *)cuCtxGetDevice},
    {"cuCtxSynchronize", 2000, (void *)cuCtxSynchronize},
    {"cuStreamCreate", 2000, (void *)cuStreamCreate},
    {"cuStreamDestroy", 2000, (void *)cuStreamDestroy},
    {"cuStreamDestroy", 4000, (void *)cuStreamDestroy_v2},
    {"cuStreamSynchronize", 2000, (void *)cuStreamSynchronize},
    {"cuStreamQuery", 2000, (void *)cuStreamQuery},
    {"cuStreamGetCtx", 9020, (void *)cuStreamGetCtx},
    {"cuStreamGetCtx", 12050, (void *)cuStreamGetCtx_v2},
    {"cuStreamGetDevice", 12080, (void *)cuStreamGetDevice},
    {"cuStreamGetFlags", 5050, (void *)cuStreamGetFlags},
    {"cuEventCreate", 2000, (void *)cuEventCreate},
    {"cuEventRecord", 2000, (void *)cuEventRecord},
    {"cuEventQuery", 2000, (void *)cuEventQuery},
    {"cuEventSynchronize", 2000, (void *)cuEventSynchronize},
    {"cuEventDestroy", 2000, (void *)cuEventDestroy},
    {"cuEventDestroy", 4000, (void *)cuEventDestroy_v2},
    {"cuEventElapsedTime", 2000, (void *)cuEventElapsedTime},
    {"cuEventElapsedTime", 12080, (void *)cuEventElapsedTime_v2},
    {"cuMemAlloc", 3020, (void *)cuMemAlloc_v2},
    {"cuMemFree", 3020, (void *)cuMemFree_v2},
    {"cuMemcpyHtoD", 3020, (void *)cuMemcpyHtoD_v2},
    {"cuMemcpyDtoH", 3020, (void *)cuMemcpyDtoH_v2},
};

/* The cudaVersion each entry point was last requested at (indexed as SIM_ENTRY_POINTS; 0:
 * never), so that tests can check the version a caller asks for (simcuda_requested_version). */
static int g_requested_version[EP_COUNT];

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, int *status) {
    pthread_mutex_lock(&g_lock);
    g_calls[EP_cuGetProcAddress]++;
    for (int i = 0; symbol && i < EP_COUNT; i++)
        if (strcmp(ep_names[i], symbol) == 0) g_requested_version[i] = cudaVersion;
    pthread_mutex_unlock(&g_lock);
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    int found = 0, best = -1;
    for (size_t i = 0; i < sizeof g_procs / sizeof g_procs[0]; i++) {
        if (strcmp(g_procs[i].name, symbol) != 0) continue;
        found = 1;
        if (g_procs[i].version <= cudaVersion &&
            (best < 0 || g_procs[i].version > g_procs[best].version))
            best = (int)i;
    }
    if (best < 0) {
        if (status)
            *status = found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = g_procs[best].fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags) {
    (void)flags;
    return get_proc(symbol, pfn, cudaVersion, NULL);
}

SIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags, int *symbolStatus) {
    (void)flags; /* per-thread default stream variants are not simulated */
    return get_proc(symbol, pfn, cudaVersion, symbolStatus);
}

/* ---- test hooks (called through ctypes; not part of the CUDA API) ------------------------ */

/* Enqueue simulated kernel work of duration_ns on a stream (0 = legacy default
 * stream of the calling thread's context). First spins host_cost_ns on the
 * calling thread, as a real launch costs host time. Writes the work's start and
 * end (CLOCK_MONOTONIC ns) to start_out/end_out when given. */
SIM_EXPORT CUresult simcuda_enqueue_kernel(CUstream hs, uint64_t duration_ns, uint64_t host_cost_ns,
                                           uint64_t *start_out, uint64_t *end_out) {
    if (host_cost_ns) {
        uint64_t until = now_ns() + host_cost_ns;
        while (now_ns() < until) {
        }
    }
    ENTER(simcuda_enqueue_kernel);
    stream_t *s;
    ctx_t *c;
    CUresult rc = stream_lookup(hs, &s, &c);
    if (rc) RETURN(rc);
    if (c->sticky) RETURN(c->sticky);
    uint64_t start = schedule(c, s, duration_ns);
    if (start_out) *start_out = start;
    if (end_out) *end_out = start + duration_ns;
    RETURN(CUDA_SUCCESS);
}

/* Sticky launch failure in device's primary context: every later call in that
 * context returns CUDA_ERROR_LAUNCH_FAILED until the context is destroyed. */
SIM_EXPORT CUresult simcuda_inject_launch_failure(int device) {
    pthread_mutex_lock(&g_lock);
    if (device < 0 || device >= g_device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (g_ctx[device].refcount == 0) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    g_ctx[device].sticky = CUDA_ERROR_LAUNCH_FAILED;
    RETURN(CUDA_SUCCESS);
}

/* The next n calls of cuEventRecord/Query/Synchronize/ElapsedTime fail with
 * CUDA_ERROR_INVALID_HANDLE (0 clears). */
SIM_EXPORT void simcuda_inject_invalid_handle(long n) {
    pthread_mutex_lock(&g_lock);
    g_fault_invalid_handle = n > 0 ? n : 0;
    pthread_mutex_unlock(&g_lock);
}

/* After n more successful cuEventCreate calls, every one fails with
 * CUDA_ERROR_OUT_OF_MEMORY (n < 0 clears). */
SIM_EXPORT void simcuda_inject_event_oom(long n) {
    pthread_mutex_lock(&g_lock);
    g_fault_event_oom = n < 0 ? -1 : n;
    pthread_mutex_unlock(&g_lock);
}

/* Device count reported from now on (0: cuInit fails with CUDA_ERROR_NO_DEVICE).
 * Takes effect at the next simcuda_reset() if contexts exist. */
SIM_EXPORT void simcuda_set_device_count(int n) {
    pthread_mutex_lock(&g_lock);
    if (n < 0) n = 0;
    if (n > SIM_MAX_DEVICES) n = SIM_MAX_DEVICES;
    int busy = 0;
    for (int i = 0; i < SIM_MAX_DEVICES; i++) busy |= g_ctx[i].refcount > 0;
    if (!busy) {
        g_device_count = n;
        if (n == 0) g_initialized = 0;
    }
    pthread_mutex_unlock(&g_lock);
}

/* Counters: 0 live events, 1 events created, 2 blocking calls, 3 ns spent
 * blocked, 4 live streams, 5 active primary contexts. */
SIM_EXPORT uint64_t simcuda_counter(int which) {
    pthread_mutex_lock(&g_lock);
    uint64_t v = 0;
    switch (which) {
    case 0: v = g_live_events; break;
    case 1: v = g_events_created; break;
    case 2: v = g_blocking_calls; break;
    case 3: v = g_blocked_ns; break;
    case 4: v = g_live_streams; break;
    case 5:
        for (int i = 0; i < SIM_MAX_DEVICES; i++) v += g_ctx[i].refcount > 0;
        break;
    default: v = (uint64_t)-1;
    }
    pthread_mutex_unlock(&g_lock);
    return v;
}

/* Calls of one entry point (names as in SIM_ENTRY_POINTS; _v2 variants count under
 * the base name); -1 for an unknown name. */
SIM_EXPORT int64_t simcuda_call_count(const char *name) {
    int64_t v = -1;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < EP_COUNT; i++)
        if (strcmp(ep_names[i], name) == 0) v = (int64_t)g_calls[i];
    pthread_mutex_unlock(&g_lock);
    return v;
}

/* The cudaVersion cuGetProcAddress was last asked for an entry point at (names as in
 * SIM_ENTRY_POINTS); 0: never asked; -1: an unknown name. Not reset by simcuda_reset. */
SIM_EXPORT int simcuda_requested_version(const char *name) {
    int v = -1;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < EP_COUNT; i++)
        if (strcmp(ep_names[i], name) == 0) v = g_requested_version[i];
    pthread_mutex_unlock(&g_lock);
    return v;
}

/* The true completion time (CLOCK_MONOTONIC ns, unquantized) of an event's
 * last record: what the alignment tests compare host_time_ns against. */
SIM_EXPORT CUresult simcuda_event_time_ns(CUevent he, uint64_t *t) {
    pthread_mutex_lock(&g_lock);
    event_t *e = event_lookup(he);
    if (!e || !t) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!e->recorded) RETURN(CUDA_ERROR_INVALID_HANDLE);
    *t = e->done_ns;
    RETURN(CUDA_SUCCESS);
}

/* Forget every context, stream and event (their handles become invalid), clear
 * faults and counters, restore the default device count. The driver counts as
 * initialized afterwards if cuInit ever succeeded and there is a device. */
SIM_EXPORT void simcuda_reset(void) {
    pthread_mutex_lock(&g_lock);
    free_allocs(-1);
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        uint32_t gen = g_ctx[i].gen + 1;
        memset(&g_ctx[i], 0, sizeof g_ctx[i]);
        g_ctx[i].gen = gen;
    }
    for (size_t i = 0; i < g_streams_len; i++) {
        g_streams[i].alive = 0;
        g_streams[i].gen++;
    }
    g_event_free_len = 0;
    for (size_t i = 0; i < g_events_len; i++) {
        g_events[i].alive = 0;
        g_events[i].gen++;
        g_event_free[g_event_free_len++] = (int64_t)(g_events_len - 1 - i);
    }
    memset(g_calls, 0, sizeof g_calls);
    g_live_events = g_events_created = g_blocking_calls = g_blocked_ns = g_live_streams = 0;
    g_fault_invalid_handle = 0;
    g_fault_event_oom = -1;
    g_forked = 0;
    g_device_count = default_device_count();
    g_initialized = g_ever_initialized && g_device_count > 0;
    tls_current = 0;
    tls_depth = 0;
    pthread_mutex_unlock(&g_lock);
}

/* CUDA does not survive fork(): in a child of a process that had initialized the
 * driver, every call (cuInit included) returns CUDA_ERROR_NOT_INITIALIZED, as
 * the real driver does. The lock is re-created: another thread may have held it. */
static void after_fork_child(void) {
    pthread_mutex_init(&g_lock, NULL);
    if (g_initialized) g_forked = 1;
}

__attribute__((constructor)) static void simcuda_load(void) {
    pthread_atfork(NULL, NULL, after_fork_child);
}
