/*
 * infer_codec.c - inference requests and responses, JSON and binary.
 *
 * Request (KServe v2, with Triton's binary tensor data extension):
 *
 *     {"id": "7", "parameters": {"binary_data_output": true},
 *      "inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 784],
 *                  "data": [[...], [...]]                 (nested or flat)
 *                  or "parameters": {"binary_data_size": 6272}}],
 *      "outputs": [{"name": "probs", "parameters": {"binary_data": true}}]}
 *
 * With binary inputs the body is that JSON (Inference-Header-Content-Length
 * bytes) followed by the raw little-endian tensors in input order. Binary
 * outputs come back the same way. Everything is checked here, on the HTTP
 * thread, against the model's resolved config, so a worker only ever sees
 * tensors the model accepts, and every mistake gets a message naming it.
 */
#include "buf.h"
#include "codec.h"
#include "config.h"
#include "device.h"
#include "repository.h"
#include "shm.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void shape_json(const slim_server_io *io, int batch, char *buf, size_t cap)
{
    int64_t dims[SLIM_MAX_DIMS + 1];
    int n = 0;
    if (batch)
        dims[n++] = -1;
    for (int i = 0; i < io->ndim; i++)
        dims[n++] = io->dims[i];
    slim_shape_str(n, dims, buf, cap);
}

/* ---- JSON data -> typed buffer ----------------------------------------- */

static int64_t count_leaves(const cJSON *v)
{
    if (!cJSON_IsArray(v))
        return 1;
    int64_t n = 0;
    for (const cJSON *c = v->child; c; c = c->next)
        n += count_leaves(c);
    return n;
}

/* Nested "data" must have the tensor's shape: a list of dims[0] lists of
 * dims[1] ... (Triton's row-major nesting), or be flat from some depth on:
 * a list of numbers at depth d holds dims[d] * ... * dims[ndim-1] of them.
 * Counting leaves alone would take [[783 values], [1 value]] for [1, 784].
 * On false, *depth and *got name the first list that does not fit (*got -1:
 * numbers and lists mixed in one list), *want what the shape needs there. */
static bool nested_fits(const cJSON *v, const int64_t *dims, int ndim, int d, int *depth,
                        int64_t *got, int64_t *want)
{
    bool lists = cJSON_IsArray(v->child);
    int64_t n = 0, rest = 1;
    for (int i = d; i < ndim; i++)
        rest *= dims[i];
    for (const cJSON *c = v->child; c; c = c->next, n++) {
        if (cJSON_IsArray(c) != lists) {
            *depth = d;
            *got = -1;
            *want = 0;
            return false;
        }
        if (lists && !nested_fits(c, dims, ndim, d + 1, depth, got, want))
            return false;
    }
    int64_t expect = !lists ? rest : d < ndim ? dims[d] : 0; /* lists past the rank: none fit */
    if (n != expect) {
        *depth = d;
        *got = n;
        *want = expect;
        return false;
    }
    return true;
}

static bool int_range(slim_dtype t, double *lo, double *hi)
{
    switch (t) {
    case SLIM_I8: *lo = -128; *hi = 127; return true;
    case SLIM_U8: *lo = 0; *hi = 255; return true;
    case SLIM_I16: *lo = -32768; *hi = 32767; return true;
    case SLIM_U16: *lo = 0; *hi = 65535; return true;
    case SLIM_I32: *lo = -2147483648.0; *hi = 2147483647.0; return true;
    case SLIM_U32: *lo = 0; *hi = 4294967295.0; return true;
    case SLIM_I64: *lo = -9223372036854775808.0; *hi = 9223372036854775807.0; return true;
    case SLIM_U64: *lo = 0; *hi = 18446744073709551615.0; return true;
    default: return false;
    }
}

