"""The C source of a native image's driver and of the runtime symbols numba's object code calls.

A native image (:mod:`.native_image`) links the object code of a model's kernel entries with this
file, compiled by the system C compiler.  It replaces, without numba:

- the driver (:mod:`.driver`): ``rammer_image_run`` walks every vEU's task-table rows exactly as
  ``driver.walk``/``driver.run`` do (barrier rows wait on the progress counters, other rows call
  the kernel entry at ``entries[kernel id]``), on a pool of persistent pthreads instead of numba's
  ``prange`` (vEU 0 runs on the calling thread);
- the numba runtime (NRT) calls in the kernels' code: ``NRT_MemInfo_alloc_aligned`` (the tree
  kernel allocates a work array), ``NRT_MemInfo_call_dtor`` and ``NRT_Free``, with the same
  MemInfo layout as numba's ``nrt.c`` (the compiled code reads ``data`` at its offset);
- ``rammer_cpu_sgemm`` (:mod:`.blas`): a call of the BLAS ``sgemm`` whose address the loader sets
  (scipy's OpenBLAS, the library ``scipy.linalg.cython_blas`` forwards to);
- numba's helper functions, reached only on a kernel's exception path (the cfunc wrapper then
  reports the exception with ``PyErr_WriteUnraisable`` and returns 0, as under numba): the image
  reports "a kernel raised an exception" instead of unpickling numba's exception object.

Python's C API symbols used on that path come from the interpreter that loads the image.
"""

from __future__ import annotations

DRIVER_SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int64_t (*entry_fn)(void *, int64_t, void *, int64_t, void *, int64_t, void *, int64_t);

#define STRIDE 8
#define ROW 10
#define FAILED_ROW 1
#define FAILED_CODE 2
#define KERNEL_FAILED 3
#define SPIN_PAUSES 1024
#define SPIN_YIELDS 1024
#define SLEEP_US 50
#define MAX_VEUS 1024
#define POOL_SPIN_PAUSES 2048

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t wait_at_least(int64_t *c, int64_t idx, int64_t target, int64_t abort_idx, int64_t max_sleeps) {
    int64_t spins = 0, sleeps = 0;
    while (__atomic_load_n(&c[idx], __ATOMIC_ACQUIRE) < target) {
        spins++;
        if (spins < SPIN_PAUSES) { cpu_relax(); continue; }
        if (__atomic_load_n(&c[abort_idx], __ATOMIC_ACQUIRE) != 0) return 1;
        if (spins < SPIN_PAUSES + SPIN_YIELDS) { sched_yield(); continue; }
        if (sleeps >= max_sleeps) return 2;
        usleep(SLEEP_US);
        sleeps++;
    }
    return 0;
}

typedef struct {
    uint8_t *arena; int64_t nbytes;
    int64_t *X; int64_t nx;
    float *R; int64_t nr;
    int64_t *T;
    const int64_t *starts, *ends;
    const int64_t *entries;
    int64_t *counters, *status;
    const int64_t *cores, *allowed;
    int64_t max_sleeps, n, abort, master;
    int64_t *trace;
} launch_t;

static int64_t walk(int64_t v, const launch_t *L) {
    int64_t start = L->starts[v], end = L->ends[v];
    for (int64_t r = start; r < end; r++) {
        int64_t *row = L->T + r * ROW;
        if (L->trace) L->trace[2 * r] = monotonic_ns();
        int64_t k = row[0];
        if (k == 0) {
            int64_t st = wait_at_least(L->counters, row[2] * STRIDE, row[3], L->abort, L->max_sleeps);
            if (st != 0) { __atomic_fetch_add(&L->counters[L->abort], 1, __ATOMIC_SEQ_CST); return st; }
        } else {
            entry_fn fn = (entry_fn)(intptr_t)L->entries[k];
            int64_t st = fn(L->arena, L->nbytes, L->X, L->nx, L->R, L->nr, row + 2, row[1]);
            if (st != 0) {
                L->counters[v * STRIDE + FAILED_ROW] = r + 1;
                L->counters[v * STRIDE + FAILED_CODE] = st;
                __atomic_fetch_add(&L->counters[L->abort], 1, __ATOMIC_SEQ_CST);
                return KERNEL_FAILED;
            }
        }
        if (L->trace) L->trace[2 * r + 1] = monotonic_ns();
        __atomic_store_n(&L->counters[v * STRIDE], r - start + 1, __ATOMIC_RELEASE);
    }
    return 0;
}

