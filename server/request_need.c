/*
 * request_need.c - what an infer request needs, known before it runs: the
 * JSON tree its header parses into (and its reservation in the allocator
 * while it lives), its declared inputs, a one-row run of it and its
 * outputs, and the size of its answer. admission.c decides with these.
 */
#include "admission.h"
#include "admission_impl.h"
#include "codec.h"
#include "config.h"
#include "device.h"
#include "http.h"
#include "model.h"
#include "plan.h"
#include "repository.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static slim_allocator *cpu_alloc(void)
{
    return slim_device_cpu()->alloc;
}

/* ---- the JSON tree's reservation ----------------------------------------- */

/* cJSON mallocs its nodes one by one, outside the allocator. While a
 * request's JSON is parsed and its tree alive, the bytes it can take at
 * most (slim_server_json_parse_bound) are reserved in the allocator, so the
 * limit holds them back from runs and other requests. The reserved block's
 * pages are handed back to the kernel (MADV_DONTNEED; nothing is in them
 * that anyone reads), so resident memory counts the tree once, where
 * cJSON put it, and not again in the allocator. */
slim_status slim__request_reserve_parse(slim_server_request *req, slim_err *err)
{
    if (!slim_allocator_limit(cpu_alloc()) || req->parse_block)
        return SLIM_OK;
    size_t json_len = req->infer_header_len >= 0 && (size_t)req->infer_header_len <= req->body_len
                          ? (size_t)req->infer_header_len : req->body_len;
    size_t bound = slim_server_json_parse_bound(req->body ? req->body : "", json_len);
    void *p = slim_allocator_alloc(cpu_alloc(), bound, &req->parse_block, err);
    if (!p)
        return err->status;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)p + bound) & ~(uintptr_t)(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
    return SLIM_OK;
}

void slim__request_release_parse(slim_server_request *req)
{
    if (req->parse_block)
        slim_allocator_free(cpu_alloc(), req->parse_block);
    req->parse_block = NULL;
}

/* Output bytes of `rows` rows when config.json fixes every dim; 0 when it
 * does not (the run decides). */
static size_t fixed_output_bytes(const slim_server_model *m, int64_t rows)
{
    double total = 0;
    for (int i = 0; i < m->cfg.n_outputs; i++) {
        const slim_server_io *io = &m->cfg.outputs[i];
        if (io->ndim < 0 || io->dtype == SLIM_DTYPE_UNDEFINED)
            return 0;
        double n = (double)rows;
        for (int d = 0; d < io->ndim; d++) {
            if (io->dims[d] < 0)
                return 0;
            n *= (double)io->dims[d];
        }
        total += n * (double)slim_dtype_size(io->dtype);
    }
    return total > 1e18 ? (size_t)1 << 60 : (size_t)total;
}

/* The activation arena of a run of one row of this request (the plan is
 * cached per input signature, so this is a lookup after the first). 0 when
 * no plan can be made from the shapes given: decoding will say why. */
static size_t one_row_arena(const slim_server_model *m, const slim_tensor *shapes)
{
    const slim_plan *plan;
    bool owned = false;
    slim_err err = {0};
    if (slim_model_plan(m->model, shapes, &plan, &owned, &err) != SLIM_OK)
        return 0;
    size_t bytes = plan->arena_bytes;
    if (owned)
        slim_plan_free((slim_plan *)plan);
    return bytes;
}

/* The declared inputs, added one at a time: their bytes, and the shapes
 * of one row of them where they name the model's inputs. */
typedef struct need_acc {
    const slim_server_model *m;
    slim_tensor *shapes;        /* per model input (NULL: none) */
    int found;
    double total;
} need_acc;