static slim_status store_leaf(const cJSON *v, slim_tensor *t, int64_t i, const char *name,
                              slim_err *err)
{
    double lo, hi;
    if (t->dtype == SLIM_BOOL) {
        if (cJSON_IsBool(v) || (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1))) {
            ((uint8_t *)t->data)[i] = cJSON_IsBool(v) ? cJSON_IsTrue(v) : v->valuedouble != 0;
            return SLIM_OK;
        }
        return slim_errf(err, SLIM_EINVAL, "input '%s': element %lld is not a boolean", name,
                         (long long)i);
    }
    if (!cJSON_IsNumber(v))
        return slim_errf(err, SLIM_EINVAL, "input '%s': element %lld is not a number", name,
                         (long long)i);
    double x = v->valuedouble;
    const char *type = slim_server_dtype_kserve(t->dtype);
    if (int_range(t->dtype, &lo, &hi)) {
        /* hi of the 64-bit types rounds up to 2^63 / 2^64: exclude it */
        if (x != floor(x) || x < lo || x > hi || (hi >= 9.2e18 && x >= hi) ||
            (v->type & SLIM_SERVER_JSON_NOT_INTEGRAL))
            return slim_errf(err, SLIM_EINVAL, "input '%s': element %lld (%.17g) is not a valid %s%s",
                             name, (long long)i, x, type,
                             v->type & SLIM_SERVER_JSON_NOT_INTEGRAL ? " (written with a fraction or exponent)" : "");
        if (t->dtype == SLIM_U64)
            ((uint64_t *)t->data)[i] = (uint64_t)x;
        else
            slim_store_i64(t->dtype, t->data, i, (int64_t)x);
        return SLIM_OK;
    }
    /* A number beyond a float type's range would run as inf. 2^128 - 2^103
     * is where rounding to FP32 (also the first step to FP16 and BF16)
     * reaches inf; FP16 and BF16 are checked on the value they store. */
    bool ok = isfinite(x) && (t->dtype == SLIM_F64 || fabs(x) < 3.4028235677973366e38);
    if (ok)
        slim_store_f64(t->dtype, t->data, i, x);
    if (!ok || !isfinite(slim_load_f64(t->dtype, t->data, i)))
        return slim_errf(err, SLIM_EINVAL, "input '%s': element %lld (%.9g) is out of the range "
                         "of %s", name, (long long)i, x, type);
    return SLIM_OK;
}

static slim_status fill(const cJSON *v, slim_tensor *t, int64_t *i, const char *name,
                        slim_err *err)
{
    if (!cJSON_IsArray(v)) {
        slim_status s = store_leaf(v, t, *i, name, err);
        (*i)++;
        return s;
    }
    for (const cJSON *c = v->child; c; c = c->next) {
        slim_status s = fill(c, t, i, name, err);
        if (s != SLIM_OK)
            return s;
    }
    return SLIM_OK;
}

/* ---- one input ---------------------------------------------------------- */

typedef struct binary_cursor {
    const char *data;
    size_t len, pos;
    bool in_place;  /* aligned tensors may point into data (decode_in_place) */
} binary_cursor;

/* The allocator's alignment (runtime/tensor.c), which kernels may assume
 * of an input: binary bytes aligned like this are read in place. */
#define IN_PLACE_ALIGN 64

int slim_server_infer_find_io(const slim_server_io *ios, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ios[i].name, name) == 0)
            return i;
    return -1;
}

slim_status slim_server_infer_input_type(const slim_server_model *m, const slim_server_infer *rq,
                                         const char *name, const char *datatype,
                                         const slim_server_io **io_out, slim_dtype *dt_out,
                                         slim_err *err)
{
    int idx = slim_server_infer_find_io(m->cfg.inputs, m->cfg.n_inputs, name);
    if (idx < 0)
        return slim_errf(err, SLIM_EINVAL, "unexpected inference input '%s' for model '%s'", name,
                         m->name);
    const slim_server_io *io = &m->cfg.inputs[idx];
    for (int i = 0; i < rq->n_inputs; i++)
        if (strcmp(rq->names[i], io->name) == 0)
            return slim_errf(err, SLIM_EINVAL, "input '%s' is given more than once", name);
    if (!datatype)
        return slim_errf(err, SLIM_EINVAL, "input '%s': \"datatype\" string is required", name);
    slim_dtype dt = slim_server_dtype_from_kserve(datatype);
    if (dt == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "input '%s': unknown datatype \"%s\"", name, datatype);
    if (io->dtype != SLIM_DTYPE_UNDEFINED && dt != io->dtype)
        return slim_errf(err, SLIM_ETYPE,
                         "inference input '%s' data-type is '%s', but model '%s' expects '%s'", name,
                         datatype, m->name, slim_server_dtype_kserve(io->dtype));
    *io_out = io;
    *dt_out = dt;
    return SLIM_OK;
}

