/*
 * grpc_codec.c - ModelInferRequest (protobuf) -> slim_server_infer, and a
 * request's outputs -> ModelInferResponse: the gRPC twin of infer_codec.c.
 * What crosses to the batcher is the same typed request the HTTP codec
 * makes, checked by the same rules with the same words (the shape check is
 * infer_codec.c's own), so a model sees no difference between protocols.
 *
 * Input data comes either as raw_input_contents (one bytes field per input,
 * in input order: what tritonclient sends) or as the typed lists of
 * InferTensorContents; a request mixing the two is refused, as Triton does.
 * Outputs always go back as raw_output_contents.
 */
#include "codec.h"
#include "config.h"
#include "grpc.h"
#include "inference.pb-c.h"
#include "repository.h"
#include "shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef Inference__ModelInferRequest infer_req;
typedef Inference__ModelInferRequest__InferInputTensor infer_in;
typedef Inference__InferTensorContents contents;

/* The typed list that holds dtype t's elements, and its length. */
static size_t contents_count(const contents *c, slim_dtype t)
{
    switch (t) {
    case SLIM_BOOL: return c->n_bool_contents;
    case SLIM_I8: case SLIM_I16: case SLIM_I32: return c->n_int_contents;
    case SLIM_I64: return c->n_int64_contents;
    case SLIM_U8: case SLIM_U16: case SLIM_U32: return c->n_uint_contents;
    case SLIM_U64: return c->n_uint64_contents;
    case SLIM_F32: return c->n_fp32_contents;
    case SLIM_F64: return c->n_fp64_contents;
    case SLIM_STRING: return c->n_bytes_contents;
    default: return (size_t)-1; /* fp16/bf16: raw bytes only */
    }
}

/* Element i of the typed list into t's buffer. Narrowing (an int32 list
 * for an INT8 input) keeps the low bits, as a C cast does; Triton does not
 * check the range either. */
static void contents_store(const contents *c, slim_tensor *t, size_t i)
{
    void *d = t->data;
    switch (t->dtype) {
    case SLIM_BOOL: ((uint8_t *)d)[i] = c->bool_contents[i] ? 1 : 0; break;
    case SLIM_I8: ((int8_t *)d)[i] = (int8_t)c->int_contents[i]; break;
    case SLIM_I16: ((int16_t *)d)[i] = (int16_t)c->int_contents[i]; break;
    case SLIM_I32: ((int32_t *)d)[i] = c->int_contents[i]; break;
    case SLIM_I64: ((int64_t *)d)[i] = c->int64_contents[i]; break;
    case SLIM_U8: ((uint8_t *)d)[i] = (uint8_t)c->uint_contents[i]; break;
    case SLIM_U16: ((uint16_t *)d)[i] = (uint16_t)c->uint_contents[i]; break;
    case SLIM_U32: ((uint32_t *)d)[i] = c->uint_contents[i]; break;
    case SLIM_U64: ((uint64_t *)d)[i] = c->uint64_contents[i]; break;
    case SLIM_F32: ((float *)d)[i] = c->fp32_contents[i]; break;
    case SLIM_F64: ((double *)d)[i] = c->fp64_contents[i]; break;
    default: break;
    }
}

/* A parameter of a map, or NULL. */
static const Inference__InferParameter *param(Inference__ModelInferRequest__ParametersEntry **ps,
                                              size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (ps[i]->key && strcmp(ps[i]->key, key) == 0)
            return ps[i]->value;
    return NULL;
}

/* The shared-memory parameters of an input's or output's map (the maps
 * of inputs, outputs and the request share one layout). */
