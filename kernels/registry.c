/*
 * registry.c - operator lookup by (domain, op type, opset).
 *
 * Each kernel file exports one table; an op type may appear several times
 * with different `since` versions when its interface changed across opsets
 * (attribute became input, say). Lookup picks the highest since <= opset.
 */
#include "kernel.h"

#include <string.h>

#define SLIM__KERNEL_TABLES(X) \
    X(elementwise) X(cast) X(conv) X(pool) X(linalg) X(einsum) X(norm) X(softmax) X(reduce) \
    X(shape) X(movement) X(pad) X(gather) X(resize) X(rnn) X(quantize) X(qinteger) \
    X(lrn) X(attention) X(select) X(signal) X(vision) X(unpool) X(det) \
    X(control) X(loss) X(stateful) X(text) X(sequence) X(random) X(image)

#define SLIM__DECLARE_TABLE(name) extern const slim_op_def slim__ops_##name[];
SLIM__KERNEL_TABLES(SLIM__DECLARE_TABLE)
#undef SLIM__DECLARE_TABLE

static const slim_op_def *const tables[] = {
#define SLIM__LIST_TABLE(name) slim__ops_##name,
    SLIM__KERNEL_TABLES(SLIM__LIST_TABLE)
#undef SLIM__LIST_TABLE
};

static bool is_default_domain(const char *domain)
{
    return !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
}

/* slimserve's own operators: the partition pass's copies (partition.c)
 * and the int8 pass's quantized layers (cpu/qlinear.c). */
extern const slim_op_def slim__ops_copy[];
extern const slim_op_def slim__ops_int8[];
extern const slim_op_def slim__ops_sparse[]; /* the pruning pass's (cpu/sparse_op.c) */
extern const slim_op_def slim__ops_sparse_conv[]; /* and its SparseConv (cpu/sparse_conv_op.c) */
extern const slim_op_def slim__ops_half[]; /* the half-weights pass's (cpu/hlinear.c) */
extern const slim_op_def slim__ops_hconv[]; /* and its ConvHalf (cpu/hconv.c) */
/* the fuse_attention pass's (cpu/attention.c) */
extern const slim_op_def slim__ops_fused_attention[];
/* the fuse_add_layernorm pass's (cpu/add_layernorm.c) */
extern const slim_op_def slim__ops_add_layernorm[];
/* the fuse_matmul_bias pass's, for GPUs (cpu/matmul_bias.c) */
extern const slim_op_def slim__ops_matmul_bias[];
/* onnxruntime's contrib operators that quantized models carry
 * (cpu/quantize_ops.c). */
extern const slim_op_def slim__ops_microsoft[];
/* ai.onnx.ml operators on numbers (cpu/ml.c). */
extern const slim_op_def slim__ops_ml[];
/* ai.onnx.preview (cpu/flex_attention.c). */
extern const slim_op_def slim__ops_preview[];
/* the blocked_layout pass's MaxPool over nChw16c (cpu/pool_blocked.c) */
extern const slim_op_def slim__ops_pool_blocked[];
#ifdef SLIM_HAVE_DNNL
extern const slim_op_def slim__ops_fconv[]; /* the fuse_conv pass's (cpu/conv_dnnl.c) */
extern const slim_op_def slim__ops_fmm[];   /* the fuse_matmul pass's (cpu/matmul_dnnl.c) */
#endif

/* The com.slimserve tables after the copies, searched in this order. */
static const slim_op_def *const slimserve_tables[] = {
    slim__ops_int8, slim__ops_sparse, slim__ops_sparse_conv, slim__ops_half, slim__ops_hconv, slim__ops_pool_blocked,
    slim__ops_fused_attention, slim__ops_add_layernorm, slim__ops_matmul_bias,
#ifdef SLIM_HAVE_DNNL
    slim__ops_fconv, slim__ops_fmm,
#endif
};

const slim_op_def *slim_op_lookup(const char *domain, const char *op_type, int opset)
{
    if (domain && strcmp(domain, "com.slimserve") == 0) {
        for (const slim_op_def *d = slim__ops_copy; d->op_type; d++)
            if (strcmp(d->op_type, op_type) == 0)
                return d;
        for (size_t t = 0; t < sizeof(slimserve_tables) / sizeof(slimserve_tables[0]); t++)
            for (const slim_op_def *d = slimserve_tables[t]; d->op_type; d++)
                if (strcmp(d->op_type, op_type) == 0 && d->since <= opset)
                    return d;
        return NULL;
    }
    if (domain && strcmp(domain, "com.microsoft") == 0) {
        for (const slim_op_def *d = slim__ops_microsoft; d->op_type; d++)
            if (strcmp(d->op_type, op_type) == 0 && d->since <= opset)
                return d;
        return NULL;
    }
    if (domain && (strcmp(domain, "ai.onnx.ml") == 0 || strcmp(domain, "ai.onnx.preview") == 0)) {
        const slim_op_def *best = NULL;
        const slim_op_def *table = domain[8] == 'm' ? slim__ops_ml : slim__ops_preview;
        for (const slim_op_def *d = table; d->op_type; d++)
            if (strcmp(d->op_type, op_type) == 0 && d->since <= opset &&
                (!best || d->since > best->since))
                best = d;
        return best;
    }
    if (!is_default_domain(domain))
        return NULL;
    const slim_op_def *best = NULL;
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
        for (const slim_op_def *d = tables[t]; d->op_type; d++)
            if (strcmp(d->op_type, op_type) == 0 && d->since <= opset &&
                (!best || d->since > best->since))
                best = d;
    return best;
}

void slim_op_foreach(void (*fn)(const slim_op_def *def, void *user), void *user)
{
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
        for (const slim_op_def *d = tables[t]; d->op_type; d++)
            fn(d, user);
}