/* Checks the request's shape against the resolved config. */
slim_status slim_server_infer_check_shape(const slim_server_model *m, const slim_server_io *io,
                                          const slim_tensor *t, slim_err *err)
{
    int batch = m->cfg.max_batch_size > 0;
    bool ok = io->ndim < 0 || t->ndim == io->ndim + batch;
    for (int d = 0; ok && io->ndim >= 0 && d < io->ndim; d++)
        ok = io->dims[d] < 0 || io->dims[d] == t->dims[d + batch];
    bool rows_ok = !batch || (t->ndim >= 1 && t->dims[0] >= 1 &&
                              t->dims[0] <= m->cfg.max_batch_size);
    if (ok && rows_ok)
        return SLIM_OK; /* the shapes are written out only for a message */
    char want[256], got[256];
    shape_json(io, batch, want, sizeof(want));
    slim_shape_str(t->ndim, t->dims, got, sizeof(got));
    if (!ok)
        return slim_errf(err, SLIM_ESHAPE,
                         "unexpected shape for input '%s' for model '%s'. Expected %s, got %s",
                         io->name, m->name, want, got);
    /* A batch of 0 rows: the protocol does not forbid it, but the model has
     * nothing to run and the batcher nothing to merge; Triton refuses it too. */
    if (t->ndim >= 1 && t->dims[0] == 0)
        return slim_errf(err, SLIM_ESHAPE,
                         "input '%s' for '%s' has batch size 0 (shape %s); a request needs at "
                         "least 1 row", io->name, m->name, got);
    return slim_errf(err, SLIM_ESHAPE,
                     "inference request batch-size must be <= %d for '%s' (input '%s' has shape %s)",
                     m->cfg.max_batch_size, m->name, io->name, got);
}

static slim_status decode_input(const cJSON *in, const slim_server_model *m, binary_cursor *bin,
                                slim_server_infer *rq, slim_err *err)
{
    const cJSON *jname = cJSON_GetObjectItemCaseSensitive(in, "name");
    const cJSON *jshape = cJSON_GetObjectItemCaseSensitive(in, "shape");
    const cJSON *jtype = cJSON_GetObjectItemCaseSensitive(in, "datatype");
    const cJSON *jparams = cJSON_GetObjectItemCaseSensitive(in, "parameters");
    const cJSON *jdata = cJSON_GetObjectItemCaseSensitive(in, "data");
    if (!cJSON_IsObject(in) || !cJSON_IsString(jname))
        return slim_errf(err, SLIM_EINVAL, "each entry of \"inputs\" needs a \"name\" string");
    const char *name = jname->valuestring;
    const slim_server_io *io;
    slim_dtype dt;
    slim_status st = slim_server_infer_input_type(m, rq, name,
                                                  cJSON_IsString(jtype) ? jtype->valuestring : NULL,
                                                  &io, &dt, err);
    if (st)
        return st;

    slim_tensor *t = &rq->inputs[rq->n_inputs];
    memset(t, 0, sizeof(*t));
    t->dtype = dt;
    if (!cJSON_IsArray(jshape) || cJSON_GetArraySize(jshape) > SLIM_MAX_DIMS)
        return slim_errf(err, SLIM_EINVAL, "input '%s': \"shape\" must be a list of at most %d integers",
                         name, SLIM_MAX_DIMS);
    double numel = 1;
    for (const cJSON *d = jshape->child; d; d = d->next) {
        if (!slim_server_json_integer(d, 0, 1e12, &t->dims[t->ndim]))
            return slim_errf(err, SLIM_EINVAL, "input '%s': \"shape\" must hold non-negative integers",
                             name);
        numel *= (double)t->dims[t->ndim++];
    }
    slim_status s = slim_server_infer_check_shape(m, io, t, err);
    if (s != SLIM_OK)
        return s;

    char shape[128];
    slim_shape_str(t->ndim, t->dims, shape, sizeof(shape));
    size_t need = numel <= 1e15 ? (size_t)numel * slim_dtype_size(dt) : SIZE_MAX;
    const cJSON *jsize = cJSON_IsObject(jparams)
                             ? cJSON_GetObjectItemCaseSensitive(jparams, "binary_data_size") : NULL;
    int64_t size;
    bool in_shm;
    if ((s = slim_server_shm_input_json(rq, jparams, jsize || jdata, t, name, &in_shm, err)))
        return s;
    if (!in_shm && jsize) { /* (from shared memory: read in place or copied, shm.c) */
        if (!slim_server_json_integer(jsize, 0, 1e18, &size))
            return slim_errf(err, SLIM_EINVAL, "input '%s': binary_data_size must be a byte count "
                             "(a whole number)", name);
        if (!bin->data)
            return slim_errf(err, SLIM_EINVAL,
                             "input '%s' has binary_data_size but the request has no "
                             "Inference-Header-Content-Length header", name);
        if (jdata)
            return slim_errf(err, SLIM_EINVAL, "input '%s' has both \"data\" and binary_data_size", name);
        if (dt == SLIM_STRING) /* the elements' lengths say how much they need */
            need = (uint64_t)size;
        if (numel > 1e15 || (uint64_t)size != need)
            return slim_errf(err, SLIM_EINVAL,
                             "input '%s': binary_data_size is %lld bytes but shape %s of %s needs %zu",
                             name, (long long)size, shape, jtype->valuestring, need);
        if (need > bin->len - bin->pos)
            return slim_errf(err, SLIM_EINVAL,
                             "input '%s': binary_data_size %zu runs past the end of the body "
                             "(%zu bytes of binary data left)", name, need, bin->len - bin->pos);
        const char *src = bin->data + bin->pos;
        if (dt == SLIM_STRING)
            s = slim_server_bytes_from_wire(src, need, t, name, "binary data", err);
        else if (bin->in_place && need && (uintptr_t)src % IN_PLACE_ALIGN == 0)
            t->data = (void *)src; /* borrowed (buf NULL): the body outlives rq */
        else if ((s = slim_tensor_alloc(t, err)) == SLIM_OK && need)
            memcpy(t->data, src, need);
        if (s != SLIM_OK)
            return s;
        bin->pos += need;
    } else if (!in_shm) {
        if (!jdata)
            return slim_errf(err, SLIM_EINVAL, "input '%s': \"data\" is required (or binary_data_size)",
                             name);
        int64_t got = count_leaves(jdata);
        if (!cJSON_IsArray(jdata) || (double)got != numel)
            return slim_errf(err, SLIM_EINVAL,
                             "input '%s': \"data\" has %lld elements but shape %s needs %.0f", name,
                             (long long)(cJSON_IsArray(jdata) ? got : 0), shape, numel);
        int depth = -1;
        int64_t n_got = 0, n_want = 0;
        if (!nested_fits(jdata, t->dims, t->ndim, 0, &depth, &n_got, &n_want)) {
            if (n_got < 0)
                return slim_errf(err, SLIM_EINVAL, "input '%s': nested \"data\" mixes numbers "
                                 "and lists in one list at depth %d; shape %s needs lists of "
                                 "equal length, or numbers only", name, depth, shape);
            return slim_errf(err, SLIM_EINVAL, "input '%s': nested \"data\" has a list of %lld "
                             "at depth %d where shape %s needs %lld", name, (long long)n_got,
                             depth, shape, (long long)n_want);
        }
        if (dt == SLIM_STRING) {
            if ((s = slim_server_bytes_from_json(jdata, t, name, err)) != SLIM_OK)
                return s;
        } else {
            if ((s = slim_tensor_alloc(t, err)) != SLIM_OK)
                return s;
            int64_t i = 0;
            if ((s = fill(jdata, t, &i, name, err)) != SLIM_OK) {
                slim_tensor_release(t);
                return s;
            }
        }
    }
    rq->names[rq->n_inputs++] = io->name;
    return SLIM_OK;
}

