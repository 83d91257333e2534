/*
 * parallel.c - a small persistent thread pool for kernel loops.
 *
 * BLAS calls bring their own threads; this pool is for the loops around
 * them (im2col, elementwise, pooling). One job runs at a time: a caller that
 * finds the pool busy (another request's kernel) runs its loop inline rather
 * than queueing, since the cores are already in use.
 *
 * Waking a sleeping worker through the condition variable, and the caller
 * sleeping until the last part is done, cost tens of microseconds each: as
 * much as a whole small convolution (MobileNetV2 runs ~35 convs of 20-200
 * us per image). So a worker that finished a job watches for the next one,
 * and the caller for the last part, for a short while (SLIM_POOL_SPIN_US,
 * default POOL_SPIN_US) before sleeping. The spin is bounded and short, so
 * on cores shared with other work it wastes at most that much per job
 * (unlike an OpenMP runtime's spin of milliseconds; see conv_dnnl.c).
 *
 * The caller waits only for the workers that joined the job. On cores
 * shared with other processes a sleeping worker can take a scheduler
 * timeslice (milliseconds) to run; the caller has meanwhile taken all the
 * chunks itself, and waiting for that worker to wake up only to find
 * nothing left stalled the caller for as long (MobileNetV2 runs ~40 jobs
 * of 20-300 us per image). So the caller closes the job when it runs out
 * of chunks, and a worker joins (counts itself in `active`) before it
 * looks at whether the job is still open: either the caller sees it
 * counted and waits for it, or it sees the job closed and goes back to
 * waiting (both sides use sequentially consistent atomics, so at least
 * one sees the other). Which thread runs a chunk never changes what the
 * chunk computes. SLIM_POOL_WAIT_ALL=1 waits for every worker (A/B).
 *
 * A server's run starts after the workers have slept through the gap
 * between requests, so its first kernel loop would pay their wakeup with
 * the caller working alone meanwhile. slim_parallel_prewake, called as
 * a run is about to start, wakes them into their watch (one spin time)
 * while the caller gets the run ready; a worker that sees no job by then
 * goes back to sleep. It changes who runs a chunk, never what it computes.
 */
#include "parallel.h"

#include "alloc.h"
#include "cancel.h"

#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define SLIM_MAX_THREADS 64
#define POOL_SPIN_US 30

static struct {
    pthread_once_t once;
    int n_threads;                   /* including the caller */
    pthread_mutex_t job_lock;        /* held by the caller running a job */
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    atomic_ulong generation;
    unsigned long pokes;             /* prewakes, under mu */
    int sleeping;                    /* workers waiting on cv_start, under mu */
    atomic_int active;               /* workers inside the current job */
    atomic_bool open;                /* whether workers may still join it */
    atomic_int passed;               /* workers done with it (wait_all) */
    bool wait_all;                   /* SLIM_POOL_WAIT_ALL=1: old wait */
    int64_t spin_ns;                 /* how long to watch before sleeping */
    void (*fn)(int64_t, int64_t, void *);
    void *user;
    slim_cancel *token;              /* the caller's, entered by workers */
    slim_mem_account *account;       /* the caller's: a chunk's allocations
                                        are charged where the run's are */
    int64_t n, chunk;
    atomic_llong next;
} pool = {.once = PTHREAD_ONCE_INIT};

/* A cancelled run's remaining chunks are taken and skipped: the executor
 * sees the token after the node and fails the run, so the half-written
 * output is never read. */
static void run_chunks(void)
{
    slim_cancel *prev = slim_cancel_enter(pool.token);
    slim_mem_account *prev_account = slim_mem_account_enter(pool.account);
    for (;;) {
        int64_t begin = atomic_fetch_add(&pool.next, pool.chunk);
        if (begin >= pool.n)
            break;
        int64_t end = begin + pool.chunk < pool.n ? begin + pool.chunk : pool.n;
        if (pool.token && slim_cancel_reason_of(pool.token) != SLIM_CANCEL_NONE)
            continue;
        pool.fn(begin, end, pool.user);
    }
    slim_cancel_enter(prev);
    slim_mem_account_enter(prev_account);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__)
    _mm_pause();
#endif
}

/* Watches *v for up to the spin time; whether it became != old. */
static bool spin_while_ulong(atomic_ulong *v, unsigned long old)
{
    if (pool.spin_ns <= 0)
        return false;
    int64_t until = now_ns() + pool.spin_ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(v, memory_order_acquire) != old)
                return true;
            cpu_relax();
        }
        if (now_ns() > until)
            return false;
        sched_yield(); /* another thread wanting this core runs first */
    }
}

static bool spin_until_value(atomic_int *v, int want)
{
    if (pool.spin_ns <= 0)
        return atomic_load(v) == want;
    int64_t until = now_ns() + pool.spin_ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(v, memory_order_acquire) == want)
                return true;
            cpu_relax();
        }
        if (now_ns() > until)
            return false;
        sched_yield();
    }
}

static void *worker_main(void *arg)
{
    unsigned long seen = 0;
    for (;;) {
        if (!spin_while_ulong(&pool.generation, seen)) {
            pthread_mutex_lock(&pool.mu);
            unsigned long pokes = pool.pokes;
            pool.sleeping++;
            while (atomic_load(&pool.generation) == seen && pool.pokes == pokes)
                pthread_cond_wait(&pool.cv_start, &pool.mu);
            pool.sleeping--;
            bool poked = atomic_load(&pool.generation) == seen;
            pthread_mutex_unlock(&pool.mu);
            if (poked) /* prewoken: watch for the job that is coming */
                continue;
        }
        seen = atomic_load(&pool.generation);
        atomic_fetch_add(&pool.active, 1);
        /* A job published after the generation was read is as good: its
         * fields were written before it was opened. */
        if (atomic_load(&pool.open))
            run_chunks();
        bool last = atomic_fetch_sub(&pool.active, 1) == 1;
        if (pool.wait_all)
            last = atomic_fetch_add(&pool.passed, 1) == pool.n_threads - 2;
        if (last) {
            /* Under the lock, so a caller that saw active > 0 is already
             * waiting when the signal comes. */
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.cv_done);
            pthread_mutex_unlock(&pool.mu);
        }
    }
    return arg;
}

