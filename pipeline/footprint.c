/* footprint.c - a model's memory before loading (slim_model_predict) and
 * after (slim_model_footprint), in the same fields (footprint.h). */
#include "footprint.h"
#include "cancel.h"
#include "onnx/onnx_wire.h"
#include "pipeline.h"
#include "model.h"
#include "plan.h"
#include "slim_init.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* Initializers up to this are read with their values in a weightless
 * prediction: shapes, axes, scalars, the attention scale, which passes
 * and shape inference read. */
#define WEIGHTLESS_KEEP_BYTES 4096

/* Weights of g and its subgraphs, and how many of those bytes are a mapped
 * file's (a buffer with its own release and no allocator block). */
static void weight_split(const slim_graph *g, size_t *bytes, size_t *mapped)
{
    for (int v = 0; v < g->n_values; v++) {
        const slim_value *val = &g->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER)
            continue;
        size_t n = slim_tensor_nbytes(&val->init);
        *bytes += n;
        const slim_buffer *b = val->init.buf;
        if (b && b->release && !b->block)
            *mapped += n;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attrs; a++)
            if (g->nodes[i].attrs[a].type == SLIM_ATTR_GRAPH && g->nodes[i].attrs[a].g)
                weight_split(g->nodes[i].attrs[a].g, bytes, mapped);
}

/* The run's signature at batch: a dynamic first dim is the batch, other
 * dynamic dims 1 (as `slim inspect --memory`). NULL when an input has no
 * known type or rank, or is a container. */
static slim_tensor *signature(const slim_model *m, int64_t batch)
{
    int n = m->graph->n_inputs;
    slim_tensor *sig = calloc((size_t)(n ? n : 1), sizeof(*sig));
    for (int i = 0; sig && i < n; i++) {
        const slim_io_info *info = &m->inputs[i];
        if (info->dtype == SLIM_DTYPE_UNDEFINED || info->ndim < 0 || info->kind) {
            free(sig);
            return NULL;
        }
        sig[i].dtype = info->dtype;
        sig[i].ndim = info->ndim;
        for (int d = 0; d < info->ndim; d++)
            sig[i].dims[d] = info->dims[d] >= 0 ? info->dims[d] : d == 0 ? batch : 1;
    }
    return sig;
}

/* Bytes of the graph's outputs at this signature: not in the arena, but
 * the run allocates them. Outputs of unknown shape count 0. */
static size_t output_bytes(const slim_model *m, const slim_tensor *sig)
{
    size_t n = 0;
    slim_tensor *shapes = calloc((size_t)m->graph->n_values, sizeof(*shapes));
    slim_err err;
    if (shapes && !slim_model_infer_shapes(m, sig, shapes, &err)) {
        for (int o = 0; o < m->graph->n_outputs; o++) {
            const slim_tensor *t = &shapes[m->graph->outputs[o]];
            if (t->ndim >= 0 && t->dtype != SLIM_DTYPE_UNDEFINED)
                n += slim_tensor_nbytes(t);
        }
    }
    free(shapes);
    return n;
}

size_t slim_model_run_bytes(const slim_model *m, int64_t batch, size_t *outputs)
{
    if (outputs)
        *outputs = 0;
    slim_tensor *sig = signature(m, batch);
    if (!sig)
        return 0;
    slim_plan *plan = NULL;
    slim_err err;
    size_t bytes = 0;
    if (!slim_plan_build(m, sig, &plan, &err)) {
        size_t out = output_bytes(m, sig);
        bytes = plan->arena_bytes + out;
        if (outputs)
            *outputs = out;
        slim_plan_free(plan);
    }
    free(sig);
    return bytes;
}

/* What one run at batch takes beyond its arena and outputs: the kernels'
 * scratch (int8 activations, converted panels, im2col...), which no plan
 * knows. Measured: the model's account's peak over a run on zeros, less
 * what it held before, the arena and the outputs; the account's peak is
 * set back after. -1 when the run fails (a model whose shapes depend on
 * its data may refuse zeros). */