/* ---- requested outputs -------------------------------------------------- */

static bool param_bool(const cJSON *params, const char *key, bool dflt)
{
    const cJSON *v = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, key) : NULL;
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static slim_status decode_outputs(const cJSON *jouts, const slim_server_model *m, bool bin_default,
                                  slim_server_infer *rq, slim_err *err)
{
    int n = jouts ? cJSON_GetArraySize(jouts) : 0;
    if (jouts && !cJSON_IsArray(jouts))
        return slim_errf(err, SLIM_EINVAL, "\"outputs\" must be a list");
    if (n == 0)
        n = m->cfg.n_outputs;
    if (!(rq->outputs = calloc((size_t)(n ? n : 1), sizeof(*rq->outputs))))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (!jouts || !jouts->child) {
        for (int i = 0; i < n; i++)
            rq->outputs[i] = (slim_server_out_req){.index = i, .binary = bin_default};
        rq->n_outputs = n;
        return SLIM_OK;
    }
    for (const cJSON *o = jouts->child; o; o = o->next) {
        const cJSON *jname = cJSON_GetObjectItemCaseSensitive(o, "name");
        const cJSON *jparams = cJSON_GetObjectItemCaseSensitive(o, "parameters");
        if (!cJSON_IsString(jname))
            return slim_errf(err, SLIM_EINVAL, "each entry of \"outputs\" needs a \"name\" string");
        int idx = slim_server_infer_find_io(m->cfg.outputs, m->cfg.n_outputs, jname->valuestring);
        if (idx < 0)
            return slim_errf(err, SLIM_EINVAL, "unexpected inference output '%s' for model '%s'",
                             jname->valuestring, m->name);
        const cJSON *jcls = cJSON_IsObject(jparams)
                                ? cJSON_GetObjectItemCaseSensitive(jparams, "classification") : NULL;
        int64_t k = 0;
        if (jcls && !slim_server_json_integer(jcls, 1, 1e15, &k))
            return slim_errf(err, SLIM_EINVAL, "output '%s': \"classification\" must be a whole "
                             "number of classes, 1 or more", jname->valuestring);
        slim_status s = k ? slim_server_classify_check(m, idx, k, err) : SLIM_OK;
        if (s != SLIM_OK)
            return s;
        for (int i = 0; i < rq->n_outputs; i++)
            if (rq->outputs[i].index == idx)
                return slim_errf(err, SLIM_EINVAL, "output '%s' is requested more than once",
                                 jname->valuestring);
        slim_server_shm_span *span = NULL;
        if ((s = slim_server_shm_output_param(rq, m, jparams, idx, &span, err)) != SLIM_OK)
            return s;
        if (span && k) /* its class strings' size is known only after the run */
            return slim_errf(err, SLIM_EINVAL, "output '%s': \"classification\" cannot be "
                             "written to shared memory; ask for it in the reply",
                             jname->valuestring);
        rq->outputs[rq->n_outputs++] = (slim_server_out_req){
            .index = idx, .binary = param_bool(jparams, "binary_data", bin_default), .shm = span,
            .class_count = k};
    }
    return SLIM_OK;
}

