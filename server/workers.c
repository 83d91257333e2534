/*
 * workers.c - the threads that run models, fed by a bounded FIFO queue.
 *
 * The queue is bounded so that overload is answered at once (503) instead
 * of piling up memory and latency; a task carries typed tensors only. Each
 * worker calls slim_model_run and then the task's done callback, which
 * resumes the suspended HTTP connection.
 *
 * The runtime's kernels and BLAS use their own threads, so a handful of
 * workers is enough to keep the cores busy; more only oversubscribes them.
 */
#include "server.h"

#include <stdlib.h>

struct slim_server_workers {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    slim_server_task *head, *tail;
    int queued, capacity;
    bool stopping;
    int n_threads;
    pthread_t *threads;
};

static void run_task(slim_server_task *t)
{
    t->t_started = slim_server_now_us();
    t->outputs = NULL;
    t->n_outputs = 0;
    t->status = slim_model_run(t->model->model, t->rq->n_inputs, t->rq->names, t->rq->inputs,
                               &t->outputs, &t->n_outputs, &t->err);
    if (t->status != SLIM_OK && !t->err.msg[0])
        slim_errf(&t->err, t->status, "%s", slim_strerror(t->status));
    t->t_done = slim_server_now_us();
}

static void *worker_main(void *arg)
{
    slim_server_workers *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->head && !w->stopping)
            pthread_cond_wait(&w->cv, &w->mu);
        slim_server_task *t = w->head;
        if (!t) { /* stopping and drained */
            pthread_mutex_unlock(&w->mu);
            return NULL;
        }
        w->head = t->next;
        if (!w->head)
            w->tail = NULL;
        w->queued--;
        pthread_mutex_unlock(&w->mu);

        run_task(t);
        t->done(t); /* the task may be freed from here on */
    }
}

slim_status slim_server_workers_start(int n_threads, int capacity,
                                      slim_server_workers **out, slim_err *err)
{
    slim_server_workers *w = calloc(1, sizeof(*w));
    if (!w)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    w->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!w->threads) {
        free(w);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->capacity = capacity;
    for (; w->n_threads < n_threads; w->n_threads++) {
        if (pthread_create(&w->threads[w->n_threads], NULL, worker_main, w) != 0) {
            slim_server_workers_stop(w);
            return slim_errf(err, SLIM_EINTERNAL, "could not start worker thread %d", w->n_threads);
        }
    }
    *out = w;
    return SLIM_OK;
}

bool slim_server_workers_submit(slim_server_workers *w, slim_server_task *t)
{
    pthread_mutex_lock(&w->mu);
    bool ok = !w->stopping && w->queued < w->capacity;
    if (ok) {
        t->next = NULL;
        t->t_queued = slim_server_now_us();
        if (w->tail)
            w->tail->next = t;
        else
            w->head = t;
        w->tail = t;
        w->queued++;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return ok;
}

void slim_server_workers_stop(slim_server_workers *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->n_threads; i++)
        pthread_join(w->threads[i], NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->threads);
    free(w);
}