static int64_t run_scratch(const slim_model *m, int64_t batch, size_t run_bytes)
{
    slim_tensor *sig = signature(m, batch);
    int n = m->graph->n_inputs;
    const char **names = calloc((size_t)(n ? n : 1), sizeof(*names));
    int made = 0;
    slim_err err;
    for (; sig && names && made < n; made++) {
        names[made] = m->inputs[made].name;
        if (slim_tensor_alloc(&sig[made], &err))
            break;
        if (sig[made].data)
            memset(sig[made].data, 0, slim_tensor_nbytes(&sig[made]));
    }
    int64_t scratch = -1;
    if (sig && names && made == n) {
        slim_mem_account *acct = m->account;
        size_t before = atomic_load(&acct->current);
        size_t old_peak = atomic_exchange(&acct->peak, before);
        slim_tensor *outs = NULL;
        int n_out = 0;
        if (!slim_model_run(m, n, names, sig, &outs, &n_out, &err)) {
            size_t peak = atomic_load(&acct->peak);
            size_t base = before + run_bytes;
            scratch = peak > base ? (int64_t)(peak - base) : 0;
            slim_tensors_free(outs, n_out);
        }
        size_t now = atomic_load(&acct->peak);
        atomic_store(&acct->peak, now > old_peak ? now : old_peak);
    }
    for (int i = 0; sig && i < made; i++)
        slim_tensor_release(&sig[i]);
    free(sig);
    free(names);
    return scratch;
}

/* Kernels split their work over the kernel threads, each with scratch of
 * its own, so how much of it is live at once depends on timing (resnet
 * bf16 at batch 32: 1.6 to 2.3 MiB over three runs). The most of a few
 * runs is nearer what a budget must allow for. */

static int64_t clock_ns(clockid_t id);

/* Also the least CPU time (the process's) one of the runs took, if asked:
 * the first run in a process pays for what it sets up once (the kernel
 * threads, packed panels), which says nothing of a row's cost. */
static int64_t most_scratch(const slim_model *m, int64_t batch, size_t run_bytes,
                            int64_t *least_cpu)
{
    int64_t most = -1;
    for (int i = 0; i < SLIM_FOOTPRINT_RUNS; i++) {
        int64_t c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
        int64_t s = run_scratch(m, batch, run_bytes);
        int64_t c = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (s < 0)
            return -1;
        if (least_cpu && (i == 0 || c < *least_cpu))
            *least_cpu = c;
        most = s > most ? s : most;
    }
    return most;
}

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The second batch to measure: the largest up to max_batch whose run fits
 * the cap and whose runs, at batch 1's pace per row, fit the CPU time
 * left. The nearer max_batch, the less timing noise is multiplied on the
 * way there (mlp fp32 from batch 2 to 32: a few KiB became 16% of the
 * total). The pace is CPU time, not wall time: a loaded machine slowed
 * the wall clock enough to choose batch 2 or 4 instead of 32, and resnet
 * bf16's prediction moved 16% with it (the server's index against
 * `slim inspect --fit`, both on one machine at load 14). */
static int64_t second_batch(const slim_model *m, int64_t max_batch, size_t cap, int64_t per_run,
                            int64_t left, size_t *run_b)
{
    for (int64_t b = max_batch; b > 2; b /= 2) {
        size_t rb = slim_model_run_bytes(m, b, NULL);
        if (rb && rb <= cap && per_run * b * SLIM_FOOTPRINT_RUNS < left) {
            *run_b = rb;
            return b;
        }
    }
    *run_b = slim_model_run_bytes(m, 2, NULL);
    return 2;
}

/* The bounds of the measuring runs, watched by a thread of their own:
 * past limit_ns of the process's CPU time and of wall time both (a model
 * slow on purpose, or on zeros, stops as soon on a busy machine as on a
 * quiet one, and no sooner than the wall clock stopped it before when
 * other work in the process, a server's traffic, takes CPU time too), the
 * wall-clock deadline of the token (the last resort), and the caller's own
 * token (a load's deadline, a server's shutdown), whose reason is passed
 * on. */
typedef struct {
    slim_cancel tok;
    slim_cancel *outer;
    int64_t cpu0, wall0;
    _Atomic int64_t limit_ns;
    atomic_bool stop;
} runs_watch;

