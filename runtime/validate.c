/*
 * validate.c - a node against its operator's schema (validate.h).
 *
 * The ONNX schemas are generated data (op_schema_data.c, sorted by name and
 * version); slimserve's own operators, which only its passes insert, have
 * theirs here.
 */
#include "validate.h"

#include <stdio.h>
#include <string.h>

static const slim_op_schema internal_schemas[] = {
    {"MemcpyToDevice", 1, 1, 1, 1, 1, "S", "S", ""},
    {"MemcpyToHost", 1, 1, 1, 1, 1, "S", "S", ""},
    {"MatMulInt8", 1, 4, 13, 1, 1, "SSSSOOOOOOOOO", "S", "!K=i activation=s"},
    {"ConvInt8", 1, 4, 7, 1, 2, "SSSSOOO", "SO",
     "!kernel_shape=I strides=I dilations=I pads=I group=i auto_pad=s activation=s "
     "nhwc_input=i nhwc_output=i nhwc_residual=i clip_min=f clip_max=f weight_layout=s "
     "input_codes=i input_min=f input_max=f output_codes=i"},
    {"GatherInt8", 1, 3, 3, 1, 1, "SSS", "S", ""},
    {"SparseMatMul", 1, 3, 6, 1, 1, "SSSOOO", "S", "!encoding=s !K=i storage=s"},
    {"SparseConv", 1, 3, 7, 1, 1, "SSSOOOO", "S",
     "!encoding=s !K=i !kernel_shape=I strides=I dilations=I pads=I group=i activation=i "
     "alpha=f beta=f storage=s"},
    {"MatMulHalf", 1, 2, 3, 1, 1, "SSO", "S", "!K=i !N=i activation=s"},
    {"GatherHalf", 1, 2, 2, 1, 1, "SS", "S", ""},
    {"HalfCast", 1, 1, 1, 1, 1, "S", "S", "!to=i"},
    {"ConvHalf", 1, 2, 3, 1, 1, "SSO", "S",
     "auto_pad=s dilations=I group=i kernel_shape=I pads=I strides=I"},
    {"FusedConv", 1, 3, 6, 1, 1, "SSSOOO", "S",
     "!kernel_shape=I !strides=I !dilations=I !pads=I !group=i !activation=i alpha=f beta=f "
     "!weights_format=i in_blocked=i res_blocked=i out_blocked=i out_channels=i dw_stride=i "
     "dw_activation=i dw_alpha=f dw_beta=f"},
    {"AddLayerNorm", 1, 3, 4, 1, 2, "SSSO", "SO", "epsilon=f"},
    {"FusedMatMul", 1, 3, 3, 1, 1, "SSS", "S", "!K=i !N=i !activation=i parts=I layout=I"},
    {"MatMulBias", 1, 3, 3, 1, 1, "SSS", "S", "activation=s"},
    {"MaxPoolBlocked", 1, 1, 1, 1, 1, "S", "S",
     "!kernel_shape=I !strides=I !pads=I !dilations=I"},
    /* K and V absent when qkv_sizes packs them into Q (passes/merge_qkv.c). */
    {"FusedAttention", 1, 3, 4, 1, 1, "SOOO", "S",
     "!num_heads=i !head_size=i !v_head_size=i !scale=f !q_shape=I !k_shape=I !v_shape=I "
     "!out_shape=I qkv_sizes=I"},
    {0},
};

/* onnxruntime's contrib operators that slimserve runs (arity and
 * attributes as onnxruntime's contrib_defs declare them). */
static const slim_op_schema microsoft_schemas[] = {
    {"MatMulIntegerToFloat", 1, 4, 7, 1, 1, "SSSSOOO", "S", ""},
    {"DynamicQuantizeMatMul", 1, 3, 5, 1, 1, "SSSOO", "S", ""},
    {0},
};

/* The ai.onnx.ml operators slimserve runs (kernels/cpu/ml.c), as onnx
 * 1.22.0 declares them. */
