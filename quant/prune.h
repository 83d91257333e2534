/*
 * prune.h - the pruning pass: MatMul and Gemm weights lose their smallest
 * entries and, where that pays, are stored and run sparse.
 *
 *     slim_graph *g;                          (loaded, not yet finalized)
 *     slim_prune_opts o = {.method = "magnitude", .amount = 0.9};
 *     slim_prune_report rep;
 *     slim_prune(g, &o, &rep, &err);          then int8 / half, then finalize
 *     ...
 *     slim_prune_report_free(&rep);
 *
 * Candidates: MatMul, and Gemm with transA 0, whose weight (input 1) is a
 * constant 2-D float32 initializer, filtered by o->ops (op types or node
 * names) when given. Methods:
 *
 *   magnitude  the round(amount x count) smallest |w| become 0, per layer
 *              or over all candidates at once (global); ties go in index
 *              order, so the count is exact.
 *   2:4        each group of 4 consecutive weights along K (the reduction
 *              axis) keeps its 2 largest |w| (the lower index on ties); a
 *              tail group of K % 4 = 3 keeps 2, of 1 or 2 keeps all.
 *   mask       a .npz of initializer name -> 0/1 array of its shape (bool,
 *              integer or float); 0 zeroes the weight. A mask on an
 *              initializer that no candidate reads (a Conv weight, an
 *              embedding) zeroes it too, stored dense (the report says so).
 *
 * Storage: a pruned layer becomes com.slimserve SparseMatMul (kernels/
 * sparse.h: csr, or 2:4 for the 2:4 method) when that takes fewer bytes and
 * the density is under the measured break-even of the kernel against the
 * dense product (docs/prune.md); otherwise its zeros stay dense, with the
 * reason in the report. Gemm's alpha is folded into the values and beta x C
 * into a bias. The float weight is released once nothing reads it.
 */
#ifndef SLIM_QUANT_PRUNE_H
#define SLIM_QUANT_PRUNE_H

#include "graph.h"

typedef struct slim_prune_layer {
    char *name;                  /* the node (or the initializer, for a mask on no layer) */
    char *op_type;               /* as it was: MatMul, Gemm; "" for a mask on no layer */
    char *weight;                /* the initializer pruned */
    int64_t k, n;                /* reduction and output sizes ([numel, 1] for no layer) */
    double sparsity;             /* zeros / elements after pruning */
    const char *storage;         /* "csr", "2:4" or "dense" */
    char why[160];               /* dense: why; empty otherwise (a Conv: why sparse) */
    size_t bytes_before, bytes_after; /* weight (and bias) as float32 */
} slim_prune_layer;

typedef struct slim_prune_report {
    const char *method;
    int n_layers;
    slim_prune_layer *layers;
    int64_t zeros, elements;     /* over all pruned weights */
    size_t bytes_before, bytes_after;
} slim_prune_report;

/* Validates the options (method, amount, storage): EINVAL naming the field. */
slim_status slim_prune_check_opts(const slim_prune_opts *o, slim_err *err);
/* rep may be NULL. Nothing to do when o is NULL or its method empty. */
slim_status slim_prune(slim_graph *g, const slim_prune_opts *o, slim_prune_report *rep,
                       slim_err *err);
void slim_prune_report_free(slim_prune_report *rep);

/* From bench/bench_prune.py on the BERT-base shapes (docs/prune.md): the
 * csr kernel ran 0.47-0.71x the dense product's time at 75% sparsity and
 * 1.13-1.62x at 50%, so csr is used up to a density (nonzeros / elements)
 * of 0.3; denser layers keep their zeros dense. 2:4 ran 0.98-1.51x the
 * dense time: it is kept sparse for its bytes (0.53x in fp32, 0.56x in half),
 * which is what asking for 2:4 asks for; storage "dense" trades them back
 * for speed. */
#define SLIM_PRUNE_CSR_MAX_DENSITY 0.3
/* The same by expected rows (batch x a known sequence length; docs/prune.md
 * "Sparse only where it pays", slim bench on 768 x 3072 and 3072 x 768):
 * at density 0.3 csr ran 0.87-1.07x the dense time at 1 to 8 rows and
 * 0.80-0.82x at 64, at 0.4 1.05-1.32x; at 128 and 1024 rows 0.47-0.71x at
 * 0.25 and 1.13-1.62x at 0.5. So under 16 rows csr is used up to 0.25,
 * from 64 rows up to 0.35, between (and for unknown rows) up to 0.3. */
#define SLIM_PRUNE_CSR_MAX_DENSITY_FEW 0.25
#define SLIM_PRUNE_CSR_MAX_DENSITY_MANY 0.35

/* The rows layer n's product is expected to see at this batch (opts
 * batch; 0 counts as 1): batch times X's declared leading dims after the
 * first, -1 when one of those is unknown (a sequence). */
int64_t slim_prune_rows(const slim_graph *g, const slim_node *n, int64_t batch);
/* The density (nonzeros / elements) up to which csr pays for layer n (a
 * Conv of m output channels when conv, else a MatMul / Gemm) at the
 * expected batch: the measured break-evens above and in prune_conv.h. */
double slim_prune_max_density(const slim_graph *g, const slim_node *n, bool conv, int64_t m,
                              int64_t batch);

/* Prunes w in place (n x k as laid out: [K][N], or [N][K] with w_nk) to
 * 2:4 along K; the unit tests check its pattern. */
void slim_prune_24(float *w, int64_t n, int64_t k, bool w_nk);
/* Zeroes exactly `count` of the smallest |w| over the given arrays taken
 * together (index order on ties, arrays in order). */
slim_status slim_prune_smallest(float *const *w, const int64_t *len, int n_arrays,
                                int64_t count, slim_err *err);

#endif
