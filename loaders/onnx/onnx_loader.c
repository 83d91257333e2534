/*
 * onnx_loader.c - ONNX ModelProto -> slimserve graph IR.
 *
 * The file is mapped and split by its wire format (onnx_wire.c); each
 * initializer is unpacked with protobuf-c (code generated at build time from
 * the onnx.proto shipped by the `onnx` package), converted and freed on its
 * own, its mapped pages dropped, then the rest of the model: only the IR's
 * copy of the weights stays resident, and the peak is that plus the
 * largest weight. External data files are read from the model's
 * folder and must stay inside it. Each TensorProto becomes a tensor in
 * onnx_tensor.c.
 */
#include "cancel.h"
#include "file.h"
#include "model.h"
#include "onnx.pb-c.h"
#include "onnx_tensor.h"
#include "onnx_wire.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- value info and attributes --------------------------------------- */

static slim_status read_value_info(const Onnx__ValueInfoProto *vi, slim_io_info *info,
                                   slim_err *err)
{
    info->dtype = SLIM_DTYPE_UNDEFINED;
    info->ndim = -1;
    const Onnx__TypeProto *tp = vi->type;
    if (!tp)
        return SLIM_OK;
    /* optional(T) and sequence(tensor) unwrap to the tensor type; the
     * kinds say what wraps it (runtime/container.h). */
    info->kind = info->elem_kind = SLIM_KIND_TENSOR;
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE) {
        info->kind = SLIM_KIND_OPTIONAL;
        tp = tp->optional_type ? tp->optional_type->elem_type : NULL;
        if (!tp)
            return SLIM_OK;
        if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE)
            info->elem_kind = SLIM_KIND_SEQUENCE;
    }
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE) {
        if (info->kind == SLIM_KIND_TENSOR)
            info->kind = SLIM_KIND_SEQUENCE;
        tp = tp->sequence_type ? tp->sequence_type->elem_type : NULL;
        if (!tp)
            return SLIM_OK;
    }
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET)
        return SLIM_OK;
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return slim_errf(err, SLIM_EUNSUPPORTED, "value \"%s\" is not a tensor, a sequence of "
                         "tensors or an optional of either (maps, sparse tensors and nested "
                         "sequences are not supported)", vi->name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (tt->has_elem_type) {
        info->dtype = slim_dtype_from_onnx(tt->elem_type);
        if (info->dtype == SLIM_DTYPE_UNDEFINED)
            return slim_errf(err, SLIM_EUNSUPPORTED, "value \"%s\" has ONNX data type %d, which "
                             "is not supported", vi->name, (int)tt->elem_type);
    }
    if (!tt->shape)
        return SLIM_OK;
    if (tt->shape->n_dim > SLIM_MAX_DIMS)
        return slim_errf(err, SLIM_EUNSUPPORTED, "value \"%s\" has %zu dims, at most %d supported",
                         vi->name, tt->shape->n_dim, SLIM_MAX_DIMS);
    info->ndim = (int)tt->shape->n_dim;
    for (int d = 0; d < info->ndim; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
        info->dims[d] = -1;
        if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            info->dims[d] = dim->dim_value;
        else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                 dim->dim_param && dim->dim_param[0] && !info->dim_names[d])
            info->dim_names[d] = strdup(dim->dim_param);
    }
    return SLIM_OK;
}

/* A NUL-terminated copy of a protobuf bytes field. An empty field may have
 * no data pointer at all (a STRING attribute with no payload). */
static char *dup_bytes(ProtobufCBinaryData b)
{
    char *s = malloc(b.len + 1);
    if (!s)
        return NULL;
    if (b.len && b.data)
        memcpy(s, b.data, b.len);
    s[b.data ? b.len : 0] = '\0';
    return s;
}

/* What converting a subgraph needs from its model: opsets, the folder of
 * external data, and how deep the subgraphs nest so far. */
typedef struct {
    const Onnx__ModelProto *mp;
    const char *base_dir;
    int depth;
} convert_ctx;

static slim_status convert_graph_proto(const convert_ctx *cx, const Onnx__GraphProto *gp,
                                       slim_graph *g, slim_err *err);