static const slim_op_schema ml_schemas[] = {
    {"ArrayFeatureExtractor", 1, 2, 2, 1, 1, "SS", "S", ""},
    {"Binarizer", 1, 1, 1, 1, 1, "S", "S", "threshold=f"},
    /* The string ones (kernels/cpu/strings_ml.c). */
    {"CategoryMapper", 1, 1, 1, 1, 1, "S", "S",
     "cats_int64s=I cats_strings=S default_int64=i default_string=s"},
    {"LabelEncoder", 2, 1, 1, 1, 1, "S", "S",
     "default_float=f default_int64=i default_string=s keys_floats=F keys_int64s=I "
     "keys_strings=S values_floats=F values_int64s=I values_strings=S"},
    {"LabelEncoder", 4, 1, 1, 1, 1, "S", "S",
     "default_float=f default_int64=i default_string=s default_tensor=t keys_floats=F "
     "keys_int64s=I keys_strings=S keys_tensor=t values_floats=F values_int64s=I "
     "values_strings=S values_tensor=t"},
    {"TreeEnsemble", 5, 1, 1, 1, 1, "S", "S",
     "aggregate_function=i !leaf_targetids=I !leaf_weights=t membership_values=t n_targets=i "
     "!nodes_falseleafs=I !nodes_falsenodeids=I !nodes_featureids=I nodes_hitrates=t "
     "nodes_missing_value_tracks_true=I !nodes_modes=t !nodes_splits=t !nodes_trueleafs=I "
     "!nodes_truenodeids=I post_transform=i !tree_roots=I"},
    {0},
};

/* ai.onnx.preview (kernels/cpu/flex_attention.c). */
static const slim_op_schema preview_schemas[] = {
    {"FlexAttention", 1, 3, 3, 1, 1, "SSS", "S",
     "prob_mod=g scale=f score_mod=g softmax_precision=i"},
    {0},
};

static size_t onnx_schema_count(void)
{
    static size_t n; /* computed once; the table is constant */
    if (!n)
        while (slim__onnx_schemas[n].op_type)
            n++;
    return n;
}

const slim_op_schema *slim_op_schema_find(const char *domain, const char *op_type, int opset)
{
    if (domain && strcmp(domain, "com.slimserve") == 0) {
        for (const slim_op_schema *s = internal_schemas; s->op_type; s++)
            if (strcmp(s->op_type, op_type) == 0)
                return s;
        return NULL;
    }
    if (domain && strcmp(domain, "com.microsoft") == 0) {
        for (const slim_op_schema *s = microsoft_schemas; s->op_type; s++)
            if (strcmp(s->op_type, op_type) == 0 && s->since <= opset)
                return s;
        return NULL;
    }
    if (domain && (strcmp(domain, "ai.onnx.ml") == 0 || strcmp(domain, "ai.onnx.preview") == 0)) {
        const slim_op_schema *best = NULL;
        const slim_op_schema *table = domain[8] == 'm' ? ml_schemas : preview_schemas;
        for (const slim_op_schema *s = table; s->op_type; s++)
            if (strcmp(s->op_type, op_type) == 0 && s->since <= opset)
                best = s;
        return best;
    }
    if (domain && domain[0] && strcmp(domain, "ai.onnx") != 0)
        return NULL;
    /* Binary search for the first version of op_type, then walk its
     * versions (ascending) to the last one with since <= opset. */
    size_t lo = 0, hi = onnx_schema_count();
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(slim__onnx_schemas[mid].op_type, op_type) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    const slim_op_schema *best = NULL;
    for (const slim_op_schema *s = &slim__onnx_schemas[lo];
         s->op_type && strcmp(s->op_type, op_type) == 0; s++)
        if (s->since <= opset)
            best = s;
    return best;
}

/* The kind of slot i: its formal parameter's letter, the last one's when
 * that is variadic, or 0 past the end. */
static char slot_kind(const char *kinds, int i)
{
    size_t n = strlen(kinds);
    if ((size_t)i < n)
        return kinds[i];
    return n && kinds[n - 1] == 'V' ? 'V' : 0;
}

static const char *attr_type_name(char letter)
{
    switch (letter) {
    case 'f': return "FLOAT";
    case 'i': return "INT";
    case 's': return "STRING";
    case 't': return "TENSOR";
    case 'g': return "GRAPH";
    case 'p': return "SPARSE_TENSOR";
    case 'y': return "TYPE_PROTO";
    case 'F': return "FLOATS";
    case 'I': return "INTS";
    case 'S': return "STRINGS";
    case 'T': return "TENSORS";
    case 'G': return "GRAPHS";
    case 'P': return "SPARSE_TENSORS";
    case 'Y': return "TYPE_PROTOS";
    default: return "?";
    }
}

