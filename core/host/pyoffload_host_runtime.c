/* pyoffload_host_runtime.c: the host backend's work-group scheduler.
 *
 * One entry, pyoffload_host_run(), runs a whole data-parallel launch: it hands ranges of
 * work-groups to a persistent pool of POSIX threads and to the calling thread, and returns when
 * every group has run.  It is called through ctypes from a host queue's worker thread, so the
 * GIL is released for the whole launch and no Python code runs per group or per chunk.
 *
 * Built once per machine and compiler by the host backend (pyoffload/host/runtime.py) with the
 * compiler that builds kernels, and cached like kernel images.
 *
 * Calling a kernel with an arbitrary parameter list: the backend lays the arguments out the way
 * the platform's C calling convention passes them (pyoffload/host/runtime.py, ``Layout``):
 * integer-class arguments (pointers, integers) in the first PYO_GPR general registers, floating
 * ones in the first 8 vector registers, the rest in 8-byte stack slots in parameter order.  A
 * call through a function type with PYO_GPR integers, 8 doubles and PYO_STACK integers then
 * passes exactly that (x86-64 System V: 6 GPRs, AArch64 AAPCS64 on Linux: 8; both give every
 * stack argument up to 8 bytes its own 8-byte slot).  A float travels as the low 32 bits of its
 * register or slot, as both conventions place it.  Extra stack slots are harmless: the caller
 * owns and pops them.
 *
 * Fork: a child has none of the parent's threads.  pthread_atfork resets the pool in the child;
 * its first launch starts new threads.  Exit: the pool threads are detached and wait on a
 * condition variable, so they never hold up process exit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyoffload_host.h"

#if defined(__x86_64__)
#define PYO_GPR 6
#elif defined(__aarch64__) && !defined(__APPLE__)
#define PYO_GPR 8
#else
#error "pyoffload host runtime: calling convention not supported (x86-64 System V or AArch64 Linux)"
#endif
#define PYO_FPR 8
#define PYO_STACK 32
#define PYO_SLOTS (PYO_GPR + PYO_STACK)
#define PYO_MAX_LOCAL 16
#define PYO_LOCAL_ALIGN 64

/* The launch descriptor.  runtime.py mirrors this layout (``_Launch``); the runtime only reads it,
 * so one descriptor may be run again (prepared launches). */
typedef struct pyo_launch {
    void *fn;
    uint64_t abi;           /* PYO_ABI_GROUPS or PYO_ABI_CONTEXT */
    uint64_t num_groups[3];
    uint64_t local_size[3];
    int64_t ctx_slot;       /* the slot that receives the pyoffload_groups / pyoffload_launch pointer */
    uint64_t nlocal;        /* LocalMemory arguments */
    int64_t local_slot[PYO_MAX_LOCAL];
    uint64_t local_bytes[PYO_MAX_LOCAL];
    uint64_t slots[PYO_SLOTS]; /* integer registers, then stack slots */
    uint64_t fpr[PYO_FPR];     /* vector registers, as bits */
} pyo_launch;

enum { PYO_ABI_GROUPS = 1, PYO_ABI_CONTEXT = 2 };
enum { PYO_OK = 0, PYO_TRAPPED = 1, PYO_NO_MEMORY = 2 };

typedef void (*pyo_call)(
#if PYO_GPR == 8
    uint64_t, uint64_t,
#endif
    uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, double, double, double, double, double, double,
    double, double, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
    uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
    uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
    uint64_t);

static void call(void *fn, const uint64_t *s, const uint64_t *fb) {
    double f[PYO_FPR];
    memcpy(f, fb, sizeof f); /* bits, not values: a float's bits sit in the low half */
#if PYO_GPR == 8
    ((pyo_call)fn)(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7],
#else
    ((pyo_call)fn)(s[0], s[1], s[2], s[3], s[4], s[5], f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7],
#endif
                   s[PYO_GPR + 0], s[PYO_GPR + 1], s[PYO_GPR + 2], s[PYO_GPR + 3], s[PYO_GPR + 4],
                   s[PYO_GPR + 5], s[PYO_GPR + 6], s[PYO_GPR + 7], s[PYO_GPR + 8], s[PYO_GPR + 9],
                   s[PYO_GPR + 10], s[PYO_GPR + 11], s[PYO_GPR + 12], s[PYO_GPR + 13], s[PYO_GPR + 14],
                   s[PYO_GPR + 15], s[PYO_GPR + 16], s[PYO_GPR + 17], s[PYO_GPR + 18], s[PYO_GPR + 19],
                   s[PYO_GPR + 20], s[PYO_GPR + 21], s[PYO_GPR + 22], s[PYO_GPR + 23], s[PYO_GPR + 24],
                   s[PYO_GPR + 25], s[PYO_GPR + 26], s[PYO_GPR + 27], s[PYO_GPR + 28], s[PYO_GPR + 29],
                   s[PYO_GPR + 30], s[PYO_GPR + 31]);
}