static slim_status convert_attr(const convert_ctx *cx, const Onnx__AttributeProto *ap,
                                slim_attr *a, slim_err *err)
{
    memset(a, 0, sizeof(*a));
    a->name = strdup(ap->name ? ap->name : "");
    if (!a->name)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    switch (ap->type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        a->type = SLIM_ATTR_FLOAT;
        a->f = ap->f;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        a->type = SLIM_ATTR_INT;
        a->i = ap->i;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        a->type = SLIM_ATTR_STRING;
        a->s = dup_bytes(ap->s);
        if (!a->s)
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        a->type = SLIM_ATTR_FLOATS;
        a->n = (int)ap->n_floats;
        a->floats = malloc(sizeof(float) * (a->n ? a->n : 1));
        if (!a->floats)
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        if (a->n)
            memcpy(a->floats, ap->floats, sizeof(float) * a->n);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        a->type = SLIM_ATTR_INTS;
        a->n = (int)ap->n_ints;
        a->ints = malloc(sizeof(int64_t) * (a->n ? a->n : 1));
        if (!a->ints)
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        if (a->n)
            memcpy(a->ints, ap->ints, sizeof(int64_t) * a->n);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
        a->type = SLIM_ATTR_STRINGS;
        a->strings = calloc(ap->n_strings ? ap->n_strings : 1, sizeof(char *));
        if (!a->strings)
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        a->n = (int)ap->n_strings;
        for (int i = 0; i < a->n; i++)
            if (!(a->strings[i] = dup_bytes(ap->strings[i])))
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
        if (!ap->t)
            return slim_errf(err, SLIM_EPARSE, "attribute \"%s\" has no tensor", a->name);
        a->type = SLIM_ATTR_TENSOR;
        a->t = calloc(1, sizeof(slim_tensor));
        if (!a->t)
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        slim_status st = slim__onnx_tensor_from_proto(ap->t, NULL, a->t, err);
        if (st) {
            free(a->t);
            a->t = NULL;
            return slim_err_prefix(err, "attribute \"%s\": ", a->name);
        }
        break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: {
        a->type = SLIM_ATTR_GRAPH;
        if (!ap->g)
            return slim_errf(err, SLIM_EPARSE, "attribute \"%s\" has no graph", a->name);
        if (cx->depth >= SLIM_MAX_SUBGRAPH_DEPTH)
            return slim_errf(err, SLIM_EUNSUPPORTED, "subgraphs nest more than %d deep",
                             SLIM_MAX_SUBGRAPH_DEPTH);
        a->g = slim_graph_new();
        if (!a->g)
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        convert_ctx inner = *cx;
        inner.depth++;
        slim_status st = convert_graph_proto(&inner, ap->g, a->g, err);
        if (st)
            return slim_err_prefix(err, "attribute \"%s\": ", a->name);
        break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
        a->type = SLIM_ATTR_GRAPH; /* g stays NULL: finalize names it unsupported */
        break;
    default:
        /* Sparse tensors, type protos: kept by name so that an operator can
         * name what it does not support. */
        a->type = SLIM_ATTR_UNDEFINED;
        break;
    }
    return SLIM_OK;
}

/* ---- graph ---------------------------------------------------------------- */

static slim_status add_initializer(slim_graph *g, const Onnx__TensorProto *tp, size_t i,
                                   const char *base_dir, slim_err *err)
{
    if (!tp->name || !tp->name[0])
        return slim_errf(err, SLIM_EPARSE, "initializer %zu has no name", i);
    int v = slim_graph_value(g, tp->name);
    if (v < 0)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (g->values[v].kind == SLIM_VALUE_INITIALIZER)
        return slim_errf(err, SLIM_EPARSE, "initializer \"%s\" is defined twice", tp->name);
    if (slim__onnx_tensor_from_proto(tp, base_dir, &g->values[v].init, err))
        return slim_err_prefix(err, "initializer: ");
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    slim_io_info *info = &g->values[v].info;
    info->dtype = g->values[v].init.dtype;
    info->ndim = g->values[v].init.ndim;
    memcpy(info->dims, g->values[v].init.dims, sizeof(info->dims));
    return SLIM_OK;
}

/* A weightless read's initializer: its type and shape, no data (data and
 * buf NULL, slim_tensor_nbytes its size all the same). The checks are
 * slim__onnx_tensor_from_proto's, on what the wire scan read. */
static slim_status add_initializer_shape(slim_graph *g, const slim_onnx_init_info *in,
                                         size_t nbytes, size_t i, const uint8_t *raw,
                                         slim_err *err)
{
    char name[1024];
    if (!in->name_len || in->name_len >= sizeof(name) || memchr(in->name, 0, in->name_len))
        return slim_errf(err, SLIM_EPARSE, "initializer %zu has no name, or a name that is "
                         "not a string", i);
    memcpy(name, in->name, in->name_len);
    name[in->name_len] = '\0';
    int v = slim_graph_value(g, name);
    if (v < 0)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (g->values[v].kind == SLIM_VALUE_INITIALIZER)
        return slim_errf(err, SLIM_EPARSE, "initializer \"%s\" is defined twice", name);
    if (!in->external && in->stored_bytes != nbytes)
        return slim_errf(err, SLIM_EPARSE, "initializer: tensor \"%s\" has %zu bytes of data, "
                         "its shape needs %zu", name, in->stored_bytes, nbytes);
    slim_tensor *t = &g->values[v].init;
    memset(t, 0, sizeof(*t));
    t->dtype = slim_dtype_from_onnx(in->data_type);
    t->ndim = in->ndim;
    memcpy(t->dims, in->dims, sizeof(t->dims));
    if (raw) {
        if (slim_tensor_alloc(t, err))
            return slim_err_prefix(err, "initializer: ");
        if (nbytes)
            memcpy(t->data, raw, nbytes);
    }
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    slim_io_info *info = &g->values[v].info;
    info->dtype = t->dtype;
    info->ndim = t->ndim;
    memcpy(info->dims, t->dims, sizeof(info->dims));
    return SLIM_OK;
}

/* Whether initializer s is a plain raw_data tensor of more than
 * RAW_DIRECT_MIN bytes (slim_onnx_init_info.plain_raw), read straight from
 * the file: protobuf-c's unpack would copy its bytes first, so a load held
 * the largest weight twice for a moment outside the allocator. Smaller
 * ones, and anything less plain, are unpacked as always. */
#define RAW_DIRECT_MIN ((size_t)64 << 10)

/* The bytes an initializer's data takes by its type and shape (*nbytes);
 * false for a type that is not numeric or a shape that is negative or too
 * big to count. */
static bool init_nbytes(const slim_onnx_init_info *in, size_t *nbytes)
{
    slim_dtype dt = slim_dtype_from_onnx(in->data_type);
    if (dt == SLIM_DTYPE_UNDEFINED)
        return false;
    int64_t n = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (in->dims[d] < 0 || (in->dims[d] > 0 && n > INT64_MAX / 16 / in->dims[d]))
            return false;
        n *= in->dims[d];
    }
    *nbytes = (size_t)n * slim_dtype_size(dt);
    return true;
}