static const char *slim_attr_type_name(slim_attr_type t)
{
    switch (t) {
    case SLIM_ATTR_FLOAT: return "FLOAT";
    case SLIM_ATTR_INT: return "INT";
    case SLIM_ATTR_STRING: return "STRING";
    case SLIM_ATTR_TENSOR: return "TENSOR";
    case SLIM_ATTR_FLOATS: return "FLOATS";
    case SLIM_ATTR_INTS: return "INTS";
    case SLIM_ATTR_STRINGS: return "STRINGS";
    case SLIM_ATTR_GRAPH: return "GRAPH";
    default: return "an unsupported or missing type";
    }
}

/* Whether an attribute the loader converted to t has schema type letter.
 * The loader keeps tensor lists, sparse tensors and type protos as
 * UNDEFINED (the operator names them as unsupported) and both GRAPH and
 * GRAPHS as GRAPH (refused by finalize). */
static bool attr_type_ok(slim_attr_type t, char letter)
{
    switch (letter) {
    case 'f': return t == SLIM_ATTR_FLOAT;
    case 'i': return t == SLIM_ATTR_INT;
    case 's': return t == SLIM_ATTR_STRING;
    case 't': return t == SLIM_ATTR_TENSOR;
    case 'F': return t == SLIM_ATTR_FLOATS;
    case 'I': return t == SLIM_ATTR_INTS;
    case 'S': return t == SLIM_ATTR_STRINGS;
    case 'g': case 'G': return t == SLIM_ATTR_GRAPH;
    case 'p': case 'P': case 'y': case 'Y': case 'T': return t == SLIM_ATTR_UNDEFINED;
    default: return false;
    }
}

/* Finds `name` in a schema's attrs string; returns its type letter and
 * whether it is required, or 0 when the schema has no such attribute. */
static char schema_attr(const char *attrs, const char *name, bool *required)
{
    size_t len = strlen(name);
    for (const char *p = attrs; *p;) {
        while (*p == ' ')
            p++;
        bool req = *p == '!';
        if (req)
            p++;
        const char *eq = strchr(p, '=');
        if (!eq)
            break;
        if ((size_t)(eq - p) == len && memcmp(p, name, len) == 0) {
            *required = req;
            return eq[1];
        }
        p = eq + 2;
    }
    return 0;
}

static slim_status check_attrs(const slim_node *n, const slim_op_schema *s, slim_err *err)
{
    for (int a = 0; a < n->n_attrs; a++) {
        const slim_attr *at = &n->attrs[a];
        for (int b = 0; b < a; b++)
            if (strcmp(n->attrs[b].name, at->name) == 0)
                return slim_errf(err, SLIM_EPARSE, SLIM_NODE_FMT ": attribute \"%s\" is given twice",
                                 SLIM_NODE_ARGS(n), at->name);
        bool req;
        char want = schema_attr(s->attrs, at->name, &req);
        if (!want)
            return slim_errf(err, SLIM_EPARSE,
                             SLIM_NODE_FMT ": %s (opset %d) has no attribute \"%s\"",
                             SLIM_NODE_ARGS(n), n->op_type, s->since, at->name);
        if (!attr_type_ok(at->type, want))
            return slim_errf(err, SLIM_EPARSE,
                             SLIM_NODE_FMT ": attribute \"%s\" must be %s, but the model gives %s",
                             SLIM_NODE_ARGS(n), at->name, attr_type_name(want),
                             slim_attr_type_name(at->type));
    }
    /* Required attributes: walk the schema's list. */
    for (const char *p = s->attrs; *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        bool req = *p == '!';
        if (req)
            p++;
        const char *eq = strchr(p, '=');
        if (!eq)
            break;
        if (req) {
            char name[128];
            int len = (int)(eq - p) < (int)sizeof(name) - 1 ? (int)(eq - p) : (int)sizeof(name) - 1;
            memcpy(name, p, (size_t)len);
            name[len] = 0;
            if (!slim_node_attr(n, name))
                return slim_errf(err, SLIM_EPARSE,
                                 SLIM_NODE_FMT ": required attribute \"%s\" is missing",
                                 SLIM_NODE_ARGS(n), name);
        }
        p = eq + 2;
    }
    return SLIM_OK;
}