static slim_status shm_params(Inference__ModelInferRequest__ParametersEntry **ps, size_t n,
                              const char *what, const char *name, slim_server_shm_params *p,
                              slim_err *err)
{
    static const char *keys[2] = {"shared_memory_offset", "shared_memory_byte_size"};
    int64_t *vals[2] = {&p->offset, &p->byte_size};
    bool *has[2] = {&p->has_offset, &p->has_size};
    memset(p, 0, sizeof(*p));
    const Inference__InferParameter *r = param(ps, n, "shared_memory_region");
    if (r && r->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
        return slim_errf(err, SLIM_EINVAL, "%s '%s': \"shared_memory_region\" must be a "
                         "string_param", what, name);
    p->region = r ? r->string_param : NULL;
    for (int i = 0; i < 2; i++) {
        const Inference__InferParameter *v = param(ps, n, keys[i]);
        if (!v)
            continue;
        bool is_int = v->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
        bool is_uint = v->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
        *vals[i] = is_int ? v->int64_param : is_uint && v->uint64_param <= (uint64_t)INT64_MAX
                                                 ? (int64_t)v->uint64_param : -1;
        if (*vals[i] < 0)
            return slim_errf(err, SLIM_EINVAL, "%s '%s': \"%s\" must be a whole number of "
                             "bytes, 0 or more", what, name, keys[i]);
        *has[i] = true;
    }
    return SLIM_OK;
}

/* A BYTES input's bytes_contents (one bytes field an element). */
static slim_status bytes_contents(const contents *c, slim_tensor *t, const char *name,
                                  slim_err *err)
{
    size_t n = c->n_bytes_contents;
    const void **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    size_t *lens = calloc(n ? n : 1, sizeof(*lens));
    slim_status s = SLIM_OK;
    if (!ptrs || !lens) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            ptrs[i] = c->bytes_contents[i].data;
            lens[i] = c->bytes_contents[i].len;
        }
        s = slim_server_bytes_from_list(ptrs, lens, n, t, name, err);
    }
    free(ptrs);
    free(lens);
    return s;
}

static slim_status decode_input(const infer_req *msg, size_t k, size_t *raw_k,
                                const slim_server_model *m, slim_server_infer *rq, slim_err *err)
{
    const infer_in *in = msg->inputs[k];
    const char *name = in->name;
    const slim_server_io *io;
    slim_dtype dt;
    slim_status st = slim_server_infer_input_type(m, rq, name, in->datatype, &io, &dt, err);
    if (st)
        return st;
    slim_tensor *t = &rq->inputs[rq->n_inputs];
    memset(t, 0, sizeof(*t));
    t->dtype = dt;
    if (in->n_shape > SLIM_MAX_DIMS)
        return slim_errf(err, SLIM_EINVAL, "input '%s': \"shape\" must be a list of at most %d integers",
                         name, SLIM_MAX_DIMS);
    double numel = 1;
    for (size_t d = 0; d < in->n_shape; d++) {
        if (in->shape[d] < 0 || in->shape[d] > (int64_t)1e12)
            return slim_errf(err, SLIM_EINVAL, "input '%s': \"shape\" must hold non-negative integers",
                             name);
        t->dims[t->ndim++] = in->shape[d];
        numel *= (double)in->shape[d];
    }
    slim_status s = slim_server_infer_check_shape(m, io, t, err);
    if (s != SLIM_OK)
        return s;
    char shape[128]; /* written only for a message that names it: most requests need none */
    size_t need = numel <= 1e15 ? (size_t)numel * slim_dtype_size(dt) : SIZE_MAX;
    slim_server_shm_params shm;
    bool in_shm;
    if ((s = shm_params((Inference__ModelInferRequest__ParametersEntry **)in->parameters,
                        in->n_parameters, "input", name, &shm, err)) != SLIM_OK ||
        (s = slim_server_shm_input_take(rq, &shm, in->contents != NULL, t, name, &in_shm,
                                        err)) != SLIM_OK)
        return s;
    if (in_shm) {
        /* read in place from the region, or copied from it (shm.c) */
    } else if (msg->n_raw_input_contents) {
        if (*raw_k >= msg->n_raw_input_contents)
            return slim_errf(err, SLIM_EINVAL, "input '%s': the request has only %zu "
                             "raw_input_contents", name, msg->n_raw_input_contents);
        const ProtobufCBinaryData *raw = &msg->raw_input_contents[(*raw_k)++];
        if (in->contents)
            return slim_errf(err, SLIM_EINVAL, "input '%s' has both contents and "
                             "raw_input_contents", name);
        if (dt == SLIM_STRING) { /* length-prefixed elements: they say what they need */
            if ((s = slim_server_bytes_from_wire(raw->data, raw->len, t, name,
                                                 "raw_input_contents", err)) != SLIM_OK)
                return s;
            rq->names[rq->n_inputs++] = io->name;
            return SLIM_OK;
        }
        if (numel > 1e15 || raw->len != need) {
            slim_shape_str(t->ndim, t->dims, shape, sizeof(shape));
            return slim_errf(err, SLIM_EINVAL,
                             "input '%s': raw_input_contents has %zu bytes but shape %s of %s "
                             "needs %zu", name, raw->len, shape, in->datatype, need);
        }
        if ((s = slim_tensor_alloc(t, err)) != SLIM_OK)
            return s;
        if (need)
            memcpy(t->data, raw->data, need);
    } else {
        if (!in->contents)
            return slim_errf(err, SLIM_EINVAL, "input '%s': contents or raw_input_contents is "
                             "required", name);
        size_t got = contents_count(in->contents, dt);
        if (got == (size_t)-1)
            return slim_errf(err, SLIM_EINVAL, "input '%s': %s data must come as "
                             "raw_input_contents", name, in->datatype);
        if ((double)got != numel) {
            slim_shape_str(t->ndim, t->dims, shape, sizeof(shape));
            return slim_errf(err, SLIM_EINVAL, "input '%s': contents has %zu elements but shape "
                             "%s needs %.0f", name, got, shape, numel);
        }
        if (dt == SLIM_STRING) {
            s = bytes_contents(in->contents, t, name, err);
            if (s != SLIM_OK)
                return s;
            rq->names[rq->n_inputs++] = io->name;
            return SLIM_OK;
        }
        if ((s = slim_tensor_alloc(t, err)) != SLIM_OK)
            return s;
        for (size_t i = 0; i < got; i++)
            contents_store(in->contents, t, i);
    }
    rq->names[rq->n_inputs++] = io->name;
    return SLIM_OK;
}