static bool raw_direct(const slim_onnx_span *s, slim_onnx_init_info *in, size_t *nbytes)
{
    slim_err ignored;
    /* A name the unpacked path takes that add_initializer_shape refuses
     * (1 KiB or more, a NUL inside) goes that way too. */
    if (s->n <= RAW_DIRECT_MIN || slim_onnx_wire_init_info(s, in, &ignored) || !in->plain_raw ||
        in->ndim < 0 || in->stored_bytes <= RAW_DIRECT_MIN || !in->name_len ||
        in->name_len >= 1024 || memchr(in->name, 0, in->name_len))
        return false;
    if (!init_nbytes(in, nbytes))
        return false;
    return *nbytes == in->stored_bytes;
}

/* Whether a weightless read leaves initializer i's data out: a known
 * numeric type, a valid shape, more than keep bytes (*nbytes). Anything
 * else is read as always, and its errors are the usual ones. */
static bool shape_only(const slim_onnx_span *s, size_t keep, slim_onnx_init_info *in,
                       size_t *nbytes)
{
    slim_err ignored;
    if (keep == SIZE_MAX || slim_onnx_wire_init_info(s, in, &ignored) || in->ndim < 0)
        return false;
    if (!init_nbytes(in, nbytes))
        return false;
    return *nbytes > keep;
}

static int opset_for(const Onnx__ModelProto *mp, const char *domain)
{
    bool dflt = !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const char *d = mp->opset_import[i]->domain;
        bool d_dflt = !d || !d[0] || strcmp(d, "ai.onnx") == 0;
        if ((dflt && d_dflt) || (!dflt && d && strcmp(d, domain) == 0))
            return (int)mp->opset_import[i]->version;
    }
    return dflt && mp->n_opset_import == 0 ? 1 : 0;
}

