/*
 * registry.c - operator lookup by (domain, op type, opset).
 *
 * Each kernel file exports one table; an op type may appear several times
 * with different `since` versions when its interface changed across opsets
 * (attribute became input, say). Lookup picks the highest since <= opset,
 * through the runtime's one mechanism (runtime/op_registry.h); slim_init
 * registers these tables as the process's operator contract.
 */
#include "kernel.h"
#include "op_registry.h"

#include <stddef.h>

#define SLIM__KERNEL_TABLES(X) \
    X(elementwise) X(cast) X(conv) X(pool) X(linalg) X(einsum) X(norm) X(softmax) X(reduce) \
    X(shape) X(movement) X(pad) X(gather) X(resize) X(rnn) X(quantize) X(qinteger) \
    X(lrn) X(attention) X(select) X(signal) X(vision) X(unpool) X(det) \
    X(control) X(loss) X(stateful) X(text) X(sequence) X(random) X(image) X(strings) \
    X(strings_text) X(strings_cast)

#define SLIM__DECLARE_TABLE(name) extern const slim_op_def slim__ops_##name[];
SLIM__KERNEL_TABLES(SLIM__DECLARE_TABLE)
#undef SLIM__DECLARE_TABLE

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
/* ai.onnx.ml operators on strings (cpu/strings_ml.c). */
extern const slim_op_def slim__ops_strings_ml[];
/* ai.onnx.preview (cpu/flex_attention.c). */
extern const slim_op_def slim__ops_preview[];
/* the blocked_layout pass's MaxPool over nChw16c (cpu/pool_blocked.c) */
extern const slim_op_def slim__ops_pool_blocked[];
#ifdef SLIM_HAVE_DNNL
extern const slim_op_def slim__ops_fconv[]; /* the fuse_conv pass's (cpu/conv_dnnl.c) */
extern const slim_op_def slim__ops_fmm[];   /* the fuse_matmul pass's (cpu/matmul_dnnl.c) */
#endif

/* Every CPU table under its domain; within one domain the highest since
 * <= the opset wins, the first in this order on a tie (op_registry.h). */
static const slim_op_table cpu_tables[] = {
#define SLIM__LIST_TABLE(name) SLIM_OP_TABLE("", slim__ops_##name),
    SLIM__KERNEL_TABLES(SLIM__LIST_TABLE)
#undef SLIM__LIST_TABLE
    /* The partition pass's copies have one version, whatever the opset. */
    {"com.slimserve", slim__ops_copy, sizeof(slim_op_def), true},
    SLIM_OP_TABLE("com.slimserve", slim__ops_int8),
    SLIM_OP_TABLE("com.slimserve", slim__ops_sparse),
    SLIM_OP_TABLE("com.slimserve", slim__ops_sparse_conv),
    SLIM_OP_TABLE("com.slimserve", slim__ops_half),
    SLIM_OP_TABLE("com.slimserve", slim__ops_hconv),
    SLIM_OP_TABLE("com.slimserve", slim__ops_pool_blocked),
    SLIM_OP_TABLE("com.slimserve", slim__ops_fused_attention),
    SLIM_OP_TABLE("com.slimserve", slim__ops_add_layernorm),
    SLIM_OP_TABLE("com.slimserve", slim__ops_matmul_bias),
#ifdef SLIM_HAVE_DNNL
    SLIM_OP_TABLE("com.slimserve", slim__ops_fconv),
    SLIM_OP_TABLE("com.slimserve", slim__ops_fmm),
#endif
    SLIM_OP_TABLE("com.microsoft", slim__ops_microsoft),
    SLIM_OP_TABLE("ai.onnx.ml", slim__ops_ml),
    SLIM_OP_TABLE("ai.onnx.ml", slim__ops_strings_ml),
    SLIM_OP_TABLE("ai.onnx.preview", slim__ops_preview),
};

_Static_assert(SLIM_OP_KEY_LAYOUT_OK(slim_op_def), "slim_op_def must start as slim_op_key");

const slim_op_table *slim_cpu_op_tables(size_t *n)
{
    *n = sizeof(cpu_tables) / sizeof(cpu_tables[0]);
    return cpu_tables;
}

const slim_op_def *slim_op_lookup(const char *domain, const char *op_type, int opset)
{
    return slim_op_tables_find(cpu_tables, sizeof(cpu_tables) / sizeof(cpu_tables[0]), domain,
                               op_type, opset);
}

typedef struct {
    void (*fn)(const slim_op_def *def, void *user);
    void *user;
} foreach_job;

static void foreach_entry(const void *entry, void *user)
{
    foreach_job *j = user;
    j->fn(entry, j->user);
}

/* The default domain's operators, as before the tables had domains. */
void slim_op_foreach(void (*fn)(const slim_op_def *def, void *user), void *user)
{
    foreach_job j = {fn, user};
    slim_op_tables_foreach(cpu_tables, sizeof(cpu_tables) / sizeof(cpu_tables[0]), "",
                           foreach_entry, &j);
}
