/*
 * batch_run.c - what a model instance does with a batch: merge the requests'
 * inputs along the batch dimension, run the model once, give each request
 * its rows of every output, and answer it. batcher.c decides what goes
 * into a batch and runs the threads; an instance thread hands each batch
 * here once (slim__batcher_run) and gets it back answered.
 *
 * Everything a run changes lives here too, so that a batch's run never
 * calls back into the queue: the shape's ceiling (record_run; batcher.c
 * only reads it to size batches), the shape's "alone" mark, and the run
 * gate that makes each run's cancellation token.
 *
 * Out of memory. A batch whose run fails with SLIM_EOOM is split into two
 * halves (by request count, queue order kept) that are run one after the
 * other, recursively, down to single requests; record_run lowers the
 * shape's ceiling on the way, so later batches are formed at a size that
 * fits. A single request that still runs out of memory is retried once
 * alone on the model when other runs overlapped it (their memory may be
 * what it lacked). A request of several rows that still does not fit is
 * run in parts of its rows, halving the part until it fits (the rows are
 * independent, as max_batch_size > 0 asserts, so the parts' outputs are
 * the request's outputs bit for bit), and its outputs are assembled from
 * them. Only a request that fails one row at a time, or whose whole outputs
 * cannot be held, is answered 507 with the allocator's message, which
 * names the bytes asked for, held and allowed. Nothing else in the batch
 * is affected.
 *
 * Any other failure of a merged batch reruns its requests alone, so one bad
 * request (a token id past the vocabulary, say) fails only itself.
 *
 * Results do not depend on the batch: max_batch_size > 0 asserts, as in
 * Triton, that the model treats rows independently, and the outputs handed
 * out are the rows of the batch's outputs. (That the kernels give a row
 * the same bits at every batch size is the runtime's part;
 * tests/e2e/test_batching.py checks it.)
 *
 * Cancellation. Each run enters its own token (gate_enter makes it;
 * deadlines.c says when it is cancelled), so the runtime stops a cancelled
 * run at its next check. A cancelled run is not a failure of the batch:
 * nothing is retried, and each request is answered for itself: the ones
 * that no longer want an answer (slim__batcher_task_dead) get their own
 * reason, whatever the run did. Tasks that died between the queue and a
 * run (or between the halves of a split batch) are answered without it.
 *
 * Outputs are views: a request's output tensor points into the batch's
 * output buffer and holds a reference to it, so splitting copies nothing,
 * and the buffer goes back to the allocator once the last request of the
 * batch has been answered. Inputs are copied into the merged tensors.
 */
#include "batcher_impl.h"
#include "clock.h"
#include "codec.h"
#include "config.h"
#include "device.h"
#include "metrics.h"
#include "repository.h"

#include <stdlib.h>
#include <string.h>

#define MAX_PROBE_BACKOFF 64        /* times oom_probe_after */

/* ---- the shape's ceiling ------------------------------------------------- */

/* The tightest ceiling over the model's shapes, for slim_batch_ceiling. */
static void publish_ceiling(slim_server_batcher *b)
{
    int lowest = b->max_batch;
    for (const slim_server_shape *sh = b->shapes; sh; sh = sh->next)
        if (sh->ceiling < lowest)
            lowest = sh->ceiling;
    atomic_store(&b->model->stats->batch_ceiling, lowest);
}

/* A run of `rows` rows of shape sh ended with s: moves the shape's ceiling
 * (batcher.c's top says how) and counts out-of-memory runs. */
