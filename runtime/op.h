/*
 * op.h - the operator contract: what the runtime asks of an operator,
 * whichever device runs it.
 *
 * An operator is a slim_op_def: a type name, the lowest opset version it
 * implements (the registry picks the def with the highest `since` that is <=
 * the model's opset, op_registry.h), and up to four functions:
 *
 *   prepare(node, &state, err)  at load: parse and validate attributes once;
 *                               optional. State is read-only afterwards.
 *   release(state)              frees what prepare made; optional.
 *   infer(ctx)                  sets every present output's dtype, ndim and
 *                               dims from the inputs. Input data may be NULL
 *                               while planning; an op whose output shape
 *                               depends on an input's values returns
 *                               SLIM_ENEEDVALUE then. Checks dtypes and
 *                               shapes and reports mistakes via ctx->err.
 *   exec(ctx)                   computes outputs into buffers the executor
 *                               allocated from the shapes infer gave; the
 *                               CPU backend calls it (kernels/cpu/backend.c).
 *
 * Messages need not name the node: the executor prefixes that. The defs
 * are the CPU's kernels (kernels/), registered at start-up by slim_init
 * (pipeline/slim_init.h); infer and prepare serve every device, since
 * shape inference is the same everywhere.
 */
#ifndef SLIM_OP_H
#define SLIM_OP_H

#include "graph.h"

typedef struct slim_op_ctx {
    const slim_node *node;
    const void *state;     /* from prepare, or NULL */
    int n_in;
    const slim_tensor *const *in; /* in[i] NULL when an optional input is absent */
    int n_out;
    slim_tensor *const *out;      /* out[i] NULL when the output is unused */
    slim_err *err;
    /* The running model's modes, set by the executor; each backend
     * applies them for its kernels (the CPU's through the thread-local
     * that slim_sgemm_rows reads). row_invariant: a batch row's
     * result must not depend on the other rows (models that batch, see
     * slim_model_set_batch_invariant). fp32_strict: float32 products in
     * float32, not TF32 (precision "fp32-strict"; the CPU ignores it). */
    bool row_invariant;
    bool fp32_strict;
} slim_op_ctx;

enum {
    /* exec reads only input shapes, never data (Shape, Size): the planner
     * may run it with no data present. */
    SLIM_OP_SHAPE_ONLY = 1u << 0,
    /* output 0 is input 0's data with a new shape (Reshape, Squeeze, ...):
     * the executor shares the buffer and does not call exec. */
    SLIM_OP_ALIAS0 = 1u << 1,
    /* exec stays correct when out[0]->data == in[0]->data with equal byte
     * size, because each output element is computed only from input
     * elements at the same index before anything else is written: the
     * planner may then write output 0 over input 0 when that input is read
     * for the last time (plan.h). */
    SLIM_OP_INPLACE0 = 1u << 2,
    /* The copies the partition pass inserts (partition.c): the executor
     * moves input 0 to the node's device (H2D) or back to the host (D2H). */
    SLIM_OP_COPY_H2D = 1u << 3,
    SLIM_OP_COPY_D2H = 1u << 4,
    /* Control flow (If, Loop, Scan): output shapes are known only once a
     * subgraph has run, so the executor skips infer and allocation and
     * exec sets each present output's shape and storage itself (a tensor
     * with its own buffer). infer returns SLIM_ENEEDVALUE while planning. */
    SLIM_OP_OWN_OUTPUTS = 1u << 5,
    /* Inputs may be sequences or optionals (runtime/container.h), which
     * the executor refuses to every other op. An ALIAS0 op with this flag
     * (Identity) passes a container on by reference. */
    SLIM_OP_CONTAINERS = 1u << 6,
    /* Takes or makes string tensors (SLIM_STRING): reads elements with
     * slim_tensor_string_get, writes them with slim_tensor_string_set or
     * copies whole slim_str slots from an input. Every other op is refused
     * string tensors, except those that only move whole elements
     * (slim__op_takes_strings, runtime/string_tensor.c, lists them). */
    SLIM_OP_STRINGS = 1u << 7,
    /* As SLIM_OP_INPLACE0 for input 3 (FusedConv's residual, which each
     * output element adds at its own index): the planner may write output
     * 0 over input 3 when that input is read for the last time there. An
     * op has at most one of the two. */
    SLIM_OP_INPLACE3 = 1u << 8,
};

typedef struct slim_op_def {
    const char *op_type;
    int since;
    slim_status (*prepare)(slim_node *node, void **state, slim_err *err);
    void (*release)(void *state);
    slim_status (*infer)(slim_op_ctx *ctx);
    slim_status (*exec)(slim_op_ctx *ctx);
    unsigned flags;
} slim_op_def;

/* The device a node's outputs live on: its own (NULL for the CPU, see
 * slim_node_device in device.h), except a copy back to the host. */
static inline struct slim_device *slim_node_out_device(const slim_node *n)
{
    return n->op && (n->op->flags & SLIM_OP_COPY_D2H) ? NULL : n->device;
}

#endif