/* One launch in progress.  It lives in the frame of the pyoffload_host_run() call that owns it,
 * which returns only once it is off the job list and no pool thread is in it. */
typedef struct pyo_job {
    struct pyo_job *next;        /* the job list: under pool.mu */
    const pyo_launch *launch;
    uint64_t total, chunk, threads;
    uint64_t local_offset[PYO_MAX_LOCAL];
    uint64_t local_total;
    _Atomic uint64_t next_group; /* the first group no thread has claimed yet */
    _Atomic uint64_t trapped;    /* 1 + the lowest linear id of a group that trapped; 0: none */
    _Atomic int failed;          /* PYO_NO_MEMORY: a thread could not get its local memory */
    _Atomic int workers;         /* pool threads in this job: changed under pool.mu */
    int woken;                   /* the owner woke the sleeping pool threads for it */
} pyo_job;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job was posted: sleeping pool threads wait here */
    pthread_cond_t done; /* the last pool thread left a job: its owner waits here */
    pyo_job *jobs;
    int started;         /* pool threads running (all under mu) */
    int sleepers;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t local_key; /* each thread's local-memory buffer, freed when the thread ends */

static void after_fork_in_child(void) {
    /* Only the forking thread exists in the child: the pool is empty, the locks are fresh. */
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.jobs = NULL;
    pool.started = 0;
    pool.sleepers = 0;
}