static slim_status decode(const char *body, size_t len, long long header_len, bool in_place,
                          const slim_server_model *m, slim_server_infer *rq, slim_err *err);

slim_status slim_server_infer_decode(const char *body, size_t len, long long header_len,
                                     const slim_server_model *m, slim_server_infer *rq,
                                     slim_err *err)
{
    return decode(body, len, header_len, false, m, rq, err);
}

slim_status slim_server_infer_decode_in_place(const char *body, size_t len, long long header_len,
                                              const slim_server_model *m, slim_server_infer *rq,
                                              slim_err *err)
{
    return decode(body, len, header_len, true, m, rq, err);
}

static slim_status decode(const char *body, size_t len, long long header_len, bool in_place,
                          const slim_server_model *m, slim_server_infer *rq, slim_err *err)
{
    memset(rq, 0, sizeof(*rq));
    rq->batch = 1;
    if (header_len > (long long)len)
        return slim_errf(err, SLIM_EINVAL,
                         "Inference-Header-Content-Length is %lld but the body has only %zu bytes",
                         header_len, len);
    size_t json_len = header_len >= 0 ? (size_t)header_len : len;
    binary_cursor bin = {header_len >= 0 ? body + json_len : NULL, len - json_len, 0, in_place};
    cJSON *root = slim_server_json_parse(body, json_len, err);
    slim_status s = SLIM_OK;
    if (!root)
        return err ? err->status : SLIM_EPARSE;
    const cJSON *jid = cJSON_GetObjectItemCaseSensitive(root, "id");
    const cJSON *jparams = cJSON_GetObjectItemCaseSensitive(root, "parameters");
    const cJSON *jins = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (!cJSON_IsObject(root)) {
        s = slim_errf(err, SLIM_EINVAL, "the request body must be a JSON object");
        goto err;
    }
    if (jid && !cJSON_IsString(jid)) {
        s = slim_errf(err, SLIM_EINVAL, "\"id\" must be a string");
        goto err;
    }
    if (jid && !(rq->id = strdup(jid->valuestring))) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory");
        goto err;
    }
    if (jparams && !cJSON_IsObject(jparams)) {
        s = slim_errf(err, SLIM_EINVAL, "\"parameters\" must be an object");
        goto err;
    }
    /* Triton's request timeout, in microseconds (0: none); 2^53 keeps it exact. */
    const cJSON *jtimeout = cJSON_GetObjectItemCaseSensitive(jparams, "timeout");
    if (jtimeout && !slim_server_json_integer(jtimeout, 0, 9007199254740992.0, &rq->timeout_us)) {
        s = slim_errf(err, SLIM_EINVAL, "parameter \"timeout\" must be a whole number of "
                      "microseconds, 0 or more (0: no timeout)");
        goto err;
    }
    if (!cJSON_IsArray(jins)) {
        s = slim_errf(err, SLIM_EINVAL, "\"inputs\" (a list) is required");
        goto err;
    }
    int n = cJSON_GetArraySize(jins);
    if (n > m->cfg.n_inputs) {
        s = slim_errf(err, SLIM_EINVAL, "expected %d inputs but got %d inputs for model '%s'",
                      m->cfg.n_inputs, n, m->name);
        goto err;
    }
    rq->names = calloc((size_t)(n ? n : 1), sizeof(*rq->names));
    rq->inputs = calloc((size_t)(n ? n : 1), sizeof(*rq->inputs));
    if (!rq->names || !rq->inputs) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory");
        goto err;
    }
    for (const cJSON *in = jins->child; in; in = in->next)
        if ((s = decode_input(in, m, &bin, rq, err)) != SLIM_OK)
            goto err;
    for (int i = 0; i < m->cfg.n_inputs; i++) {
        bool given = false;
        for (int j = 0; j < rq->n_inputs && !given; j++)
            given = rq->names[j] == m->cfg.inputs[i].name;
        if (!given) {
            s = slim_errf(err, SLIM_EINVAL, "missing input '%s' for model '%s'",
                          m->cfg.inputs[i].name, m->name);
            goto err;
        }
    }
    if (bin.data && bin.pos != bin.len) {
        s = slim_errf(err, SLIM_EINVAL,
                      "the body has %zu bytes of binary data after the JSON header but the "
                      "inputs' binary_data_size add up to %zu", bin.len, bin.pos);
        goto err;
    }
    if (m->cfg.max_batch_size > 0 && rq->n_inputs > 0) {
        rq->batch = rq->inputs[0].dims[0];
        for (int i = 1; i < rq->n_inputs; i++)
            if (rq->inputs[i].dims[0] != rq->batch) {
                s = slim_errf(err, SLIM_ESHAPE, "input '%s' has batch size %lld but input '%s' has %lld",
                              rq->names[i], (long long)rq->inputs[i].dims[0], rq->names[0],
                              (long long)rq->batch);
                goto err;
            }
    }
    s = decode_outputs(cJSON_GetObjectItemCaseSensitive(root, "outputs"), m,
                       param_bool(jparams, "binary_data_output", false), rq, err);
    if (s != SLIM_OK)
        goto err;
    cJSON_Delete(root);
    return SLIM_OK;