static void record_run(slim_server_batcher *b, slim_server_shape *sh, int64_t rows, int n_tasks,
                       slim_status s)
{
    slim_server_stats *st = b->model->stats;
    if (s == SLIM_EOOM) {
        atomic_fetch_add(&st->ooms, 1);
        if (n_tasks > 1)
            atomic_fetch_add(&st->halvings, 1);
    }
    if (!sh || (s != SLIM_OK && s != SLIM_EOOM))
        return;
    int base = b->cfg->oom_probe_after;
    pthread_mutex_lock(&b->mu);
    if (s == SLIM_OK) {
        if (rows > sh->ceiling) /* a lone request larger than the ceiling fit */
            sh->ceiling = rows > b->max_batch ? b->max_batch : (int)rows;
        if (rows >= sh->ceiling) {
            if (sh->probing)
                sh->probe_after = base;
            sh->probing = false;
            if (++sh->streak >= sh->probe_after && sh->ceiling < b->max_batch) {
                sh->ceiling = sh->ceiling > b->max_batch / 2 ? b->max_batch : 2 * sh->ceiling;
                sh->streak = 0;
                sh->probing = true;
            }
        }
    } else {
        if (sh->probing && sh->probe_after < base * MAX_PROBE_BACKOFF)
            sh->probe_after *= 2;
        sh->probing = false;
        sh->streak = 0;
        int half = rows / 2 > 1 ? (int)(rows / 2) : 1;
        if (half < sh->ceiling)
            sh->ceiling = half;
    }
    publish_ceiling(b);
    pthread_mutex_unlock(&b->mu);
}

/* The shape's outputs have no batch dimension: its requests run alone. */
static void mark_alone(slim_server_batcher *b, slim_server_shape *sh)
{
    if (!sh)
        return;
    pthread_mutex_lock(&b->mu);
    sh->alone = true;
    pthread_mutex_unlock(&b->mu);
}

/* ---- the run gate ---------------------------------------------------------- */

/* Enters the gate for a run of tasks ts[0..n) and makes the run's
 * cancellation token (deadlines.c cancels it). */
static void gate_enter(slim_server_batcher *b, bool exclusive, slim_server_task **ts, int n,
                       slim__run_ticket *tk)
{
    pthread_mutex_lock(&b->mu);
    if (exclusive) {
        b->exclusive_waiting++;
        while (b->running || b->exclusive)
            pthread_cond_wait(&b->gate_cv, &b->mu);
        b->exclusive_waiting--;
        b->exclusive = true;
    } else {
        /* Waiting exclusive runs go first, or a busy model starves them. */
        while (b->exclusive || b->exclusive_waiting)
            pthread_cond_wait(&b->gate_cv, &b->mu);
    }
    b->running++;
    b->starts++;
    *tk = (slim__run_ticket){.exclusive = exclusive, .running_at_start = b->running,
                             .starts_at_start = b->starts, .tasks = ts, .n_tasks = n};
    /* The latest deadline of the tasks that still want the answer; none
     * if one of them has none (deadlines.c's top: a batch is cancelled
     * only when every member is done with it). */
    int64_t now = slim_server_now_us(), latest = 0;
    bool unbounded = false;
    for (int k = 0; k < n; k++) {
        if (slim__batcher_task_dead(b, ts[k], now))
            continue;
        if (!ts[k]->run_deadline)
            unbounded = true;
        else if (ts[k]->run_deadline > latest)
            latest = ts[k]->run_deadline;
    }
    slim_cancel_init(&tk->token, unbounded ? 0 : latest * 1000);
    slim_cancel_reason why = slim__batcher_run_dead(b, tk, now);
    if (why)
        slim_cancel_request(&tk->token, why);
    tk->next = b->runs;
    b->runs = tk;
    if (b->watch_idle)
        pthread_cond_signal(&b->watch_cv);
    pthread_mutex_unlock(&b->mu);
}

/* Returns whether another run of the model overlapped this one. */
static bool gate_leave(slim_server_batcher *b, slim__run_ticket *tk)
{
    pthread_mutex_lock(&b->mu);
    bool overlapped = tk->running_at_start > 1 || b->starts != tk->starts_at_start;
    for (slim__run_ticket **p = &b->runs; *p; p = &(*p)->next)
        if (*p == tk) {
            *p = tk->next;
            break;
        }
    b->running--;
    if (tk->exclusive)
        b->exclusive = false;
    pthread_cond_broadcast(&b->gate_cv);
    pthread_mutex_unlock(&b->mu);
    return overlapped;
}

/* ---- one run ---------------------------------------------------------------- */

static const slim_tensor *task_input(const slim_server_task *t, const char *name)
{
    for (int j = 0; j < t->rq->n_inputs; j++)
        if (t->rq->names[j] == name || strcmp(t->rq->names[j], name) == 0)
            return &t->rq->inputs[j];
    return NULL;
}