static slim_status decode_outputs(const infer_req *msg, const slim_server_model *m,
                                  slim_server_infer *rq, slim_err *err)
{
    size_t n = msg->n_outputs ? msg->n_outputs : (size_t)m->cfg.n_outputs;
    if (!(rq->outputs = calloc(n ? n : 1, sizeof(*rq->outputs))))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (!msg->n_outputs) {
        for (size_t i = 0; i < n; i++)
            rq->outputs[i] = (slim_server_out_req){.index = (int)i, .binary = true};
        rq->n_outputs = (int)n;
        return SLIM_OK;
    }
    for (size_t k = 0; k < msg->n_outputs; k++) {
        const Inference__ModelInferRequest__InferRequestedOutputTensor *o = msg->outputs[k];
        int idx = slim_server_infer_find_io(m->cfg.outputs, m->cfg.n_outputs, o->name);
        if (idx < 0)
            return slim_errf(err, SLIM_EINVAL, "unexpected inference output '%s' for model '%s'",
                             o->name, m->name);
        /* Same layout as the request's own map entries. tritonclient's
         * class_count sends an int64; any other kind is refused. */
        const Inference__InferParameter *cp = param(
            (Inference__ModelInferRequest__ParametersEntry **)o->parameters, o->n_parameters,
            "classification");
        int64_t k = 0;
        if (cp) {
            bool is_int = cp->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
            bool is_uint = cp->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
            k = is_int ? cp->int64_param : is_uint && cp->uint64_param <= (uint64_t)INT64_MAX
                                               ? (int64_t)cp->uint64_param : 0;
            slim_status s = slim_server_classify_check(m, idx, k, err);
            if (s != SLIM_OK)
                return s;
        }
        for (int i = 0; i < rq->n_outputs; i++)
            if (rq->outputs[i].index == idx)
                return slim_errf(err, SLIM_EINVAL, "output '%s' is requested more than once",
                                 o->name);
        slim_server_shm_params shm;
        slim_server_shm_span *span = NULL;
        slim_status s = shm_params((Inference__ModelInferRequest__ParametersEntry **)o->parameters,
                                   o->n_parameters, "output", o->name, &shm, err);
        if (s != SLIM_OK || (s = slim_server_shm_output_take(rq, m, idx, &shm, &span, err)))
            return s;
        if (span && k) /* its class strings' size is known only after the run */
            return slim_errf(err, SLIM_EINVAL, "output '%s': \"classification\" cannot be "
                             "written to shared memory; ask for it in the reply", o->name);
        rq->outputs[rq->n_outputs++] = (slim_server_out_req){.index = idx, .binary = true,
                                                             .shm = span, .class_count = k};
    }
    return SLIM_OK;
}