#define WATCH_TICK_NS 2000000

static void *watch_main(void *arg)
{
    runs_watch *w = arg;
    struct timespec tick = {0, WATCH_TICK_NS};
    while (!atomic_load(&w->stop)) {
        slim_cancel_reason why = w->outer ? slim_cancel_reason_of(w->outer) : SLIM_CANCEL_NONE;
        if (why != SLIM_CANCEL_NONE)
            slim_cancel_request(&w->tok, why);
        else {
            int64_t limit = atomic_load(&w->limit_ns);
            if (clock_ns(CLOCK_PROCESS_CPUTIME_ID) - w->cpu0 > limit &&
                clock_ns(CLOCK_MONOTONIC) - w->wall0 > limit)
                slim_cancel_request(&w->tok, SLIM_CANCEL_DEADLINE);
        }
        if (slim_cancel_reason_of(&w->tok) != SLIM_CANCEL_NONE)
            break;
        nanosleep(&tick, NULL);
    }
    return NULL;
}

/* Starts watching (the token is entered by the caller); false when no
 * thread could be made: the wall-clock deadline alone bounds the runs. */
static bool watch_start(runs_watch *w, pthread_t *th)
{
    w->outer = slim_cancel_current();
    int64_t dl = slim_cancel_deadline_after_ms(SLIM_FOOTPRINT_WALL_MS);
    if (w->outer && w->outer->deadline_ns && w->outer->deadline_ns < dl)
        dl = w->outer->deadline_ns;
    slim_cancel_init(&w->tok, dl);
    w->cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    w->wall0 = clock_ns(CLOCK_MONOTONIC);
    atomic_init(&w->limit_ns, (int64_t)SLIM_FOOTPRINT_RUN_MS * 1000000);
    atomic_init(&w->stop, false);
    return pthread_create(th, NULL, watch_main, w) == 0;
}

static void watch_stop(runs_watch *w, pthread_t th, bool started)
{
    atomic_store(&w->stop, true);
    if (started)
        pthread_join(th, NULL);
}

/* Scratch grows with the rows a kernel sees, so with the batch: measured
 * at 1 and at a second batch (max_batch when it fits), extended in a
 * straight line. The runs are bounded in time (a model may be slow on
 * purpose, or on zeros): past the bound they are cancelled and the
 * workspace stays unmeasured. */
static void measure_workspace(const slim_model *m, slim_footprint *out)
{
    size_t run1 = out->arena_bytes_1;
    /* Measuring must not cost more than the model itself: a run of a few
     * GiB (a Range to 1e9) is a request's to refuse, not a load's to make. */
    size_t cap = out->weight_bytes > SLIM_FOOTPRINT_RUN_MIN_CAP ? out->weight_bytes
                                                               : SLIM_FOOTPRINT_RUN_MIN_CAP;
    if (out->unplanned || m->nested || run1 > cap)
        return;
    /* Scratch past the cap fails the run (unmeasured) rather than grow. */
    slim_mem_account *acct = m->account;
    size_t old_limit = atomic_load(&acct->limit);
    if (!old_limit)
        atomic_store(&acct->limit, atomic_load(&acct->current) + 2 * cap);
    /* The process's CPU time, which other processes do not slow: the
     * kernel threads' work and the caller's, counted on every core. The
     * runs at batch 1 may take SLIM_FOOTPRINT_RUN_MS of it, as the wall
     * clock allowed before; all of them twice that, for rows dearer at the
     * second batch than its estimate from batch 1. */
    runs_watch w;
    pthread_t th;
    bool watched = watch_start(&w, &th);
    slim_cancel *prev = slim_cancel_enter(&w.tok);
    int64_t t0 = clock_ns(CLOCK_MONOTONIC);
    int64_t per_run = 0;
    int64_t s1 = most_scratch(m, 1, run1, &per_run), sb = s1, b = 1;
    int64_t cpu1 = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - w.cpu0;
    if (s1 >= 0 && out->max_batch > 1) {
        atomic_store(&w.limit_ns, (int64_t)SLIM_FOOTPRINT_RUN_MS * 2000000);
        size_t run_b = 0;
        b = second_batch(m, out->max_batch, cap, per_run,
                         (int64_t)SLIM_FOOTPRINT_RUN_MS * 1000000 - cpu1, &run_b);
        sb = run_b && run_b <= cap ? most_scratch(m, b, run_b, NULL) : -1;
    }
    slim_cancel_enter(prev);
    watch_stop(&w, th, watched);
    atomic_store(&acct->limit, old_limit);
    /* SLIM_FOOTPRINT_DEBUG=1: what was chosen and what it cost (the A/B of
     * a quiet against a loaded machine, tests/e2e/test_footprint.py). */
    const char *dbg = getenv("SLIM_FOOTPRINT_DEBUG");
    if (dbg && strcmp(dbg, "1") == 0)
        fprintf(stderr,
                "footprint: scratch %lld at batch 1, %lld at batch %lld; batch 1 CPU %.1f ms "
                "(a run %.1f ms), all runs %.1f ms wall\n",
                (long long)s1, (long long)sb, (long long)b, (double)cpu1 / 1e6,
                (double)per_run / 1e6,
                (double)(clock_ns(CLOCK_MONOTONIC) - t0) / 1e6);
    if (s1 < 0 || sb < 0)
        return;
    double ws = (double)s1;
    if (b > 1)
        ws += (double)(sb - s1) * (double)(out->max_batch - 1) / (double)(b - 1);
    out->workspace_bytes = ws > 0 ? (size_t)ws : 0;
    out->workspace_measured = true;
}