static void init_once(void) {
    pthread_key_create(&local_key, free);
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

typedef struct {
    void *base;
    size_t size;
} pyo_local;

static void *local_memory(size_t size) {
    pyo_local *l = pthread_getspecific(local_key);
    if (l != NULL && l->size >= size) return l->base;
    /* one block: the header, then the aligned buffer (freed by the key's destructor in one go) */
    size_t want = size < 4096 ? 4096 : size;
    pyo_local *n = NULL;
    if (posix_memalign((void **)&n, PYO_LOCAL_ALIGN, PYO_LOCAL_ALIGN + want) != 0) return NULL;
    n->base = (char *)n + PYO_LOCAL_ALIGN;
    n->size = want;
    memset(n->base, 0, want);
    free(l);
    pthread_setspecific(local_key, n);
    return n->base;
}

static void note_trap(pyo_job *j, uint64_t group) {
    uint64_t mark = group + 1, seen = atomic_load(&j->trapped);
    while ((seen == 0 || mark < seen) && !atomic_compare_exchange_weak(&j->trapped, &seen, mark)) {
    }
}

/* Groups [first, last) of a PYOFFLOAD_KERNEL kernel: one call, the kernel loops over them. */
static void run_groups(pyo_job *j, uint64_t first, uint64_t last, uint64_t *s) {
    const pyo_launch *L = j->launch;
    pyoffload_groups g;
    memcpy(g.num_groups, L->num_groups, sizeof g.num_groups);
    memcpy(g.local_size, L->local_size, sizeof g.local_size);
    g.first = first;
    g.last = last;
    g.trap_env = NULL;
    g.trapped = 0;
    s[L->ctx_slot] = (uint64_t)(uintptr_t)&g;
    call(L->fn, s, L->fpr);
    if (g.trapped) note_trap(j, g.trapped - 1);
}

/* Groups [first, last) of a kernel with a trailing pyoffload_launch parameter: one call each.
 * A trap longjmps back here (pyoffload_launch_trap in pyoffload_host.h). */
static void run_context(pyo_job *j, uint64_t first, uint64_t last, uint64_t *s, void *local, uint64_t thread) {
    const pyo_launch *L = j->launch;
    jmp_buf env;
    volatile pyoffload_launch ctx;
    for (int d = 0; d < 3; d++) {
        ctx.num_groups[d] = L->num_groups[d];
        ctx.local_size[d] = L->local_size[d];
        ctx.global_size[d] = L->num_groups[d] * L->local_size[d];
    }
    ctx.group_count = j->total;
    ctx.local_memory = local;
    ctx.local_memory_bytes = j->local_total;
    ctx.thread = (uint32_t)thread;
    ctx.threads = (uint32_t)j->threads;
    ctx.trap_env_ = &env;
    ctx.trapped_ = 0;
    s[L->ctx_slot] = (uint64_t)(uintptr_t)&ctx;
    if (setjmp(env) != 0) {
        note_trap(j, ctx.group_linear_id);
        return;
    }
    uint64_t gx = L->num_groups[0], gy = L->num_groups[1];
    for (uint64_t g = first; g < last; g++) {
        ctx.group_linear_id = g;
        ctx.group_id[0] = g % gx;
        ctx.group_id[1] = g / gx % gy;
        ctx.group_id[2] = g / gx / gy;
        call(L->fn, s, L->fpr);
    }
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Wake the sleeping pool threads for job j, once (the launch's own thread, under no lock). */
static void wake(pyo_job *j) {
    if (j->woken) return;
    j->woken = 1;
    pthread_mutex_lock(&pool.mu);
    if (pool.sleepers) pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.mu);
}

/* Work a launch's own thread does before it wakes sleeping pool threads: waking one (a futex
 * call, then the scheduler) costs the launch several microseconds on its own thread and takes
 * 10-50 us to bring help, so a launch whose remaining groups take less than this runs them alone
 * (a tiny kernel split into many groups, as frameworks launch them, then costs what one group
 * does); a longer one wakes them at once. */
#define PYO_WAKE_NS 25000u

/* Claim ranges of groups until none is left (or the launch failed).  The launch's own thread
 * (`owner`, of a launch shared with pool threads) starts with one group alone and times it, and
 * after each range wakes the pool once the groups left look longer than PYO_WAKE_NS. */
static void run_job(pyo_job *j, uint64_t thread, int owner) {
    const pyo_launch *L = j->launch;
    uint64_t s[PYO_SLOTS];
    memcpy(s, L->slots, sizeof s);
    char *local = NULL;
    if (j->local_total) {
        local = local_memory(j->local_total);
        if (local == NULL) {
            atomic_store(&j->failed, PYO_NO_MEMORY);
            atomic_store(&j->next_group, j->total); /* nobody starts another range */
            return;
        }
        for (uint64_t i = 0; i < L->nlocal; i++) s[L->local_slot[i]] = (uint64_t)(uintptr_t)(local + j->local_offset[i]);
    }
    int watch = owner && !j->woken;
    uint64_t started = watch ? now_ns() : 0, done = 0, chunk = watch ? 1 : j->chunk;
    for (;;) {
        /* compare-and-swap, not fetch-add: the counter never passes total, however large */
        uint64_t first = atomic_load(&j->next_group), last;
        do {
            if (first >= j->total) return;
            last = j->total - first < chunk ? j->total : first + chunk;
        } while (!atomic_compare_exchange_weak(&j->next_group, &first, last));
        if (L->abi == PYO_ABI_GROUPS)
            run_groups(j, first, last, s);
        else
            run_context(j, first, last, s, local, thread);
        if (atomic_load_explicit(&j->trapped, memory_order_relaxed)) {
            atomic_store(&j->next_group, j->total); /* a trap ends the launch: start no more ranges */
            return;
        }
        if (watch) {
            chunk = j->chunk;
            done += last - first;
            uint64_t left = j->total - atomic_load(&j->next_group);
            double took = (double)(now_ns() - started);
            if (left && took / (double)done * (double)left > PYO_WAKE_NS) {
                wake(j);
                watch = 0;
            }
        }
    }
}

/* A job a pool thread may join: groups left, and fewer pool threads in it than it wants. */
static pyo_job *open_job(void) {
    for (pyo_job *j = pool.jobs; j != NULL; j = j->next)
        if (atomic_load(&j->next_group) < j->total && (uint64_t)atomic_load(&j->workers) + 1 < j->threads) return j;
    return NULL;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* How long a launch's caller watches for the pool threads to finish their last ranges before it
 * sleeps on a condition variable: they are about to finish, and a futex wake-up and scheduler
 * round trip cost 10-50 us.  Idle pool threads do not spin at all: on a machine shared with other
 * work (this project's 2-core machine under a load of 3-4) a spinning idle thread takes a core
 * from the threads doing work, and measured launches got slower, not faster. */
#define PYO_SPIN 1000

static void *serve(void *arg) {
    uint64_t thread = (uint64_t)(uintptr_t)arg;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        pyo_job *j = open_job();
        if (j == NULL) {
            pool.sleepers++;
            while ((j = open_job()) == NULL) pthread_cond_wait(&pool.work, &pool.mu);
            pool.sleepers--;
        }
        atomic_fetch_add(&j->workers, 1);
        pthread_mutex_unlock(&pool.mu);
        run_job(j, thread, 0);
        pthread_mutex_lock(&pool.mu);
        if (atomic_fetch_sub(&j->workers, 1) == 1) pthread_cond_broadcast(&pool.done);
    }
    return NULL;
}

/* Start pool threads up to `want` (under pool.mu).  They block every signal: signals belong to
 * the threads the application made (Python handles them on its main thread). */
static int grow(int want) {
    if (pool.started >= want) return 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = 0;
    while (pool.started < want) {
        pthread_t t;
        err = pthread_create(&t, &attr, serve, (void *)(uintptr_t)(pool.started + 1));
        if (err != 0) break;
        pool.started++;
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return err;
}

/* Run launch `L` on `threads` threads (the caller's included).  Returns PYO_OK, PYO_TRAPPED with
 * the lowest trapping group in *trapped, or PYO_NO_MEMORY (a thread got no local memory). */
__attribute__((visibility("default"))) int pyoffload_host_run(const pyo_launch *L, uint64_t threads,
                                                               uint64_t *trapped) {
    pthread_once(&once, init_once);
    pyo_job j;
    j.next = NULL;
    j.launch = L;
    j.total = L->num_groups[0] * L->num_groups[1] * L->num_groups[2];
    j.local_total = 0;
    for (uint64_t i = 0; i < L->nlocal; i++) {
        j.local_offset[i] = j.local_total;
        j.local_total += (L->local_bytes[i] + PYO_LOCAL_ALIGN - 1) / PYO_LOCAL_ALIGN * PYO_LOCAL_ALIGN;
    }
    if (threads < 1) threads = 1;
    if (threads > j.total) threads = j.total;
    j.threads = threads;
    /* several ranges per thread, so that a thread that started late still gets a share */
    j.chunk = threads == 1 ? j.total : (j.total + 4 * threads - 1) / (4 * threads);
    atomic_init(&j.next_group, 0);
    atomic_init(&j.trapped, 0);
    atomic_init(&j.failed, 0);
    atomic_init(&j.workers, 0);
    j.woken = 0;
    int shared = threads > 1;
    if (shared) {
        /* posted, so that pool threads that are awake join; sleeping ones are woken by run_job
         * once the launch looks long enough to be worth it */
        pthread_mutex_lock(&pool.mu);
        grow((int)threads - 1); /* fewer threads than asked (a thread limit): those there are */
        j.next = pool.jobs;
        pool.jobs = &j;
        pthread_mutex_unlock(&pool.mu);
    }
    run_job(&j, 0, shared);
    if (shared) {
        /* every group is claimed: wait for the pool threads still running theirs */
        for (int i = 0; i < PYO_SPIN && atomic_load(&j.workers) != 0; i++) cpu_relax();
        pthread_mutex_lock(&pool.mu);
        for (pyo_job **p = &pool.jobs; *p != NULL; p = &(*p)->next)
            if (*p == &j) {
                *p = j.next;
                break;
            }
        while (atomic_load(&j.workers) != 0) pthread_cond_wait(&pool.done, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
    }
    if (atomic_load(&j.failed)) return atomic_load(&j.failed);
    uint64_t t = atomic_load(&j.trapped);
    if (t) {
        *trapped = t - 1;
        return PYO_TRAPPED;
    }
    return PYO_OK;
}
