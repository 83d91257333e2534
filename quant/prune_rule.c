/*
 * prune_rule.c - how dense a pruned layer may be and still run csr faster
 * than dense: the measured break-even density by layer kind, shape and
 * expected row count (prune.h, docs/prune.md "Sparse only where it pays").
 *
 * Why the row count matters: the dense kernels get more efficient per row
 * as rows grow (a GEMM reuses each weight from registers across rows, a
 * GEMV at 1-8 rows streams the weight once per call), while csr costs the
 * same per entry and row whatever the batch; for convs the dense (oneDNN)
 * conv gains from a batch of images while the sparse kernel never shares
 * work between images. So the break-even moves with the rows, and each
 * layer is decided at the rows the load expects (opts->batch: config
 * max_batch_size, slim run's batch 1).
 */
#include "prune.h"
#include "prune_conv.h"

#include <string.h>

/* A MatMul's rows per image: the product of X's declared leading dims
 * after the first (the batch); -1 when one is unknown or symbolic (a
 * sequence of any length), 1 for a 2-D X. */
static int64_t rows_per_item(const slim_graph *g, const slim_node *n)
{
    int x = n->n_in > 0 ? n->in[0] : -1;
    if (x < 0)
        return -1;
    const slim_io_info *info = &g->values[x].info;
    if (info->ndim < 2)
        return -1;
    int64_t r = 1;
    for (int d = 1; d < info->ndim - 1; d++) {
        if (info->dims[d] <= 0 || info->dim_names[d])
            return -1;
        r *= info->dims[d];
    }
    return r;
}

int64_t slim_prune_rows(const slim_graph *g, const slim_node *n, int64_t batch)
{
    int64_t per = rows_per_item(g, n), b = batch > 0 ? batch : 1;
    return per < 0 ? -1 : per * b;
}

double slim_prune_max_density(const slim_graph *g, const slim_node *n, bool conv, int64_t m,
                              int64_t batch)
{
    if (conv) {
        if (batch >= SLIM_PRUNE_CONV_BATCH)
            return SLIM_PRUNE_CONV_CSR_MAX_DENSITY_BATCH;
        int64_t group = slim_attr_int(n, "group", 1);
        return m / (group > 0 ? group : 1) <= SLIM_PRUNE_CONV_SMALL_M
                   ? SLIM_PRUNE_CONV_CSR_MAX_DENSITY_SMALL
                   : SLIM_PRUNE_CONV_CSR_MAX_DENSITY;
    }
    int64_t rows = slim_prune_rows(g, n, batch);
    if (rows < 0)
        return SLIM_PRUNE_CSR_MAX_DENSITY; /* unknown: the 128-row figure */
    return rows < 16 ? SLIM_PRUNE_CSR_MAX_DENSITY_FEW
           : rows < 64 ? SLIM_PRUNE_CSR_MAX_DENSITY
                       : SLIM_PRUNE_CSR_MAX_DENSITY_MANY;
}
