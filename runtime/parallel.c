/*
 * parallel.c - a small persistent thread pool for kernel loops.
 *
 * BLAS calls bring their own threads; this pool is for the loops around
 * them (im2col, elementwise, pooling). One job runs at a time: a caller that
 * finds the pool busy (another request's kernel) runs its loop inline rather
 * than queueing, since the cores are already in use.
 */
#include "kernel.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define SLIM_MAX_THREADS 64

static struct {
    pthread_once_t once;
    int n_threads;                   /* including the caller */
    pthread_mutex_t job_lock;        /* held by the caller running a job */
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    unsigned long generation;
    int pending;                     /* workers still in the current job */
    void (*fn)(int64_t, int64_t, void *);
    void *user;
    int64_t n, chunk;
    atomic_llong next;
} pool = {.once = PTHREAD_ONCE_INIT};

static void run_chunks(void)
{
    for (;;) {
        int64_t begin = atomic_fetch_add(&pool.next, pool.chunk);
        if (begin >= pool.n)
            break;
        int64_t end = begin + pool.chunk < pool.n ? begin + pool.chunk : pool.n;
        pool.fn(begin, end, pool.user);
    }
}

static void *worker_main(void *arg)
{
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&pool.mu);
        while (pool.generation == seen)
            pthread_cond_wait(&pool.cv_start, &pool.mu);
        seen = pool.generation;
        pthread_mutex_unlock(&pool.mu);
        run_chunks();
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.cv_done);
        pthread_mutex_unlock(&pool.mu);
    }
    return arg;
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
    /* BLAS runs single-threaded inside our parts (see slim_sgemm). */
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
    pool.n = n;
    pool.chunk = chunk;
    atomic_store(&pool.next, 0);
    pool.pending = threads - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.cv_start);
    pthread_mutex_unlock(&pool.mu);
    run_chunks();
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.cv_done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&pool.job_lock);
}