err:
    cJSON_Delete(root);
    slim_server_infer_free(rq);
    return s;
}

void slim_server_infer_free(slim_server_infer *rq)
{
    for (int i = 0; i < rq->n_inputs; i++)
        slim_tensor_release(&rq->inputs[i]);
    slim_server_shm_spans_free(rq->shm); /* after the inputs that may point into them */
    free(rq->inputs);
    free(rq->names);
    free(rq->outputs);
    free(rq->id);
    memset(rq, 0, sizeof(*rq));
}

/* ---- response ----------------------------------------------------------- */

static void put_float(slim_server_buf *b, double v, int digits)
{
    if (isnan(v))
        slim_server_buf_puts(b, "NaN");
    else if (isinf(v))
        slim_server_buf_puts(b, v > 0 ? "Infinity" : "-Infinity");
    else
        slim_server_buf_printf(b, "%.*g", digits, v);
}

static void put_data(slim_server_buf *b, const slim_tensor *t)
{
    if (t->dtype == SLIM_STRING) {
        slim_server_bytes_put_json(b, t);
        return;
    }
    int64_t n = slim_tensor_numel(t);
    slim_server_buf_puts(b, "\"data\":[");
    for (int64_t i = 0; i < n && !b->oom; i++) {
        if (i)
            slim_server_buf_puts(b, ",");
        switch (t->dtype) {
        case SLIM_BOOL:
            slim_server_buf_puts(b, ((const uint8_t *)t->data)[i] ? "true" : "false");
            break;
        case SLIM_F32: put_float(b, ((const float *)t->data)[i], 9); break;
        case SLIM_F64: put_float(b, ((const double *)t->data)[i], 17); break;
        case SLIM_F16:
        case SLIM_BF16: put_float(b, slim_load_f64(t->dtype, t->data, i), 9); break;
        case SLIM_U64:
            slim_server_buf_printf(b, "%llu", (unsigned long long)((const uint64_t *)t->data)[i]);
            break;
        default:
            slim_server_buf_printf(b, "%lld", (long long)slim_load_i64(t->dtype, t->data, i));
            break;
        }
    }
    slim_server_buf_puts(b, "]");
}