slim_status slim_node_validate(const slim_graph *g, const slim_node *n, slim_err *err)
{
    const slim_op_schema *s = slim_op_schema_find(n->domain, n->op_type, n->opset);
    if (!s)
        return slim_errf(err, SLIM_EUNSUPPORTED,
                         SLIM_NODE_FMT ": operator %s (opset %d) has no schema to check it against",
                         SLIM_NODE_ARGS(n), n->op_type, n->opset);
    /* Outer-scope values a subgraph reads are inputs too, past the
     * declared ones (graph.h). */
    const int n_in = n->n_in - n->n_implicit;
    if (n->n_implicit < 0 || n_in < 0)
        return slim_errf(err, SLIM_EINTERNAL, SLIM_NODE_FMT ": bad implicit input count",
                         SLIM_NODE_ARGS(n));
    if (n_in < s->min_in)
        return slim_errf(err, SLIM_EPARSE,
                         SLIM_NODE_FMT ": has %d input%s, but %s (opset %d) needs at least %d",
                         SLIM_NODE_ARGS(n), n_in, n_in == 1 ? "" : "s", n->op_type,
                         s->since, s->min_in);
    if (n_in > s->max_in)
        return slim_errf(err, SLIM_EPARSE,
                         SLIM_NODE_FMT ": has %d inputs, but %s (opset %d) takes at most %d",
                         SLIM_NODE_ARGS(n), n_in, n->op_type, s->since, s->max_in);
    if (n->n_out < s->min_out)
        return slim_errf(err, SLIM_EPARSE,
                         SLIM_NODE_FMT ": has %d output%s, but %s (opset %d) produces at least %d",
                         SLIM_NODE_ARGS(n), n->n_out, n->n_out == 1 ? "" : "s", n->op_type,
                         s->since, s->min_out);
    if (n->n_out > s->max_out)
        return slim_errf(err, SLIM_EPARSE,
                         SLIM_NODE_FMT ": has %d outputs, but %s (opset %d) produces at most %d",
                         SLIM_NODE_ARGS(n), n->n_out, n->op_type, s->since, s->max_out);
    /* ONNX lets only optional slots be empty. Variadic inputs are all read
     * by slimserve's kernels (Concat, Sum, ...), so they may not be either. */
    for (int i = 0; i < n->n_in; i++) {
        char k = i < n_in ? slot_kind(s->in_kinds, i) : 'S';
        if (n->in[i] < 0 && k != 'O')
            return slim_errf(err, SLIM_EPARSE,
                             SLIM_NODE_FMT ": input %d is required, but its name is empty",
                             SLIM_NODE_ARGS(n), i);
        if (n->in[i] >= g->n_values)
            return slim_errf(err, SLIM_EINTERNAL, SLIM_NODE_FMT ": input %d names no value",
                             SLIM_NODE_ARGS(n), i);
    }
    for (int i = 0; i < n->n_out; i++) {
        char k = slot_kind(s->out_kinds, i);
        if (n->out[i] < 0 && k == 'S')
            return slim_errf(err, SLIM_EPARSE,
                             SLIM_NODE_FMT ": output %d is required, but its name is empty",
                             SLIM_NODE_ARGS(n), i);
    }
    /* SparseMatMul checks its encoding's contents once and trusts them
     * after (kernels/cpu/sparse_op.c): that holds for constants only. */
    if ((strcmp(n->op_type, "SparseMatMul") == 0 || strcmp(n->op_type, "SparseConv") == 0) &&
        strcmp(n->domain, "com.slimserve") == 0)
        for (int i = 1; i < 4 && i < n_in; i++)
            if (n->in[i] >= 0 && g->values[n->in[i]].kind != SLIM_VALUE_INITIALIZER)
                return slim_errf(err, SLIM_EPARSE, SLIM_NODE_FMT ": input %d (the sparse "
                                 "weight) must be an initializer", SLIM_NODE_ARGS(n), i);
    return check_attrs(n, s, err);
}