static void set_affinity_except(const int64_t *words, int64_t skip) {
    cpu_set_t set;
    memcpy(&set, words, sizeof(set) < 128 ? sizeof(set) : 128);
    if (skip >= 0 && skip < CPU_SETSIZE) CPU_CLR((int)skip, &set);
    if (CPU_COUNT(&set) > 0) sched_setaffinity(0, sizeof(set), &set);
}

static void pin(int64_t core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((int)(core & (CPU_SETSIZE - 1)), &set);
    sched_setaffinity(0, sizeof(set), &set);
}

/* What driver.run does for vEU v inside its prange loop. */
static void run_veu(int64_t v, const launch_t *L) {
    if (L->cores[v] >= 0) pin(L->cores[v]);
    else if (v > 0 && L->master >= 0 && sched_getcpu() == L->master) set_affinity_except(L->allowed, L->master);
    int64_t st = walk(v, L);
    if (st == 0) {
        for (int64_t u = 0; u < L->n; u++)
            if (st == 0 && u != v)
                st = wait_at_least(L->counters, u * STRIDE, L->ends[u] - L->starts[u], L->abort, L->max_sleeps);
        if (st == 1) st = 0;
    }
    L->status[v] = st;
}

/* The pool: worker w runs vEU w (1..) of each launch; vEU 0 runs on the caller. */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_go = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER;
static const launch_t *pool_launch;
static int64_t pool_generation, pool_pending, pool_workers;

/* A child made by fork() has none of the parent's workers (the runtime runs a 1-vEU copy there). */
static void pool_after_fork(void) {
    pthread_mutex_init(&pool_mu, NULL);
    pthread_mutex_init(&launch_mu, NULL);
    pthread_cond_init(&pool_go, NULL);
    pthread_cond_init(&pool_done, NULL);
    pool_workers = 0;
    pool_generation = 0;
    pool_pending = 0;
}

__attribute__((constructor)) static void pool_init(void) { pthread_atfork(NULL, NULL, pool_after_fork); }

/* A worker spins a little (about 0.1 ms) for the next launch before it sleeps, as numba's OpenMP
   workers do: back-to-back runs then start without a futex wake-up on each worker. */
static void *pool_worker(void *arg) {
    int64_t v = (int64_t)(intptr_t)arg, seen = 0;
    for (;;) {
        for (int i = 0; i < POOL_SPIN_PAUSES && __atomic_load_n(&pool_generation, __ATOMIC_ACQUIRE) == seen; i++)
            cpu_relax();
        pthread_mutex_lock(&pool_mu);
        while (pool_generation == seen) pthread_cond_wait(&pool_go, &pool_mu);
        seen = pool_generation;
        const launch_t *L = pool_launch;
        pthread_mutex_unlock(&pool_mu);
        if (v < L->n) run_veu(v, L);
        pthread_mutex_lock(&pool_mu);
        if (__atomic_sub_fetch(&pool_pending, 1, __ATOMIC_ACQ_REL) == 0) pthread_cond_signal(&pool_done);
        pthread_mutex_unlock(&pool_mu);
    }
    return NULL;
}

static int pool_grow(int64_t n) {
    while (pool_workers < n - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, pool_worker, (void *)(intptr_t)(pool_workers + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) return -1;
        pool_workers++;
    }
    return 0;
}

