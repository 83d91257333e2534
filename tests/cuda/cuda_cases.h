/*
 * cuda_cases.h - the cross-device op test: every op the CUDA device
 * implements, run on the GPU and on the CPU kernels, compared under a
 * stated tolerance (after ggml's test-backend-ops).
 *
 * A case builds a one-node graph and its inputs; the driver
 * (test_cuda_ops.c) builds it twice with the same seed, places one copy
 * on cuda:0 and keeps the other on the CPU, runs both and compares every
 * output: same dtype and shape, and |gpu - cpu| <= tol * (1 + |cpu|)
 * element by element (NaN only where the CPU has NaN). A float32 product
 * (MatMul, Gemm, MatMulBias, Conv) runs twice on the GPU: by default, on
 * TF32, within CC_TF32_TOL, and "fp32-strict" within tol. It also checks that
 * the node really ran on the GPU, unless the case says it may not.
 *
 *     static void build_add_f16(cc_builder *b)
 *     {
 *         cc_op(b, "Add", 14, 2, (const char *[]){"a", "b"}, 1);
 *         cc_randn(b, 0, SLIM_F16, 3, (int64_t[]){3, 1, 7});
 *         cc_randn(b, 1, SLIM_F16, 2, (int64_t[]){5, 7});
 *     }
 *     const cc_case cc_cases_elementwise[] = {
 *         {"Add f16 broadcast [3,1,7]+[5,7]", build_add_f16, 2e-3},
 *         {0},
 *     };
 *
 * Use odd sizes (7, 33, 1000+1), ranks 0..5, broadcasting, empty tensors,
 * and fp16 next to fp32. Each family file exports one table ended by {0};
 * test_cuda_ops.c lists the tables.
 */
#ifndef SLIM_CUDA_CASES_H
#define SLIM_CUDA_CASES_H

#include "graph.h"
#include "kernel.h"
#include "model.h"

#include <stdbool.h>
#include <stdint.h>

#define CC_MAX_IN 16

/* TF32 keeps fp16's 10 mantissa bits, so float32 products on TF32 are held
 * to the f16 cases' tolerance. Rounding the operands of a K-term product
 * of normal values so (NumPy, K = 16 to 96) came to at most 1.2e-2 of
 * 1 + |cpu| over 20 draws per shape. */
#define CC_TF32_TOL 2e-2

typedef struct cc_builder {
    slim_graph *g;
    int n_in;
    const char *in_names[CC_MAX_IN];
    slim_tensor in[CC_MAX_IN];   /* set by cc_randn & co. */
    bool weight[CC_MAX_IN];      /* becomes an initializer */
    uint64_t rng;
} cc_builder;

typedef struct cc_case {
    const char *name;
    void (*build)(cc_builder *b);
    double tol;
    bool cpu_ok;                 /* the node may stay on the CPU (not supported there) */
} cc_case;

typedef struct cc_rows_case {
    cc_case c;
    int64_t keep;                /* the leading items run again alone */
} cc_rows_case;

/* Makes the one node: inputs named in[] ("" or NULL: absent optional), n_out
 * outputs "y0".."yN". The node is named "node0". */
void cc_op(cc_builder *b, const char *op_type, int opset, int n_in, const char *const *in,
           int n_out);
slim_node *cc_node(cc_builder *b);

/* Attribute setters on the node. */
void cc_attr_i(cc_builder *b, const char *name, int64_t v);
void cc_attr_f(cc_builder *b, const char *name, float v);
void cc_attr_s(cc_builder *b, const char *name, const char *v);
void cc_attr_ints(cc_builder *b, const char *name, int n, const int64_t *v);
void cc_attr_floats(cc_builder *b, const char *name, int n, const float *v);

/* Input k's values: standard normal (floats; ints get -3..3), uniform in
 * [lo, hi) (floats; ints and bool rounded down), or exactly these ints
 * (I64/I32 shape-like operands: axes, shapes, indices). */
void cc_randn(cc_builder *b, int k, slim_dtype dt, int ndim, const int64_t *dims);
void cc_uniform(cc_builder *b, int k, slim_dtype dt, int ndim, const int64_t *dims, double lo,
                double hi);
void cc_ints(cc_builder *b, int k, slim_dtype dt, int ndim, const int64_t *dims,
             const int64_t *vals);
/* Input k becomes a constant initializer (a weight) instead of a graph input. */
void cc_weight(cc_builder *b, int k);

/* The tables. */
extern const cc_case cc_cases_elementwise[];
extern const cc_case cc_cases_norm[];
extern const cc_case cc_cases_reduce[];
extern const cc_case cc_cases_movement[];
extern const cc_case cc_cases_pool[];
extern const cc_case cc_cases_matmul[];
extern const cc_case cc_cases_conv[];
extern const cc_case cc_cases_attention[];
/* Row invariance (not in the op tables): in the executor's row-invariant
 * mode each case runs whole and with only the first `keep` items of its
 * graph inputs' leading dim; those items' outputs must match bitwise, and
 * the whole run must match the CPU within tol. */
extern const cc_rows_case cc_cases_rows[];
/* A convolution's rows case (cases_conv.c), listed in cc_cases_rows. */
void cc_build_conv_rows(cc_builder *b);
/* FusedAttention's rows case (cases_attention.c). */
void cc_build_attention_rows(cc_builder *b);
/* TF32 by default (not in the op tables): each case run on the GPU as
 * loaded "fp32" and "fp32-strict" must differ somewhere (TF32 is on),
 * the first within CC_TF32_TOL and the second within tol of the CPU. */
extern const cc_case cc_cases_tf32[];
void cc_build_conv_tf32(cc_builder *b);

#endif