static slim_status decode_msg(const infer_req *msg, const slim_server_model *m,
                              slim_server_infer *rq, slim_err *err)
{
    if (msg->id && msg->id[0] && !(rq->id = strdup(msg->id)))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    /* Triton's request timeout, in microseconds (0: none). */
    const Inference__InferParameter *tp = param(msg->parameters, msg->n_parameters, "timeout");
    if (tp) {
        bool is_int = tp->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
        bool is_uint = tp->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
        int64_t v = is_int ? tp->int64_param : is_uint && tp->uint64_param <= (uint64_t)INT64_MAX
                                                   ? (int64_t)tp->uint64_param : -1;
        if (v < 0)
            return slim_errf(err, SLIM_EINVAL, "parameter \"timeout\" must be a whole number of "
                             "microseconds, 0 or more (0: no timeout)");
        rq->timeout_us = v;
    }
    if (msg->n_inputs > (size_t)m->cfg.n_inputs)
        return slim_errf(err, SLIM_EINVAL, "expected %d inputs but got %zu inputs for model '%s'",
                         m->cfg.n_inputs, msg->n_inputs, m->name);
    size_t n = msg->n_inputs ? msg->n_inputs : 1, raw_k = 0;
    rq->names = calloc(n, sizeof(*rq->names));
    rq->inputs = calloc(n, sizeof(*rq->inputs));
    if (!rq->names || !rq->inputs)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status s;
    for (size_t k = 0; k < msg->n_inputs; k++)
        if ((s = decode_input(msg, k, &raw_k, m, rq, err)) != SLIM_OK)
            return s;
    /* One raw_input_contents per input not in shared memory, in order. */
    if (raw_k != msg->n_raw_input_contents)
        return slim_errf(err, SLIM_EINVAL, "the request has %zu raw_input_contents for %zu "
                         "inputs that are not in shared memory; give every such input's bytes, "
                         "or none", msg->n_raw_input_contents, raw_k);
    for (int i = 0; i < m->cfg.n_inputs; i++) {
        bool given = false;
        for (int j = 0; j < rq->n_inputs && !given; j++)
            given = rq->names[j] == m->cfg.inputs[i].name;
        if (!given)
            return slim_errf(err, SLIM_EINVAL, "missing input '%s' for model '%s'",
                             m->cfg.inputs[i].name, m->name);
    }
    if (m->cfg.max_batch_size > 0 && rq->n_inputs > 0) {
        rq->batch = rq->inputs[0].dims[0];
        for (int i = 1; i < rq->n_inputs; i++)
            if (rq->inputs[i].dims[0] != rq->batch)
                return slim_errf(err, SLIM_ESHAPE, "input '%s' has batch size %lld but input '%s' "
                                 "has %lld", rq->names[i], (long long)rq->inputs[i].dims[0],
                                 rq->names[0], (long long)rq->batch);
    }
    return decode_outputs(msg, m, rq, err);
}

slim_status slim_server_grpc_infer_decode(const uint8_t *data, size_t len,
                                          const slim_server_model *m, slim_server_infer *rq,
                                          slim_err *err)
{
    memset(rq, 0, sizeof(*rq));
    rq->batch = 1;
    bool in_place;
    infer_req *msg = slim_server_grpc_infer_unpack(data, len, &in_place);
    if (!msg)
        return slim_errf(err, SLIM_EINVAL, "the request is not a valid ModelInferRequest message");
    slim_status s = decode_msg(msg, m, rq, err);
    slim_server_grpc_infer_unpacked_free(msg, in_place);
    if (s != SLIM_OK)
        slim_server_infer_free(rq);
    return s;
}

slim_status slim_server_grpc_infer_decode_msg(const void *msg, const slim_server_model *m,
                                              slim_server_infer *rq, slim_err *err)
{
    memset(rq, 0, sizeof(*rq));
    rq->batch = 1;
    slim_status s = decode_msg(msg, m, rq, err);
    if (s != SLIM_OK)
        slim_server_infer_free(rq);
    return s;
}

/* The answer from outs as they are sent (classified ones as their class
 * strings); BYTES outputs go in their wire form, in raw[i].data (freed by
 * the caller). */