/* xs[i]: model input i of every task, concatenated in task order. */
static slim_status gather_inputs(const slim_server_config *cfg, slim_server_task **ts, int n,
                                 int64_t rows, slim_tensor *xs, slim_err *err)
{
    for (int i = 0; i < cfg->n_inputs; i++) {
        const char *name = cfg->inputs[i].name;
        const slim_tensor *first = task_input(ts[0], name);
        if (!first)
            return slim_errf(err, SLIM_EINTERNAL, "batched request lacks input '%s'", name);
        xs[i] = (slim_tensor){.dtype = first->dtype, .ndim = first->ndim};
        memcpy(xs[i].dims, first->dims, sizeof(first->dims));
        xs[i].dims[0] = rows;
        slim_status s = slim_tensor_alloc(&xs[i], err);
        if (s != SLIM_OK)
            return s;
        size_t offset = 0;
        for (int k = 0; k < n; k++) {
            const slim_tensor *x = task_input(ts[k], name);
            size_t bytes = x ? slim_tensor_nbytes(x) : 0;
            if (bytes)
                memcpy((char *)xs[i].data + offset, x->data, bytes);
            offset += bytes;
        }
    }
    return SLIM_OK;
}

/* Gives each task its rows of every output, as views. Fails, handing out
 * nothing, when an output has no batch dimension to split along. */
static slim_status split_outputs(const slim_server_model *m, slim_tensor *outs, int n_outs,
                                 int64_t rows, slim_server_task **ts, int n, slim_err *err)
{
    for (int o = 0; o < n_outs; o++)
        if (outs[o].ndim < 1 || outs[o].dims[0] != rows || (outs[o].data && !outs[o].buf))
            return slim_errf(err, SLIM_ESHAPE, "model '%s': output %d has no batch dimension of "
                             "%lld rows to split; its requests run alone", m->name, o,
                             (long long)rows);
    for (int k = 0; k < n; k++) {
        if (!(ts[k]->outputs = calloc((size_t)(n_outs ? n_outs : 1), sizeof(slim_tensor)))) {
            for (int j = 0; j < k; j++) {
                slim_tensors_free(ts[j]->outputs, ts[j]->n_outputs);
                ts[j]->outputs = NULL;
                ts[j]->n_outputs = 0;
            }
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        }
        ts[k]->n_outputs = n_outs;
    }
    for (int o = 0; o < n_outs; o++) {
        size_t row_bytes = slim_tensor_nbytes(&outs[o]) / (size_t)rows;
        int64_t row = 0;
        for (int k = 0; k < n; k++) {
            slim_tensor *y = &ts[k]->outputs[o];
            *y = outs[o];
            y->dims[0] = ts[k]->rows;
            if (outs[o].data) {
                y->data = (char *)outs[o].data + (size_t)row * row_bytes;
                slim_buffer_ref(outs[o].buf);
            }
            row += ts[k]->rows;
        }
    }
    return SLIM_OK;
}