/* The longest text put_data writes for one element, with its comma:
 * "-1.17549435e-38" (%.9g), "-2.2250738585072014e-308" (%.17g), an
 * integer's digits and sign, "false". */
static size_t json_element_bytes(slim_dtype t)
{
    switch (t) {
    case SLIM_BOOL: return 6;
    case SLIM_F64: return 25;
    case SLIM_F32: case SLIM_F16: case SLIM_BF16: return 16;
    case SLIM_I8: return 5;
    case SLIM_U8: return 4;
    case SLIM_I16: return 7;
    case SLIM_U16: return 6;
    case SLIM_I32: return 12;
    case SLIM_U32: return 11;
    default: return 21; /* 64-bit integers */
    }
}

bool slim_server_infer_any_json(const slim_server_infer *rq)
{
    for (int i = 0; i < rq->n_outputs; i++)
        if (!rq->outputs[i].binary)
            return true;
    return false;
}

/* The JSON around the outputs' data: names, datatype, shape, parameters. */
#define REPLY_HEADER_BYTES 256
#define REPLY_OUTPUT_BYTES (128 + SLIM_MAX_DIMS * 21)

size_t slim_server_infer_reply_bound(const slim_server_infer *rq, const slim_server_model *m,
                                     const slim_tensor *outs, int n_outs)
{
    double total = REPLY_HEADER_BYTES + strlen(m->name) * 6 + (rq->id ? strlen(rq->id) * 6 : 0);
    for (int i = 0; i < rq->n_outputs; i++) {
        const slim_server_out_req *o = &rq->outputs[i];
        if (o->index >= n_outs)
            continue;
        const slim_tensor *t = &outs[o->index];
        slim_tensor cls;
        if (o->class_count > 0 && t->dtype != SLIM_STRING) {
            slim_server_classify_shape(m, o, t, &cls);
            t = &cls;
        }
        double numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= (double)(t->dims[d] > 0 ? t->dims[d] : 0);
        total += REPLY_OUTPUT_BYTES + strlen(m->cfg.outputs[o->index].name) * 6;
        if (o->shm) { /* written into the region: no data in the reply */
            total += 128 + strlen(o->shm->name) * 6;
        } else if (t == &cls) { /* class strings: the longest each can be */
            double elem = (double)slim_server_classify_elem_bytes(m, o->index);
            total += numel * (o->binary ? elem : elem * 6 + 3);
        } else if (t->dtype == SLIM_STRING) { /* their bytes: known once they exist */
            if (numel > 0 && !t->data)
                return 0;
            total += (double)(o->binary ? slim_server_bytes_wire_size(t)
                                        : slim_server_bytes_json_bound(t));
        } else {
            total += numel * (double)(o->binary ? slim_dtype_size(t->dtype)
                                                : json_element_bytes(t->dtype));
        }
    }
    return total > 1e18 ? (size_t)1 << 60 : (size_t)total;
}

/* The answer from outs as they are sent (classified ones as their class
 * strings); wires[i] gets the wire form of requested output i when it is
 * a binary BYTES one (the caller frees them). */