static slim_status encode_view(const slim_server_infer *rq, const slim_server_model *m,
                               const slim_tensor *outs, ProtobufCBinaryData *raw, uint8_t **out,
                               size_t *len, slim_err *err)
{
    slim_status ws = slim_server_shm_outputs_write(rq, m, outs, err); /* before the reply */
    if (ws != SLIM_OK)
        return ws;
    int n = rq->n_outputs, n_raw = 0;
    Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    Inference__ModelInferResponse__InferOutputTensor *tens = calloc((size_t)(n ? n : 1), sizeof(*tens));
    Inference__ModelInferResponse__InferOutputTensor **ptrs = calloc((size_t)(n ? n : 1), sizeof(*ptrs));
    int64_t *shapes = calloc((size_t)(n ? n : 1) * SLIM_MAX_DIMS, sizeof(*shapes));
    char version[32];
    snprintf(version, sizeof(version), "%lld", (long long)m->version);
    slim_status s = SLIM_OK;
    if (!tens || !ptrs || !shapes) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory while writing the response");
        goto done;
    }
    resp.model_name = m->name;
    resp.model_version = version;
    resp.id = rq->id ? rq->id : "";
    for (int i = 0; i < n; i++) {
        const slim_tensor *t = &outs[rq->outputs[i].index];
        const char *type = slim_server_dtype_kserve(t->dtype);
        inference__model_infer_response__infer_output_tensor__init(&tens[i]);
        tens[i].name = m->cfg.outputs[rq->outputs[i].index].name;
        tens[i].datatype = (char *)(type ? type : "BYTES");
        tens[i].n_shape = (size_t)t->ndim;
        tens[i].shape = shapes + (size_t)i * SLIM_MAX_DIMS;
        for (int d = 0; d < t->ndim; d++)
            tens[i].shape[d] = t->dims[d];
        ptrs[i] = &tens[i];
        /* One in shared memory has none: an empty entry keeps the others'
         * places (raw i is output i), and none trails the last. */
        if (rq->outputs[i].shm)
            continue;
        n_raw = i + 1;
        if (t->dtype == SLIM_STRING) {
            raw[i].len = slim_server_bytes_wire_size(t);
            if (raw[i].len && !(raw[i].data = malloc(raw[i].len))) {
                s = slim_errf(err, SLIM_ENOMEM, "out of memory while writing the response");
                goto done;
            }
            if (raw[i].len)
                slim_server_bytes_to_wire(t, raw[i].data);
            continue;
        }
        /* Packed straight from the output's buffer: one copy, into the message. */
        raw[i].data = t->data;
        raw[i].len = slim_tensor_nbytes(t);
    }
    resp.n_outputs = (size_t)n;
    resp.outputs = ptrs;
    resp.n_raw_output_contents = (size_t)n_raw;
    resp.raw_output_contents = raw;
    size_t size = inference__model_infer_response__get_packed_size(&resp);
    if (rq->max_reply_bytes && size > rq->max_reply_bytes) {
        s = slim_errf(err, SLIM_EOOM, "model '%s': the answer would take %zu bytes, over the "
                      "limit of %zu bytes (--max-response-bytes); ask for fewer elements",
                      m->name, size, rq->max_reply_bytes);
        goto done;
    }
    if (!(*out = malloc(size ? size : 1))) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory while writing the response");
        goto done;
    }
    *len = inference__model_infer_response__pack(&resp, *out);
done:
    free(tens);
    free(ptrs);
    free(shapes);
    return s;
}

slim_status slim_server_grpc_infer_encode(const slim_server_infer *rq, const slim_server_model *m,
                                          const slim_tensor *outs, int n_outs, uint8_t **out,
                                          size_t *len, slim_err *err)
{
    *out = NULL;
    *len = 0;
    for (int i = 0; i < rq->n_outputs; i++)
        if (rq->outputs[i].index >= n_outs)
            return slim_errf(err, SLIM_EINTERNAL, "the model returned %d outputs, expected %d",
                             n_outs, m->cfg.n_outputs);
    int n = rq->n_outputs;
    slim_tensor *view = calloc((size_t)(n_outs ? n_outs : 1), sizeof(*view));
    ProtobufCBinaryData *raw = calloc((size_t)(n ? n : 1), sizeof(*raw));
    slim_status s = view && raw ? SLIM_OK
                                : slim_errf(err, SLIM_ENOMEM, "out of memory while writing the "
                                            "response");
    if (s == SLIM_OK && (s = slim_server_classify_outputs(rq, m, outs, n_outs, view, err)) == SLIM_OK) {
        s = encode_view(rq, m, view, raw, out, len, err);
        for (int i = 0; i < n; i++)
            if (view[rq->outputs[i].index].dtype == SLIM_STRING)
                free(raw[i].data); /* the wire copies; the others are the outputs' own */
        slim_server_classify_outputs_free(rq, outs, view, n_outs);
    }
    free(raw);
    free(view);
    return s;
}