/* One run of ts as a batch. On success every task has its outputs. */
static slim_status run_once(slim_server_batcher *b, slim_server_task **ts, int n, bool exclusive,
                            bool *overlapped, bool *unsplittable, slim_err *err)
{
    const slim_server_model *m = b->model;
    const slim_server_config *cfg = &m->cfg;
    int64_t rows = 0;
    for (int k = 0; k < n; k++)
        rows += ts[k]->rows;
    slim__run_ticket ticket;
    slim_status s;
    gate_enter(b, exclusive, ts, n, &ticket);
    slim_cancel *outer = slim_cancel_enter(&ticket.token);
    /* The statistics extension's phases: merge, run, split (stats.c). */
    int64_t t0 = slim_server_now_ns(), t_run = t0, t_split = 0;
    if (n == 1) { /* the request's own tensors, no copy */
        const slim_server_infer *rq = ts[0]->rq;
        s = slim_model_run(m->model, rq->n_inputs, rq->names, rq->inputs, &ts[0]->outputs,
                           &ts[0]->n_outputs, err);
        t_split = slim_server_now_ns();
    } else {
        slim_tensor *xs = calloc((size_t)(cfg->n_inputs ? cfg->n_inputs : 1), sizeof(*xs));
        const char **names = calloc((size_t)(cfg->n_inputs ? cfg->n_inputs : 1), sizeof(*names));
        slim_tensor *outs = NULL;
        int n_outs = 0;
        if (!xs || !names) {
            s = slim_errf(err, SLIM_ENOMEM, "out of memory");
            goto merged_done;
        }
        for (int i = 0; i < cfg->n_inputs; i++)
            names[i] = cfg->inputs[i].name;
        if ((s = gather_inputs(cfg, ts, n, rows, xs, err)) != SLIM_OK)
            goto merged_done;
        t_run = slim_server_now_ns();
        if ((s = slim_model_run(m->model, cfg->n_inputs, names, xs, &outs, &n_outs, err)) != SLIM_OK)
            goto merged_done;
        t_split = slim_server_now_ns();
        s = split_outputs(m, outs, n_outs, rows, ts, n, err);
        *unsplittable = s == SLIM_ESHAPE;
    merged_done:
        slim_tensors_free(outs, n_outs); /* the views keep what they need */
        for (int i = 0; xs && i < cfg->n_inputs; i++)
            slim_tensor_release(&xs[i]);
        free(xs);
        free(names);
    }
    int64_t t_end = slim_server_now_ns();
    slim_cancel_enter(outer);
    *overlapped = gate_leave(b, &ticket);
    if (s != SLIM_OK && !err->msg[0])
        slim_errf(err, s, "%s", slim_strerror(s));
    if (s == SLIM_OK) {
        atomic_fetch_add(&m->stats->execution_count, 1);
        slim_server_stats_observe_batch(m->stats, rows);
        slim_server_stats_observe_run(m->stats, rows, t_run - t0, t_split - t_run,
                                      t_end - t_split);
        for (int k = 0; k < n; k++) {
            ts[k]->input_ns = t_run - t0;
            ts[k]->infer_ns = t_split - t_run;
            ts[k]->output_ns = t_end - t_split;
            ts[k]->run_ns = t0; /* trace.c's COMPUTE_START */
        }
    }
    record_run(b, ts[0]->shape, rows, n, s);
    return s;
}

/* ---- a lone request run in parts of its rows --------------------------- */

typedef struct row_split {
    slim_server_batcher *b;
    slim_server_task *t;
    slim_tensor *outs;  /* the request's whole outputs, made by the first part */
    int n_outs;
    int parts;
} row_split;

/* Whether t's inputs all have its rows as their first dimension. */
static bool rows_splittable(const slim_server_task *t)
{
    const slim_server_infer *rq = t->rq;
    if (t->rows < 2)
        return false;
    for (int i = 0; i < t->model->cfg.n_outputs; i++)
        if (t->model->cfg.outputs[i].dtype == SLIM_STRING) /* rows are not byte ranges */
            return false;
    for (int i = 0; i < rq->n_inputs; i++)
        if (rq->inputs[i].dtype == SLIM_STRING || rq->inputs[i].ndim < 1 ||
            rq->inputs[i].dims[0] != t->rows ||
            (slim_tensor_numel(&rq->inputs[i]) > 0 && !rq->inputs[i].data))
            return false;
    return true;
}

/* Copies part outputs ys (rows [r0, r0 + n)) into the whole outputs,
 * allocating them on the first part. */
