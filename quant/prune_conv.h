/*
 * prune_conv.h - what the pruning pass (prune.c) needs for Conv layers:
 * which convs are candidates, BatchNormalization folded into their weights
 * before pruning, the rewrite to com.slimserve SparseConv
 * (kernels/cpu/sparse_conv_op.c), and its epilogue (Relu, residual Add)
 * fused afterwards. Internal to quant/.
 *
 * A conv's weight [M][C/group][kh][kw] is pruned as M rows of
 * K = C/group * kh * kw (the [N][K] layout, like a Gemm transB weight), so
 * 2:4 groups and csr rows run along the flattened C/group x kh x kw axis
 * of each output channel.
 */
#ifndef SLIM_QUANT_PRUNE_CONV_H
#define SLIM_QUANT_PRUNE_CONV_H

#include "graph.h"

/* csr is used for a Conv up to this density (nonzeros / elements), and up
 * to the _SMALL one when the conv has at most SLIM_PRUNE_CONV_SMALL_M output
 * channels per group. From bench/bench_prune.py --conv-layers (batch 1, 2
 * threads, docs/prune.md): at 80% sparsity csr ran 0.72-0.93x the dense
 * (oneDNN) conv's time with 128 to 1024 output channels but 1.10x with 64
 * (a 64-channel 3x3 at 56x56: each pixel block's fixed costs, the partial
 * sums and the epilogue, weigh more against fewer entries); at 70% it ran
 * 1.05-1.43x, at 90% 0.36-0.61x. 2:4 ran 1.43-2.40x the dense time: it is
 * kept sparse for its bytes (0.53x), as for MatMul, and storage "dense"
 * trades them back for speed. */
#define SLIM_PRUNE_CONV_CSR_MAX_DENSITY 0.2
#define SLIM_PRUNE_CONV_CSR_MAX_DENSITY_SMALL 0.15
#define SLIM_PRUNE_CONV_SMALL_M 64
/* From a batch of SLIM_PRUNE_CONV_BATCH images, csr up to this density for
 * every conv: at batch 8 (slim bench, 2 threads, docs/prune.md) 80%
 * sparse ran 0.81-1.27x the dense time (1.27x for 64 channels at 56x56,
 * 0.93x for 128 at 28x28) where batch 1 gave 0.68-0.96x; 85% ran
 * 0.54-0.86x. The dense conv shares work across a batch, the sparse
 * kernel never does. */
#define SLIM_PRUNE_CONV_BATCH 8
#define SLIM_PRUNE_CONV_CSR_MAX_DENSITY_BATCH 0.15

/* Whether node n is a default-domain 2-D Conv with a constant float32
 * weight; fills M and K. *depthwise is set for group = C = M. */
bool slim__prune_conv_of(const slim_graph *g, const slim_node *n, int64_t *m, int64_t *k,
                         bool *depthwise);
/* Why a pruned conv cannot become SparseConv (auto_pad SAME, a bias that
 * is no constant [M]) or, in csr unless forced (storage "sparse"), is
 * faster dense (a 1x1 expansion feeding a depthwise conv), or NULL. */
const char *slim__prune_conv_why(const slim_graph *g, const slim_node *n, int64_t m,
                                 bool forced, bool two4);
/* The BatchNormalization (node index) that alone reads conv's output in
 * inference mode with constant float32 [M] parameters, when the conv's
 * weight (and bias) are read by the conv alone; else -1. */
int slim__prune_conv_bn(const slim_graph *g, int conv);
/* Folds BN into w (M rows of K, in place) and writes the folded bias [M]:
 * the products in double, rounded once, as passes/fold_bn.c does. */
void slim__prune_conv_fold(const slim_graph *g, const slim_node *conv, const slim_node *bn,
                           float *w, int64_t m, int64_t k, float *bias);
/* Makes conv a SparseConv(in[0..n_in)) writing out, with the conv's
 * geometry made explicit; forced (storage "sparse" asked for) is kept as
 * its attribute storage = "sparse". */
slim_status slim__prune_conv_rewrite(slim_graph *g, slim_node *conv, const char *enc, int64_t k,
                                     bool forced, int n_in, const int *in, int out,
                                     slim_err *err);
/* A conv kept dense whose BN (node bn) was folded into its pruned copy
 * (pruned, M x K, and the folded bias fbias [M]): it reads those as new
 * initializers and writes the BN's output, what passes/fold_bn.c would have
 * made, pruned. The BN is left for slim__prune_conv_finish to remove. */
slim_status slim__prune_conv_dense(slim_graph *g, int node, int bn, const float *pruned,
                                   const float *fbias, slim_err *err);
/* Why a pruned conv is stored sparse (for slim inspect --prune): forced,
 * 2:4 asked for, or its density under the break-even `most` at `batch`. */
void slim__prune_conv_why_sparse(char *buf, size_t cap, bool two4, int64_t nnz, int64_t m,
                                 int64_t k, double most, int64_t batch, bool forced);
/* Initializer v once no node reads it: its memory goes back now. */
void slim__prune_release_unread(slim_graph *g, int v);
/* After the pass: removes the folded BatchNormalizations (bn[0..n_bn),
 * node indices) and fuses into each SparseConv the residual Add and the
 * Relu that alone read its output. */
slim_status slim__prune_conv_finish(slim_graph *g, const int *bn, int n_bn, slim_err *err);

#endif