static slim_status encode_view(const slim_server_infer *rq, const slim_server_model *m,
                               const slim_tensor *outs, int n_outs, void **wires,
                               slim_server_reply *reply, slim_err *err)
{
    /* Before anything is built: a JSON answer of a billion elements would
     * take tens of GB to write, and fail only at the end. */
    size_t bound = slim_server_infer_reply_bound(rq, m, outs, n_outs);
    if (rq->max_reply_bytes && bound > rq->max_reply_bytes)
        return slim_errf(err, SLIM_EOOM, "model '%s': the answer would take up to %zu bytes, "
                         "over the limit of %zu bytes (--max-response-bytes); ask for fewer "
                         "elements%s", m->name, bound, rq->max_reply_bytes,
                         slim_server_infer_any_json(rq) ? ", or for binary outputs" : "");
    slim_status ws = slim_server_shm_outputs_write(rq, m, outs, err); /* before the reply */
    if (ws != SLIM_OK)
        return ws;
    slim_server_buf b = {0};
    slim_server_reply_part *parts = calloc((size_t)(rq->n_outputs ? rq->n_outputs : 1),
                                           sizeof(*parts));
    int n_parts = 0;
    if (!parts)
        return slim_errf(err, SLIM_ENOMEM, "out of memory while writing the response");
    slim_server_buf_puts(&b, "{\"model_name\":");
    slim_server_buf_json_string(&b, m->name);
    slim_server_buf_printf(&b, ",\"model_version\":\"%lld\"", (long long)m->version);
    if (rq->id) {
        slim_server_buf_puts(&b, ",\"id\":");
        slim_server_buf_json_string(&b, rq->id);
    }
    slim_server_buf_puts(&b, ",\"outputs\":[");
    bool any_binary = false;
    for (int i = 0; i < rq->n_outputs; i++) {
        const slim_server_out_req *o = &rq->outputs[i];
        const slim_tensor *t = &outs[o->index];
        const char *type = slim_server_dtype_kserve(t->dtype);
        slim_server_buf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
        slim_server_buf_json_string(&b, m->cfg.outputs[o->index].name);
        slim_server_buf_printf(&b, ",\"datatype\":\"%s\",\"shape\":[", type ? type : "BYTES");
        for (int d = 0; d < t->ndim; d++)
            slim_server_buf_printf(&b, d ? ",%lld" : "%lld", (long long)t->dims[d]);
        slim_server_buf_puts(&b, "],");
        any_binary |= o->binary && !o->shm;
        if (o->shm) {
            slim_server_shm_output_json(&b, o->shm, t); /* written into the region, named here */
        } else if (o->binary) {
            bool str = t->dtype == SLIM_STRING;
            size_t n = str ? slim_server_bytes_wire_size(t) : slim_tensor_nbytes(t);
            slim_server_buf_printf(&b, "\"parameters\":{\"binary_data_size\":%zu}}", n);
            if (n && str) { /* written out here; copied after the header below */
                if (!(wires[i] = malloc(n))) {
                    b.oom = true;
                } else {
                    slim_server_bytes_to_wire(t, wires[i]);
                    parts[n_parts++] = (slim_server_reply_part){wires[i], n, NULL};
                }
            } else if (n) { /* sent from the output's own buffer, which the part keeps */
                parts[n_parts++] = (slim_server_reply_part){t->data, n, t->buf};
                if (t->buf)
                    slim_buffer_ref(t->buf);
            }
        } else {
            put_data(&b, t);
            slim_server_buf_puts(&b, "}");
        }
    }
    slim_server_buf_puts(&b, "]}");
    size_t header_len = b.len;
    /* Borrowed data (no buffer to hold) is copied after the header. */
    for (int i = 0; i < n_parts && !b.oom; i++)
        if (!parts[i].buf) {
            for (int j = i; j < n_parts; j++)
                slim_server_buf_append(&b, parts[j].data, parts[j].len);
            slim_server_reply_parts_free(parts + i, n_parts - i);
            n_parts = i;
        }
    if (b.oom) {
        slim_server_buf_free(&b);
        slim_server_reply_parts_free(parts, n_parts);
        free(parts);
        return slim_errf(err, SLIM_ENOMEM, "out of memory while writing the response");
    }
    slim_server_reply_free(reply);
    reply->status = 200;
    reply->body = b.data;
    reply->len = b.len;
    reply->parts = parts;
    reply->n_parts = n_parts;
    reply->content_type = any_binary ? "application/octet-stream" : "application/json";
    reply->infer_header_len = any_binary ? (long long)header_len : -1;
    return SLIM_OK;
}

slim_status slim_server_infer_encode(const slim_server_infer *rq, const slim_server_model *m,
                                     const slim_tensor *outs, int n_outs,
                                     slim_server_reply *reply, slim_err *err)
{
    for (int i = 0; i < rq->n_outputs; i++)
        if (rq->outputs[i].index >= n_outs)
            return slim_errf(err, SLIM_EINTERNAL, "the model returned %d outputs, expected %d",
                             n_outs, m->cfg.n_outputs);
    slim_tensor *view = calloc((size_t)(n_outs ? n_outs : 1), sizeof(*view));
    void **wires = calloc((size_t)(rq->n_outputs ? rq->n_outputs : 1), sizeof(*wires));
    slim_status s = view && wires ? SLIM_OK
                                  : slim_errf(err, SLIM_ENOMEM, "out of memory while writing the "
                                              "response");
    if (s == SLIM_OK && (s = slim_server_classify_outputs(rq, m, outs, n_outs, view, err)) == SLIM_OK) {
        s = encode_view(rq, m, view, n_outs, wires, reply, err);
        slim_server_classify_outputs_free(rq, outs, view, n_outs);
    }
    for (int i = 0; wires && i < rq->n_outputs; i++)
        free(wires[i]);
    free(wires);
    free(view);
    return s;
}