void slim_model_measure_workspace(const slim_model *m, slim_footprint *out)
{
    measure_workspace(m, out);
    /* The runs' arenas and scratch went back to the allocator's cache:
     * give them back too, the model holds none of it. */
    slim_memory_give_back();
    out->total_bytes = out->weight_bytes + out->arena_bytes_max + out->workspace_bytes;
}

void slim_model_footprint(const slim_model *m, int64_t max_batch, slim_footprint *out)
{
    memset(out, 0, sizeof(*out));
    if (max_batch < 1)
        max_batch = 1;
    out->max_batch = max_batch;
    weight_split(m->graph, &out->weight_bytes, &out->mapped_bytes);
    out->arena_bytes_1 = slim_model_run_bytes(m, 1, NULL);
    out->arena_bytes_max = slim_model_run_bytes(m, max_batch, &out->output_bytes_max);
    out->unplanned = out->arena_bytes_1 == 0 && m->graph->n_nodes > 0;
    out->total_bytes = out->weight_bytes + out->arena_bytes_max + out->workspace_bytes;
}

/* A weightless initializer's stand-in: zero pages, mapped, never
 * written unless a pass writes in place (then copied on write). Reading
 * them takes no memory (the kernel's zero page), so the passes and the
 * measuring runs see every weight at its size without the file's bytes
 * being read or held. */
static void zeros_release(slim_buffer *b)
{
    munmap(b->ptr, b->size);
    free(b);
}