/* OpenBLAS's pthread build starts its own threads when it is loaded,
 * before main, and each one spins (sched_yield in a loop) for 2^28 TSC
 * ticks, about 0.13 s, waiting for work before it sleeps. BLAS runs
 * single-threaded here (pool_init), so they never get any: all they did
 * was hold a core through the process's first 0.13 s, where the pool's
 * worker waited behind them. A 90%-pruned ResNet-18 (9 ms runs on 2
 * threads) ran its first ~10 runs at its 1-thread time; a dense model, its
 * first run or two. So they are stopped before main, while no BLAS call
 * can be in flight (blas_thread_shutdown_, which OpenBLAS exports for its
 * fork handler, joins them; BLAS then runs in the calling thread, as it
 * did). Not openblas_set_num_threads again after that: OpenBLAS 0.3.21's
 * starts the threads anew when none run (pool_init's call would, at the
 * model's creation, just before its first runs). A BLAS without that symbol
 * (serial, or not OpenBLAS) has no such threads. SLIM_BLAS_THREADS=keep
 * leaves them (A/B). BLAS is single-threaded either way, so no product's
 * result changes. */
extern int blas_thread_shutdown_(void) __attribute__((weak));
static bool blas_capped;

__attribute__((constructor)) static void stop_blas_threads(void)
{
    const char *keep = getenv("SLIM_BLAS_THREADS");
    if (keep && strcmp(keep, "keep") == 0)
        return;
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_)
        blas_thread_shutdown_();
    blas_capped = true;
}

static void pool_init(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("SLIM_NUM_THREADS");
    int n = env ? atoi(env) : (int)cores;
    if (n < 1)
        n = 1;
    if (n > SLIM_MAX_THREADS)
        n = SLIM_MAX_THREADS;
    const char *spin = getenv("SLIM_POOL_SPIN_US");
    long spin_us = spin ? atol(spin) : POOL_SPIN_US;
    pool.spin_ns = (spin_us < 0 ? 0 : spin_us > 10000 ? 10000 : spin_us) * 1000;
    const char *all = getenv("SLIM_POOL_WAIT_ALL");
    pool.wait_all = all && strcmp(all, "1") == 0;
    /* BLAS runs single-threaded inside our parts (see slim_sgemm). */
    if (!blas_capped)
        openblas_set_num_threads(1);
    pthread_mutex_init(&pool.job_lock, NULL);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv_start, NULL);
    pthread_cond_init(&pool.cv_done, NULL);
    pool.n_threads = 1;
    for (int i = 1; i < n; i++) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &attr, worker_main, NULL) == 0)
            pool.n_threads++;
        pthread_attr_destroy(&attr);
    }
}

int slim_num_threads(void)
{
    pthread_once(&pool.once, pool_init);
    return pool.n_threads;
}

void slim_parallel_prewake(void)
{
    if (slim_num_threads() == 1 || pool.spin_ns <= 0)
        return;
    pthread_mutex_lock(&pool.mu);
    if (pool.sleeping) {
        pool.pokes++;
        pthread_cond_broadcast(&pool.cv_start);
    }
    pthread_mutex_unlock(&pool.mu);
}

void slim_parallel_for(int64_t n, int64_t grain,
                       void (*fn)(int64_t begin, int64_t end, void *user), void *user)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int threads = slim_num_threads();
    if (threads == 1 || n <= grain || pthread_mutex_trylock(&pool.job_lock) != 0) {
        fn(0, n, user);
        return;
    }
    int64_t chunk = (n + threads * 4 - 1) / (threads * 4);
    if (chunk < grain)
        chunk = grain;
    pthread_mutex_lock(&pool.mu);
    pool.fn = fn;
    pool.user = user;
    pool.token = slim_cancel_current();
    pool.account = slim_mem_account_current();
    pool.n = n;
    pool.chunk = chunk;
    atomic_store(&pool.next, 0);
    atomic_store(&pool.passed, 0);
    atomic_store(&pool.open, true);        /* after the fields: see worker_main */
    atomic_fetch_add(&pool.generation, 1); /* publishes the job to spinning workers */
    pthread_cond_broadcast(&pool.cv_start);
    pthread_mutex_unlock(&pool.mu);
    run_chunks();
    if (pool.wait_all) {
        while (!spin_until_value(&pool.passed, threads - 1)) {
            pthread_mutex_lock(&pool.mu);
            while (atomic_load(&pool.passed) != threads - 1)
                pthread_cond_wait(&pool.cv_done, &pool.mu);
            pthread_mutex_unlock(&pool.mu);
        }
    }
    /* No chunk is left to take: a worker that has not joined yet need not. */
    atomic_store(&pool.open, false);
    if (!spin_until_value(&pool.active, 0)) {
        pthread_mutex_lock(&pool.mu);
        while (atomic_load(&pool.active) > 0)
            pthread_cond_wait(&pool.cv_done, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
    }
    pthread_mutex_unlock(&pool.job_lock);
}