static slim_status place_part(row_split *rs, slim_tensor *ys, int n_ys, int64_t r0, int64_t n,
                              slim_err *err)
{
    const slim_server_model *m = rs->b->model;
    if (!rs->outs) {
        if (!(rs->outs = calloc((size_t)(n_ys ? n_ys : 1), sizeof(slim_tensor))))
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        rs->n_outs = n_ys;
        for (int o = 0; o < n_ys; o++) {
            if (ys[o].ndim < 1 || ys[o].dims[0] != n || ys[o].kind != SLIM_KIND_TENSOR)
                return slim_errf(err, SLIM_ESHAPE, "model '%s': output %d has no batch "
                                 "dimension to assemble a request's parts along", m->name, o);
            rs->outs[o] = (slim_tensor){.dtype = ys[o].dtype, .ndim = ys[o].ndim};
            memcpy(rs->outs[o].dims, ys[o].dims, sizeof(ys[o].dims));
            rs->outs[o].dims[0] = rs->t->rows;
            slim_status s = slim_tensor_alloc(&rs->outs[o], err);
            if (s != SLIM_OK)
                return s;
        }
    }
    if (n_ys != rs->n_outs)
        return slim_errf(err, SLIM_ESHAPE, "model '%s': parts of a request gave %d and %d "
                         "outputs", m->name, rs->n_outs, n_ys);
    for (int o = 0; o < n_ys; o++) {
        slim_tensor *y = &rs->outs[o];
        bool same = ys[o].dtype == y->dtype && ys[o].ndim == y->ndim && ys[o].dims[0] == n;
        for (int d = 1; same && d < y->ndim; d++)
            same = ys[o].dims[d] == y->dims[d];
        if (!same)
            return slim_errf(err, SLIM_ESHAPE, "model '%s': output %d of a part of a request "
                             "has another shape than the first part's", m->name, o);
        size_t row_bytes = slim_tensor_nbytes(y) / (size_t)rs->t->rows;
        if (row_bytes && ys[o].data)
            memcpy((char *)y->data + (size_t)r0 * row_bytes, ys[o].data, (size_t)n * row_bytes);
    }
    return SLIM_OK;
}

/* Runs rows [r0, r0 + n) of the request alone on the model, halving on
 * out of memory down to single rows. Inputs are views into the request's. */
static slim_status run_part(row_split *rs, int64_t r0, int64_t n, slim_err *err)
{
    const slim_server_model *m = rs->b->model;
    const slim_server_infer *rq = rs->t->rq;
    slim_tensor *xs = calloc((size_t)(rq->n_inputs ? rq->n_inputs : 1), sizeof(*xs));
    if (!xs)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    for (int i = 0; i < rq->n_inputs; i++) {
        const slim_tensor *x = &rq->inputs[i];
        size_t row_bytes = slim_tensor_nbytes(x) / (size_t)rs->t->rows;
        xs[i] = *x;
        xs[i].buf = NULL; /* borrowed: the request keeps its inputs until answered */
        xs[i].dims[0] = n;
        xs[i].data = row_bytes ? (char *)x->data + (size_t)r0 * row_bytes : NULL;
    }
    slim_tensor *ys = NULL;
    int n_ys = 0;
    slim__run_ticket ticket;
    gate_enter(rs->b, true, &rs->t, 1, &ticket);
    slim_cancel *outer = slim_cancel_enter(&ticket.token);
    slim_status s = slim_model_run(m->model, rq->n_inputs, rq->names, xs, &ys, &n_ys, err);
    slim_cancel_enter(outer);
    gate_leave(rs->b, &ticket);
    free(xs);
    if (s == SLIM_OK) {
        rs->parts++;
        atomic_fetch_add(&m->stats->execution_count, 1);
        slim_server_stats_observe_batch(m->stats, n);
        s = place_part(rs, ys, n_ys, r0, n, err);
        slim_tensors_free(ys, n_ys);
        return s;
    }
    slim_tensors_free(ys, n_ys);
    if (s != SLIM_EOOM || n < 2)
        return s;
    *err = (slim_err){0};
    int64_t half = n / 2;
    if ((s = run_part(rs, r0, half, err)) != SLIM_OK)
        return s;
    return run_part(rs, r0 + half, n - half, err);
}

/* The request ran out of memory alone: its rows in halves, quarters...
 * On success t has its outputs. */
static slim_status run_in_parts(slim_server_batcher *b, slim_server_task *t, slim_err *err)
{
    row_split rs = {.b = b, .t = t};
    int64_t half = t->rows / 2;
    slim_status s = run_part(&rs, 0, half, err);
    if (s == SLIM_OK)
        s = run_part(&rs, half, t->rows - half, err);
    if (s != SLIM_OK) {
        slim_tensors_free(rs.outs, rs.n_outs);
        return s;
    }
    t->outputs = rs.outs;
    t->n_outputs = rs.n_outs;
    return SLIM_OK;
}