/* One declared input: dims as given (a non-positive one counts as 0). */
static void need_add(need_acc *acc, const char *name, slim_dtype t, const double *dims,
                     int ndim, double string_bytes)
{
    const slim_server_model *m = acc->m;
    int n_in = m->cfg.n_inputs;
    double n = 1;
    int idx = -1;
    for (int i = 0; i < n_in && name; i++)
        if (strcmp(m->cfg.inputs[i].name, name) == 0)
            idx = i;
    slim_tensor *s = idx >= 0 && acc->shapes && acc->shapes[idx].ndim == 0 ? &acc->shapes[idx]
                                                                           : NULL;
    if (s)
        s->dtype = t;
    for (int d = 0; d < ndim; d++) {
        double v = dims[d] > 0 ? dims[d] : 0;
        n *= v;
        if (s)
            s->dims[s->ndim++] = (int64_t)(v < 1e12 ? v : 1e12);
    }
    if (s)
        acc->found++;
    /* a BYTES input: 16 bytes an element (slim_str) and its strings */
    acc->total += n * (double)slim_dtype_size(t) + (t == SLIM_STRING ? string_bytes : 0);
}

/* The inputs' bytes, and with every model input given, each with a shape,
 * one row's arena and outputs beside them (need.run). */
static void need_finish(need_acc *acc, slim__request_need *need)
{
    const slim_server_model *m = acc->m;
    int n_in = m->cfg.n_inputs;
    slim_tensor *shapes = acc->shapes;
    int64_t rows = 1;
    need->inputs = acc->total > 1e18 ? (size_t)1 << 60 : (size_t)acc->total;
    need->run = need->inputs;
    if (shapes && acc->found == n_in) {
        bool batching = m->cfg.max_batch_size > 0;
        bool ok = true;
        for (int i = 0; i < n_in && ok; i++) {
            ok = shapes[i].ndim > 0 || !batching;
            if (batching && ok) {
                rows = shapes[i].dims[0];
                shapes[i].dims[0] = 1;
            }
        }
        if (ok) {
            need->run += one_row_arena(m, shapes);
            need->run += fixed_output_bytes(m, rows > 0 ? rows : 1);
        }
    }
    free(shapes);
    acc->shapes = NULL;
}

/* Reads the request's declared inputs from its JSON header (under the
 * parse reservation): their bytes, and what one row of it needs to run. */
slim__request_need slim__request_declared_need(const slim_server_request *req)
{
    slim__request_need need = {0};
    const slim_server_model *m = req->task.model;
    size_t len = req->infer_header_len >= 0 && (size_t)req->infer_header_len <= req->body_len
                     ? (size_t)req->infer_header_len : req->body_len;
    slim_err err = {0};
    cJSON *root = req->body ? slim_server_json_parse(req->body, len, &err) : NULL;
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    int n_in = m->cfg.n_inputs;
    need_acc acc = {.m = m, .shapes = n_in ? calloc((size_t)n_in, sizeof(slim_tensor)) : NULL};
    for (const cJSON *in = cJSON_IsArray(ins) ? ins->child : NULL; in; in = in->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(in, "name");
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in, "datatype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(in, "shape");
        slim_dtype t = cJSON_IsString(dt) ? slim_server_dtype_from_kserve(dt->valuestring)
                                          : SLIM_DTYPE_UNDEFINED;
        if (t == SLIM_DTYPE_UNDEFINED || !cJSON_IsArray(shape) ||
            cJSON_GetArraySize(shape) > SLIM_MAX_DIMS)
            continue;
        double dims[SLIM_MAX_DIMS];
        int ndim = 0;
        for (const cJSON *d = shape->child; d; d = d->next)
            dims[ndim++] = cJSON_IsNumber(d) ? d->valuedouble : 0;
        /* BYTES in binary: the elements' bytes; in JSON they are in the
         * tree's reservation already, and the strings' copies at most the
         * body again (counted with the input's declared size below). */
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(in, "parameters");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(params, "binary_data_size");
        double strings = t != SLIM_STRING ? 0 : cJSON_IsNumber(size) ? size->valuedouble
                                                                     : (double)len;
        need_add(&acc, cJSON_IsString(name) ? name->valuestring : NULL, t, dims, ndim,
                 strings > 0 ? strings : 0);
    }
    need.known = root != NULL;
    /* Read now so that a wait for memory keeps the request's deadline;
     * decoding validates it (a bad one is refused then). */
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "parameters");
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(params, "timeout");
    if (cJSON_IsNumber(to) && to->valuedouble >= 1 && to->valuedouble < 9.0e15)
        need.timeout_us = (int64_t)to->valuedouble;
    cJSON_Delete(root);
    need_finish(&acc, &need);
    return need;
}