int64_t rammer_image_run(uint8_t *arena, int64_t nbytes, int64_t *X, int64_t nx, float *R, int64_t nr,
                         int64_t *T, const int64_t *starts, const int64_t *ends, int64_t n,
                         const int64_t *entries, int64_t *counters, int64_t ncounters, int64_t *status,
                         const int64_t *cores, const int64_t *allowed, int64_t max_sleeps, int64_t *trace) {
    launch_t L = {arena, nbytes, X, nx, R, nr, T, starts, ends, entries, counters, status, cores, allowed,
                  max_sleeps, n, n * STRIDE, -1, trace};
    for (int64_t i = 0; i < ncounters; i++) counters[i] = 0;
    if (n == 1 && cores[0] < 0) {
        int64_t st = walk(0, &L);
        status[0] = st;
        return st;
    }
    if (n > MAX_VEUS) return 2;
    pthread_mutex_lock(&launch_mu);  /* one launch on the pool at a time */
    pthread_mutex_lock(&pool_mu);
    if (pool_grow(n) != 0) { pthread_mutex_unlock(&pool_mu); pthread_mutex_unlock(&launch_mu); return 2; }
    L.master = sched_getcpu();
    pool_launch = &L;
    __atomic_store_n(&pool_pending, pool_workers, __ATOMIC_RELEASE);
    __atomic_store_n(&pool_generation, pool_generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool_go);
    pthread_mutex_unlock(&pool_mu);
    run_veu(0, &L);
    for (int i = 0; i < POOL_SPIN_PAUSES && __atomic_load_n(&pool_pending, __ATOMIC_ACQUIRE) > 0; i++) cpu_relax();
    pthread_mutex_lock(&pool_mu);
    while (pool_pending > 0) pthread_cond_wait(&pool_done, &pool_mu);
    pthread_mutex_unlock(&pool_mu);
    pthread_mutex_unlock(&launch_mu);
    int64_t worst = 0;
    for (int64_t v = 0; v < n; v++) {
        int64_t s = status[v];
        if (s != 0 && (worst == 0 || worst == 1 || (s != 1 && s < worst))) worst = s;
    }
    return worst;
}

/* -- BLAS: the kernels call rammer_cpu_sgemm (blas.py), here scipy's OpenBLAS sgemm, set at load -- */
typedef void (*sgemm_fn)(const char *, const char *, const int *, const int *, const int *, const float *,
                         const float *, const int *, const float *, const int *, const float *, float *, const int *);
static sgemm_fn sgemm_at;

void rammer_image_set_sgemm(void *fn) { sgemm_at = (sgemm_fn)fn; }

void rammer_cpu_sgemm(const char *ta, const char *tb, const int *m, const int *n, const int *k, const float *alpha,
                      const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
                      const int *ldc) {
    sgemm_at(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* -- numba runtime (NRT) calls, as numba's nrt.c lays a MemInfo out -------------------------- */
typedef void (*dtor_fn)(void *, size_t, void *);
typedef struct { size_t refct; dtor_fn dtor; void *dtor_info; void *data; size_t size; void *external; } MemInfo;

MemInfo *NRT_MemInfo_alloc_aligned(size_t size, unsigned align) {
    if (align == 0) align = 1;
    char *base = malloc(sizeof(MemInfo) + size + 2 * (size_t)align);
    if (base == NULL) return NULL;
    MemInfo *mi = (MemInfo *)base;
    uintptr_t data = (uintptr_t)(base + sizeof(MemInfo));
    if (data % align) data += align - data % align;
    mi->refct = 1; mi->dtor = NULL; mi->dtor_info = NULL; mi->data = (void *)data; mi->size = size;
    mi->external = NULL;
    return mi;
}

void NRT_MemInfo_call_dtor(MemInfo *mi) {
    if (mi->dtor) mi->dtor(mi->data, mi->size, mi->dtor_info);
    free(mi);
}

void NRT_Free(void *ptr) { free(ptr); }

/* -- numba's helpers on a kernel's exception path ---------------------------------------------- */
typedef struct _object PyObject;
extern PyObject *PyExc_RuntimeError;
extern void PyErr_SetString(PyObject *, const char *);
extern int PyGILState_Ensure(void);
extern void PyGILState_Release(int);

void numba_gil_ensure(int *state) { *state = PyGILState_Ensure(); }
void numba_gil_release(int *state) { PyGILState_Release(*state); }

static const char raised[] = "a kernel raised an exception in rammer's native image "
                             "(compile with RAMMER_NATIVE_IMAGE=0 to see numba's message)";

PyObject *numba_unpickle(const char *data, int n, const char *hashed) {
    (void)data; (void)n; (void)hashed;
    PyErr_SetString(PyExc_RuntimeError, raised);
    return NULL;
}

PyObject *numba_runtime_build_excinfo_struct(PyObject *struct_gv, PyObject *exc_args) {
    (void)struct_gv; (void)exc_args;
    PyErr_SetString(PyExc_RuntimeError, raised);
    return NULL;
}

int numba_do_raise(PyObject *exc_packed) {
    (void)exc_packed;
    PyErr_SetString(PyExc_RuntimeError, raised);
    return 0;
}
"""