/* Opset versions are int64 in the file and int in the IR: one that does
 * not fit is refused here, by its own value, rather than wrapping into a
 * different (and misleading) number in later messages. */
static slim_status check_opsets(const Onnx__ModelProto *mp, slim_err *err)
{
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *op = mp->opset_import[i];
        if (op->version < 0 || op->version > INT_MAX)
            return slim_errf(err, SLIM_EUNSUPPORTED, "opset_import %zu (domain \"%s\"): version "
                             "%lld is out of range (0 to %d)", i,
                             op->domain ? op->domain : "", (long long)op->version, INT_MAX);
    }
    return SLIM_OK;
}

/* Converts gp's inputs, nodes and outputs into g (initializers of the main
 * graph are added before, one at a time, by load_bytes). In a subgraph
 * (depth > 0) the initializers come from gp, and names read but defined
 * nowhere are outer-scope values: slim_graph_capture_outer makes them
 * inputs, called by the parent for the node that holds this graph. */
static slim_status convert_graph_proto(const convert_ctx *cx, const Onnx__GraphProto *gp,
                                       slim_graph *g, slim_err *err)
{
    const Onnx__ModelProto *mp = cx->mp;
    const bool sub = cx->depth > 0;
    slim_status st;
    g->opset = opset_for(mp, "");
    g->ir_version = mp->has_ir_version ? mp->ir_version : 0;
    g->name = strdup(gp->name ? gp->name : "");
    g->producer_name = strdup(mp->producer_name ? mp->producer_name : "");
    if (!g->name || !g->producer_name)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (gp->n_sparse_initializer > 0)
        return slim_errf(err, SLIM_EUNSUPPORTED, "sparse initializers are not supported");

    for (size_t i = 0; i < gp->n_initializer; i++)
        if ((st = add_initializer(g, gp->initializer[i], i, cx->base_dir, err)) ||
            (st = slim_cancel_status(err))) /* a load's time bound */
            return st;
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        if (!vi->name || !vi->name[0])
            return slim_errf(err, SLIM_EPARSE, "graph input %zu has no name", i);
        int v = slim_graph_value(g, vi->name);
        if (v < 0)
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        /* Before IR 4 initializers were also listed as inputs: they stay weights. */
        if (g->values[v].kind == SLIM_VALUE_INITIALIZER)
            continue;
        if (g->values[v].kind == SLIM_VALUE_INPUT)
            return slim_errf(err, SLIM_EPARSE, "graph input \"%s\" is listed twice", vi->name);
        if ((st = read_value_info(vi, &g->values[v].info, err)))
            return st;
        if ((st = slim_graph_add_input(g, v)))
            return slim_errf(err, st, "out of memory");
    }
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        if (!np->op_type || !np->op_type[0])
            return slim_errf(err, SLIM_EPARSE, "node %zu has no op_type", i);
        /* slimserve's own operators are inserted by its passes, which know
         * where they may go; a model file may not name them. */
        if (np->domain && strcmp(np->domain, "com.slimserve") == 0)
            return slim_errf(err, SLIM_EPARSE, "node %zu (%s): domain \"com.slimserve\" is "
                             "reserved for operators slimserve inserts itself", i, np->op_type);
        int id = slim_graph_add_node(g, np->name, np->op_type, np->domain, (int)np->n_input,
                                     (const char *const *)np->input, (int)np->n_output,
                                     (const char *const *)np->output);
        if (id < 0)
            return slim_errf(err, SLIM_ENOMEM, "out of memory adding node %zu", i);
        slim_node *n = &g->nodes[id];
        n->opset = opset_for(mp, n->domain);
        n->attrs = calloc(np->n_attribute ? np->n_attribute : 1, sizeof(slim_attr));
        if (!n->attrs)
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        bool has_graph = false;
        for (size_t a = 0; a < np->n_attribute; a++) {
            n->n_attrs++;
            if ((st = convert_attr(cx, np->attribute[a], &n->attrs[a], err)))
                return slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(n));
            has_graph = has_graph || n->attrs[a].g;
        }
        if (has_graph && (st = slim_graph_capture_outer(g, id, err)))
            return st;
    }
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = gp->output[i];
        /* A subgraph may pass an outer-scope value straight through: the
         * name then first appears here. */
        int v = !vi->name || !vi->name[0] ? -1
                : sub ? slim_graph_value(g, vi->name) : slim_graph_find_value(g, vi->name);
        if (v < 0)
            return slim_errf(err, SLIM_EPARSE, "graph output \"%s\" is not produced by any node",
                             vi->name ? vi->name : "");
        if ((st = read_value_info(vi, &g->values[v].info, err)))
            return st;
        if ((st = slim_graph_add_output(g, v)))
            return slim_errf(err, st, "out of memory");
    }
    return SLIM_OK;
}