/* The same from another transport's declared inputs (admission_ticket.c's
 * requests: a gRPC message's inputs, before any is decoded). */
void slim_server_admission_ticket_need(slim_server_admission_ticket *t,
                                       const slim_server_declared_input *ins, size_t n)
{
    const slim_server_model *m = t->model;
    int n_in = m->cfg.n_inputs;
    need_acc acc = {.m = m, .shapes = n_in ? calloc((size_t)n_in, sizeof(slim_tensor)) : NULL};
    for (size_t i = 0; i < n; i++) {
        slim_dtype dt = ins[i].datatype ? slim_server_dtype_from_kserve(ins[i].datatype)
                                        : SLIM_DTYPE_UNDEFINED;
        if (dt == SLIM_DTYPE_UNDEFINED || ins[i].ndim > SLIM_MAX_DIMS)
            continue;
        double dims[SLIM_MAX_DIMS];
        for (size_t d = 0; d < ins[i].ndim; d++)
            dims[d] = (double)ins[i].shape[d];
        need_add(&acc, ins[i].name, dt, dims, (int)ins[i].ndim, (double)ins[i].string_bytes);
    }
    slim__request_need need = {0};
    need_finish(&acc, &need);
    t->inputs = need.inputs;
    t->run = need.run;
    t->known = true;
}

/* The answer's size, at most, from the outputs' shapes before the run:
 * from config.json when it fixes them, else by shape inference on the
 * decoded inputs. 0 when an output's shape depends on data (the encoder
 * checks that one once it has the outputs). */
size_t slim__request_reply_bound(const slim_server_request *req)
{
    const slim_server_model *m = req->task.model;
    const slim_server_infer *rq = &req->infer;
    const slim_graph *g = m->model->graph;
    int batch = m->cfg.max_batch_size > 0;
    slim_tensor *outs = calloc((size_t)(m->cfg.n_outputs ? m->cfg.n_outputs : 1), sizeof(*outs));
    slim_tensor *ins = calloc((size_t)(m->cfg.n_inputs ? m->cfg.n_inputs : 1), sizeof(*ins));
    slim_tensor *shapes = NULL;
    size_t bound = 0;
    bool fixed = outs && ins;
    for (int i = 0; fixed && i < m->cfg.n_outputs; i++) {
        const slim_server_io *io = &m->cfg.outputs[i];
        fixed = io->ndim >= 0 && io->dtype != SLIM_DTYPE_UNDEFINED;
        outs[i] = (slim_tensor){.dtype = io->dtype, .ndim = batch + (io->ndim > 0 ? io->ndim : 0)};
        if (batch)
            outs[i].dims[0] = rq->batch;
        for (int d = 0; fixed && d < io->ndim; d++)
            fixed = (outs[i].dims[d + batch] = io->dims[d]) >= 0;
    }
    if (!fixed && outs && ins && m->cfg.n_outputs == g->n_outputs &&
        m->cfg.n_inputs == g->n_inputs &&
        (shapes = calloc((size_t)g->n_values, sizeof(*shapes)))) {
        for (int i = 0; i < m->cfg.n_inputs; i++)
            for (int j = 0; j < rq->n_inputs; j++)
                if (rq->names[j] == m->cfg.inputs[i].name)
                    ins[i] = rq->inputs[j];
        slim_err err = {0};
        fixed = slim_model_infer_shapes(m->model, ins, shapes, &err) == SLIM_OK;
        for (int i = 0; fixed && i < g->n_outputs; i++) {
            outs[i] = shapes[g->outputs[i]];
            outs[i].data = NULL;
            fixed = outs[i].ndim >= 0;
        }
    }
    if (fixed)
        bound = slim_server_infer_reply_bound(rq, m, outs, m->cfg.n_outputs);
    free(shapes);
    free(ins);
    free(outs);
    return bound;
}
