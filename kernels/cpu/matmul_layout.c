/* matmul_layout.c - FusedMatMul's packed layouts, described and undone
 * (see matmul_layout.h). */
#include "matmul_layout.h"

#include <string.h>

enum { D_PAD = 0, D_STRIDE = 2, D_NBLKS = 4, D_BLK = 5, D_IDX = 9, D_FLOATS = 13 };

#define DIM_MAX ((int64_t)1 << 31)
#define SPAN_MAX ((int64_t)1 << 40)

slim_status slim_fmm_desc_check(const int64_t *d, int64_t k, int64_t np, slim_err *err)
{
    int64_t ext[2] = {k, np}, inner[2] = {1, 1};
    int64_t nblks = d[D_NBLKS];
    if (nblks < 0 || nblks > 4)
        return slim_errf(err, SLIM_EINVAL, "%lld inner blocks (0 to 4)", (long long)nblks);
    int64_t block = 1;
    for (int b = 0; b < 4; b++) {
        int64_t sz = d[D_BLK + b], ix = d[D_IDX + b];
        if (b >= nblks) {
            if (sz || ix)
                return slim_errf(err, SLIM_EINVAL, "unused block %d is not 0", b);
            continue;
        }
        if (sz < 1 || sz > 1024 || (ix != 0 && ix != 1))
            return slim_errf(err, SLIM_EINVAL, "block %d: size %lld of dim %lld", b,
                             (long long)sz, (long long)ix);
        inner[ix] *= sz;
        block *= sz;
    }
    if (block > (1 << 20))
        return slim_errf(err, SLIM_EINVAL, "inner blocks of %lld elements", (long long)block);
    int64_t last = block - 1; /* the largest offset, built up below */
    for (int i = 0; i < 2; i++) {
        int64_t pad = d[D_PAD + i], stride = d[D_STRIDE + i];
        if (pad < ext[i] || pad > DIM_MAX || pad % inner[i])
            return slim_errf(err, SLIM_EINVAL, "dim %d padded to %lld for %lld (blocks of %lld)",
                             i, (long long)pad, (long long)ext[i], (long long)inner[i]);
        if (stride < 0 || stride > SPAN_MAX)
            return slim_errf(err, SLIM_EINVAL, "dim %d stride %lld", i, (long long)stride);
        last += (pad / inner[i] - 1) * stride;
        if (last > SPAN_MAX)
            return slim_errf(err, SLIM_EINVAL, "the layout spans over 2^40 elements");
    }
    if (d[D_FLOATS] < 1 || d[D_FLOATS] > SPAN_MAX || last >= d[D_FLOATS])
        return slim_errf(err, SLIM_EINVAL, "offsets reach %lld of a part of %lld floats",
                         (long long)last, (long long)d[D_FLOATS]);
    return SLIM_OK;
}

int64_t slim_fmm_desc_offset(const int64_t *d, int64_t kk, int64_t j)
{
    int64_t at[2] = {kk, j}, inner[2] = {1, 1};
    int64_t nblks = d[D_NBLKS];
    for (int b = 0; b < nblks; b++)
        inner[d[D_IDX + b]] *= d[D_BLK + b];
    int64_t off = (at[0] / inner[0]) * d[D_STRIDE] + (at[1] / inner[1]) * d[D_STRIDE + 1];
    /* Inside the dense inner block: the innermost block varies fastest; a
     * dim blocked twice (4i16o4i) takes its inner digit first. */
    int64_t rem[2] = {at[0] % inner[0], at[1] % inner[1]}, scale = 1, in = 0;
    for (int64_t b = nblks - 1; b >= 0; b--) {
        int64_t ix = d[D_IDX + b], sz = d[D_BLK + b];
        in += (rem[ix] % sz) * scale;
        rem[ix] /= sz;
        scale *= sz;
    }
    return off + in;
}

slim_status slim_fmm_layout_check(const int64_t *parts, int n_bounds, const int64_t *layout,
                                  int n_layout, int64_t k, int64_t n, int64_t packed_floats,
                                  int *n_parts, slim_err *err)
{
    int p_count = n_bounds - 1;
    if (p_count < 1 || p_count > SLIM_FMM_MAX_PARTS)
        return slim_errf(err, SLIM_EINVAL, "%d column parts (1 to %d)", p_count,
                         SLIM_FMM_MAX_PARTS);
    if (n_layout != p_count * SLIM_FMM_DESC)
        return slim_errf(err, SLIM_EINVAL, "layout has %d values for %d parts (%d each)",
                         n_layout, p_count, SLIM_FMM_DESC);
    if (parts[0] != 0 || parts[p_count] != n)
        return slim_errf(err, SLIM_EINVAL, "parts run from %lld to %lld, not 0 to N = %lld",
                         (long long)parts[0], (long long)parts[p_count], (long long)n);
    int64_t total = 0;
    for (int p = 0; p < p_count; p++) {
        if (parts[p + 1] <= parts[p])
            return slim_errf(err, SLIM_EINVAL, "part %d is empty or reversed", p);
        slim_status st = slim_fmm_desc_check(layout + p * SLIM_FMM_DESC, k, parts[p + 1] - parts[p],
                                             err);
        if (st)
            return slim_err_prefix(err, "part %d: ", p);
        total += layout[p * SLIM_FMM_DESC + D_FLOATS];
        if (total > SPAN_MAX)
            return slim_errf(err, SLIM_EINVAL, "the parts hold over 2^40 floats");
    }
    if (total != packed_floats)
        return slim_errf(err, SLIM_EINVAL, "the layout holds %lld floats, the weight %lld",
                         (long long)total, (long long)packed_floats);
    *n_parts = p_count;
    return SLIM_OK;
}

void slim_fmm_unpack(const float *packed, const int64_t *parts, int n_parts,
                     const int64_t *layout, int64_t k, int64_t n, float *w)
{
    for (int p = 0; p < n_parts; p++) {
        const int64_t *d = layout + p * SLIM_FMM_DESC;
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t j = parts[p]; j < parts[p + 1]; j++)
                w[kk * n + j] = packed[slim_fmm_desc_offset(d, kk, j - parts[p])];
        packed += d[D_FLOATS];
    }
}