/* Unpacks and converts one initializer at a time, straight from its bytes
 * in the file (onnx_wire.c), then the rest of the model; with drop_pages
 * the mapped pages of each initializer are given back once converted, so
 * the file is not resident beside the weights made from it. */
static slim_status load_bytes(const void *data, size_t size, const char *base_dir,
                              bool drop_pages, size_t keep, slim_graph **out, slim_err *err)
{
    *out = NULL;
    uint8_t *rest = NULL;
    size_t rest_len = 0, n_inits = 0;
    slim_onnx_span *inits = NULL;
    slim_status st = slim_onnx_wire_check_nesting(data, size, err);
    if (st)
        return st;
    st = slim_onnx_wire_split(data, size, &rest, &rest_len, &inits, &n_inits, err);
    if (st)
        return st;
    slim_graph *g = slim_graph_new();
    if (!g) {
        free(rest);
        free(inits);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    long page = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < n_inits && !st; i++) {
        slim_onnx_init_info in;
        size_t nbytes;
        if (shape_only(&inits[i], keep, &in, &nbytes)) {
            st = add_initializer_shape(g, &in, nbytes, i, NULL, err);
            continue;
        }
        if (raw_direct(&inits[i], &in, &nbytes)) {
            st = add_initializer_shape(g, &in, nbytes, i, in.raw, err);
        } else {
            Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, inits[i].n, inits[i].p);
            if (!tp) {
                st = slim_errf(err, SLIM_EPARSE, "not a valid ONNX model: initializer %zu is "
                               "malformed or truncated", i);
                break;
            }
            st = add_initializer(g, tp, i, base_dir, err);
            onnx__tensor_proto__free_unpacked(tp, NULL);
        }
        if (drop_pages && page > 0) {
            uintptr_t b = ((uintptr_t)inits[i].p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
            uintptr_t e = ((uintptr_t)inits[i].p + inits[i].n) & ~((uintptr_t)page - 1);
            if (e > b)
                madvise((void *)b, e - b, MADV_DONTNEED);
        }
    }
    free(inits);
    Onnx__ModelProto *mp = st ? NULL : onnx__model_proto__unpack(NULL, rest_len, rest);
    free(rest);
    if (!st && !mp)
        st = slim_errf(err, SLIM_EPARSE, "not a valid ONNX model: the protobuf is malformed "
                       "or truncated");
    if (!st && !mp->graph)
        st = slim_errf(err, SLIM_EPARSE, "not a valid ONNX model: it has no graph");
    if (!st)
        st = check_opsets(mp, err);
    if (!st) {
        convert_ctx cx = {mp, base_dir, 0};
        st = convert_graph_proto(&cx, mp->graph, g, err);
    }
    if (mp)
        onnx__model_proto__free_unpacked(mp, NULL);
    if (st) {
        slim_graph_free(g);
        return st;
    }
    *out = g;
    return SLIM_OK;
}

slim_status slim_onnx_load_buffer(const void *data, size_t size, const char *base_dir,
                                  slim_graph **out, slim_err *err)
{
    return load_bytes(data, size, base_dir, false, SIZE_MAX, out, err);
}

static slim_status load_file(const char *path, size_t keep, slim_graph **out, slim_err *err)
{
    mapped_file mf;
    slim_status st = slim__onnx_map_file(path, "model", &mf, err);
    if (st)
        return st;
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    st = load_bytes(mf.data, mf.size, dir, true, keep, out, err);
    slim__onnx_unmap_file(&mf);
    if (st)
        slim_err_prefix(err, "%s: ", path);
    return st;
}

slim_status slim_onnx_load_file(const char *path, slim_graph **out, slim_err *err)
{
    return load_file(path, SIZE_MAX, out, err);
}

slim_status slim_onnx_load_file_shapes(const char *path, size_t keep_bytes, slim_graph **out,
                                       slim_err *err)
{
    return load_file(path, keep_bytes, out, err);
}