static slim_status zero_weights(slim_graph *g, slim_err *err)
{
    for (int v = 0; v < g->n_values; v++) {
        slim_tensor *t = &g->values[v].init;
        size_t n = slim_tensor_nbytes(t);
        if (g->values[v].kind != SLIM_VALUE_INITIALIZER || t->data || !n)
            continue;
        slim_buffer *b = calloc(1, sizeof(*b));
        void *p = b ? mmap(NULL, n, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                    : MAP_FAILED;
        if (p == MAP_FAILED) {
            free(b);
            return slim_errf(err, SLIM_ENOMEM, "out of address space for %zu bytes of weights", n);
        }
        b->dev = slim_device_cpu();
        b->ptr = p;
        b->size = n;
        b->release = zeros_release;
        atomic_init(&b->refs, 1);
        t->buf = b;
        t->data = p;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attrs; a++)
            if (g->nodes[i].attrs[a].type == SLIM_ATTR_GRAPH && g->nodes[i].attrs[a].g) {
                slim_status st = zero_weights(g->nodes[i].attrs[a].g, err);
                if (st)
                    return st;
            }
    return SLIM_OK;
}

/* Whether the passes this load runs size the weights from their shapes
 * alone, so a prediction may read the file without its weights (the
 * weightless read, onnx_wire.h) and run them on zeros: float32 and half
 * precision, no pruning. int8 sets aside outlier channels found from the
 * weights' values (and with max_error keeps layers by their measured
 * error), pruning keeps what the values leave: those read the file as a
 * load does. SLIM_PREDICT_DRY=1 makes every prediction read it (A/B). */
static bool weightless(const char *path, const slim_load_ctx *c)
{
    const char *dry = getenv("SLIM_PREDICT_DRY");
    if ((dry && strcmp(dry, "1") == 0) || c->int8 || c->opts->compress.prune)
        return false;
    return !slim_model_file_is_slim(path);
}

/* Our own operators (com.slimserve: a file a pruning or int8 pass wrote,
 * its SparseConv encodings checked from their values at load) are read
 * with their weights. */
static bool has_own_ops(const slim_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].domain && strcmp(g->nodes[i].domain, "com.slimserve") == 0)
            return true;
        for (int a = 0; a < g->nodes[i].n_attrs; a++)
            if (g->nodes[i].attrs[a].type == SLIM_ATTR_GRAPH && g->nodes[i].attrs[a].g &&
                has_own_ops(g->nodes[i].attrs[a].g))
                return true;
    }
    return false;
}

static slim_status read_for_prediction(const char *path, const slim_load_ctx *c, bool *zeros,
                                       slim_graph **g, slim_err *err)
{
    *zeros = weightless(path, c);
    if (!*zeros)
        return slim_pipeline_read(path, g, err);
    slim_status st = slim_onnx_load_file_shapes(path, WEIGHTLESS_KEEP_BYTES, g, err);
    if (!st && has_own_ops(*g)) {
        slim_graph_free(*g);
        *zeros = false;
        return slim_pipeline_read(path, g, err);
    }
    if (!st && (st = zero_weights(*g, err))) {
        slim_graph_free(*g);
        *g = NULL;
    }
    return st;
}

slim_status slim_model_predict(const char *path, const slim_load_opts *opts, int64_t max_batch,
                               slim_footprint *out, slim_err *err)
{
    memset(out, 0, sizeof(*out));
    slim_init();
    /* The stages up to plan, without placing: the figures are the graph's
     * after compression and optimization, whatever device runs it. */
    static const slim_load_opts defaults;
    slim_load_ctx c = {.path = path};
    slim_status st = slim_pipeline_settings(opts ? opts : &defaults, &c, err);
    if (st)
        return st;
    if (!path || !path[0])
        return slim_errf(err, SLIM_EINVAL, "no model path given");
    slim_mem_account *acct = slim_mem_account_new("prediction", 0);
    if (!acct)
        return slim_errf(err, SLIM_ENOMEM, "out of memory predicting %s", path);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    slim_graph *g = NULL;
    slim_model *m = NULL;
    /* int8 with max_error keeps layers by their measured error: the same
     * samples as a load, or the prediction would quantize other layers. */
    st = slim_pipeline_samples(&c, err);
    bool zeros = false;
    if (!st)
        st = read_for_prediction(path, &c, &zeros, &g, err);
    if (!st)
        st = slim_pipeline_compress(g, &c, err);
    if (!st)
        st = slim_pipeline_optimize(g, &c, err);
    if (!st)
        st = slim_pipeline_plan(g, &c, acct, &m, err);
    if (!st) {
        /* A batching server runs its models batch-invariant (kernels
         * whose scratch may differ). */
        slim_model_set_batch_invariant(m, max_batch > 1);
        m->fp32_strict = c.fp32_strict;
        slim_model_footprint(m, max_batch, out);
        /* The stand-ins look mapped; a load allocates an ONNX file's. */
        if (zeros)
            out->mapped_bytes = 0;
        slim_model_measure_workspace(m, out);
    }
    slim_model_free(m); /* gives back what the prediction held */
    slim_int8_samples_free(&c.samples);
    slim_mem_account_enter(prev);
    slim_mem_account_unref(acct);
    return st;
}