static void answer(slim_server_task *t, slim_status s, const slim_err *err, int http_status)
{
    t->status = s;
    if (s != SLIM_OK) {
        t->err = *err;
        t->http_status = http_status;
        t->failure = SLIM_SERVER_FAIL_BACKEND;
    }
    t->t_done = slim_server_now_us();
    slim__batcher_finish(t); /* t may be freed from here on */
}

static bool is_cancel(slim_status s)
{
    return s == SLIM_ETIMEDOUT || s == SLIM_ECANCELLED;
}

/* After a run that gave s: t's answer, unless it no longer wants one. A
 * run that finished is answered even when its model was unloaded or the
 * server began to stop meanwhile: the outputs are right, and ready. */
static void answer_ran(slim_server_batcher *b, slim_server_task *t, slim_status s,
                       const slim_err *err, int http_status)
{
    slim_cancel_reason why = slim__batcher_task_dead(b, t, slim_server_now_us());
    if (s == SLIM_OK && (why == SLIM_CANCEL_UNLOAD || why == SLIM_CANCEL_SHUTDOWN))
        why = SLIM_CANCEL_NONE;
    if (why) {
        slim__batcher_answer_dead(b, t, why, true);
        return;
    }
    /* A run cancelled while t still wants its answer: only when the
     * runtime and this check read the clock on either side of t's deadline;
     * the runtime's message says what happened. */
    answer(t, s, err, is_cancel(s) ? (s == SLIM_ETIMEDOUT ? 504 : 503) : http_status);
}

/* Answers the tasks that must not run any more and moves the rest to the
 * front; returns how many are left. */
static int drop_dead(slim_server_batcher *b, slim_server_task **ts, int n)
{
    int64_t now = slim_server_now_us();
    int live = 0;
    for (int k = 0; k < n; k++) {
        slim_cancel_reason why = slim__batcher_task_dead(b, ts[k], now);
        if (why)
            slim__batcher_answer_dead(b, ts[k], why, false);
        else
            ts[live++] = ts[k];
    }
    return live;
}

void slim__batcher_run(slim_server_batcher *b, slim_server_task **ts, int n)
{
    slim_err err = {0};
    bool overlapped = false, unsplittable = false;
    if (!(n = drop_dead(b, ts, n)))
        return;
    slim_status s = run_once(b, ts, n, false, &overlapped, &unsplittable, &err);
    if (s == SLIM_OK || is_cancel(s)) {
        for (int k = 0; k < n; k++)
            answer_ran(b, ts[k], s, &err, 0);
        return;
    }
    if (n > 1) {
        if (unsplittable)
            mark_alone(b, ts[0]->shape);
        if (s == SLIM_EOOM) {
            int half = n / 2;
            slim__batcher_run(b, ts, half);
            slim__batcher_run(b, ts + half, n - half);
        } else {
            for (int k = 0; k < n; k++)
                slim__batcher_run(b, ts + k, 1);
        }
        return;
    }
    if (s == SLIM_EOOM && overlapped) {
        err = (slim_err){0};
        s = run_once(b, ts, 1, true, &overlapped, &unsplittable, &err);
        if (s == SLIM_OK || is_cancel(s)) {
            answer_ran(b, ts[0], s, &err, 0);
            return;
        }
    }
    if (s == SLIM_EOOM && ts[0]->shape && rows_splittable(ts[0])) {
        slim_err part_err = {0};
        slim_status ps = run_in_parts(b, ts[0], &part_err);
        if (ps == SLIM_OK || is_cancel(ps)) {
            answer_ran(b, ts[0], ps, &part_err, 0);
            return;
        }
        if (ps == SLIM_EOOM) /* a single row, or the whole outputs, did not fit */
            err = part_err;
    }
    if (s == SLIM_EOOM) {
        const slim_server_model *m = b->model;
        slim_err why = err;
        slim_errf(&why, SLIM_EOOM, "model '%s' cannot run this request (batch %lld) even alone: %s",
                  m->name, (long long)ts[0]->rows, err.msg);
        answer_ran(b, ts[0], s, &why, 507);
        return;
    }
    answer_ran(b, ts[0], s, &err, 0);
}
