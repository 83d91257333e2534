/*
 * sparse_enc.c - sparse weights' encodings (see sparse.h): their sizes, the
 * csr and 2:4 encoders the pruning pass (quant/prune.c) stores with, and
 * the check of an encoding read from an untrusted file. The products are in
 * sparse.c.
 */
#include "sparse.h"

#include <string.h>

size_t slim_sparse_csr_bytes(int64_t n, int64_t k, int64_t nnz, size_t value_size)
{
    return (size_t)nnz * (value_size + slim_dtype_size(slim_sparse_csr_idtype(k))) +
           4 * (size_t)(n + 1);
}

size_t slim_sparse_24_bytes(int64_t n, int64_t k, size_t value_size)
{
    return (size_t)n * (2 * (size_t)slim_sparse_24_groups(k) * value_size +
                        (size_t)slim_sparse_24_idx_bytes(k));
}

static inline float w_at(const float *w, int64_t n, int64_t k, bool w_nk, int64_t j, int64_t kk)
{
    return w_nk ? w[j * k + kk] : w[kk * n + j];
}

int64_t slim_sparse_count_nnz(const float *w, int64_t n, int64_t k, bool w_nk)
{
    int64_t nnz = 0, total = n * k;
    (void)w_nk; /* the count does not depend on the layout */
    for (int64_t i = 0; i < total; i++)
        nnz += w[i] != 0.0f;
    return nnz;
}

void slim_sparse_csr_encode(const float *w, int64_t n, int64_t k, bool w_nk, float alpha,
                            float *values, void *idx, int32_t *rowptr)
{
    bool narrow = slim_sparse_csr_idtype(k) == SLIM_U16;
    int64_t p = 0;
    rowptr[0] = 0;
    for (int64_t j = 0; j < n; j++) {
        for (int64_t kk = 0; kk < k; kk++) {
            float v = w_at(w, n, k, w_nk, j, kk);
            if (v == 0.0f)
                continue;
            values[p] = v * alpha;
            if (narrow)
                ((uint16_t *)idx)[p] = (uint16_t)kk; /* k <= 65536: kk < 65536 */
            else
                ((int32_t *)idx)[p] = (int32_t)kk;
            p++;
        }
        rowptr[j + 1] = (int32_t)p;
    }
}

bool slim_sparse_24_encode(const float *w, int64_t n, int64_t k, bool w_nk, float alpha,
                           float *values, uint8_t *idx)
{
    int64_t groups = slim_sparse_24_groups(k), ib = slim_sparse_24_idx_bytes(k);
    for (int64_t j = 0; j < n; j++) {
        float *v = values + j * 2 * groups;
        uint8_t *ix = idx + j * ib;
        memset(ix, 0, (size_t)ib);
        for (int64_t g = 0; g < groups; g++) {
            int width = k - 4 * g < 4 ? (int)(k - 4 * g) : 4, found = 0;
            int pos[2] = {0, 0};
            float val[2] = {0.0f, 0.0f};
            for (int q = 0; q < width; q++) {
                float x = w_at(w, n, k, w_nk, j, 4 * g + q);
                if (x == 0.0f)
                    continue;
                if (found == 2)
                    return false;
                pos[found] = q;
                val[found++] = x * alpha;
            }
            /* Fewer than 2 nonzeros: the spare slots hold 0 at valid
             * positions, kept in increasing order where the width allows. */
            if (found == 0 && width > 1)
                pos[1] = 1;
            else if (found == 1)
                pos[1] = pos[0] + 1 < width ? pos[0] + 1 : pos[0];
            v[2 * g] = val[0];
            v[2 * g + 1] = val[1];
            ix[g / 2] |= (uint8_t)((pos[0] | pos[1] << 2) << (4 * (g & 1)));
        }
    }
    return true;
}

slim_status slim_sparse_check(const slim_sparse_w *w, int64_t nnz, slim_err *err)
{
    if (w->n < 1 || w->k < 1)
        return slim_errf(err, SLIM_ESHAPE, "sparse weight of %lld x %lld", (long long)w->k,
                         (long long)w->n);
    if (w->vdtype != SLIM_F32 && w->vdtype != SLIM_F16 && w->vdtype != SLIM_BF16 &&
        w->vdtype != SLIM_I8)
        return slim_errf(err, SLIM_ETYPE, "sparse values must be float32, float16, bfloat16 "
                         "or int8, not %s", slim_dtype_name(w->vdtype));
    if ((w->vdtype == SLIM_I8) != (w->scale != NULL))
        return slim_errf(err, SLIM_EINVAL, "int8 sparse values need their per-channel scales, "
                         "and only they take scales");
    /* A scale that is not finite would make every output of its channel
     * NaN or infinite: a forged file, refused. */
    for (int64_t j = 0; w->scale && j < w->n; j++)
        if (!(w->scale[j] == w->scale[j]) || w->scale[j] - w->scale[j] != 0.0f)
            return slim_errf(err, SLIM_EINVAL, "int8 sparse scale of channel %lld is not finite",
                             (long long)j);
    if (w->enc == SLIM_SPARSE_24) {
        int64_t groups = slim_sparse_24_groups(w->k), ib = slim_sparse_24_idx_bytes(w->k);
        if (nnz != w->n * 2 * groups)
            return slim_errf(err, SLIM_ESHAPE, "2:4 values hold %lld entries, %lld expected for "
                             "%lld channels of K = %lld", (long long)nnz,
                             (long long)(w->n * 2 * groups), (long long)w->n, (long long)w->k);
        int tail = (int)(w->k - 4 * (groups - 1));
        if (tail == 4)
            return SLIM_OK; /* every 2-bit code is a valid position */
        const uint8_t *ix = w->idx;
        int64_t g = groups - 1;
        for (int64_t j = 0; j < w->n; j++) {
            int nib = ix[j * ib + g / 2] >> (4 * (g & 1)) & 15;
            if ((nib & 3) >= tail || (nib >> 2) >= tail)
                return slim_errf(err, SLIM_EINVAL, "2:4 channel %lld: a position in the last "
                                 "group is past K = %lld", (long long)j, (long long)w->k);
        }
        return SLIM_OK;
    }
    if (w->idtype != slim_sparse_csr_idtype(w->k))
        return slim_errf(err, SLIM_ETYPE, "csr indices must be %s for K = %lld, not %s",
                         slim_dtype_name(slim_sparse_csr_idtype(w->k)), (long long)w->k,
                         slim_dtype_name(w->idtype));
    if (w->rowptr[0] != 0 || w->rowptr[w->n] != nnz)
        return slim_errf(err, SLIM_EINVAL, "csr row pointers run from %d to %d, expected 0 to "
                         "%lld", w->rowptr[0], w->rowptr[w->n], (long long)nnz);
    for (int64_t j = 0; j < w->n; j++) {
        int64_t prev = -1;
        if (w->rowptr[j + 1] < w->rowptr[j])
            return slim_errf(err, SLIM_EINVAL, "csr row pointers decrease at channel %lld",
                             (long long)j);
        for (int64_t p = w->rowptr[j]; p < w->rowptr[j + 1]; p++) {
            int64_t c = w->idtype == SLIM_U16 ? ((const uint16_t *)w->idx)[p]
                                              : ((const int32_t *)w->idx)[p];
            /* Strictly increasing: no channel has more than K entries,
             * which is what the kernels size their scratch by. */
            if (c <= prev || c >= w->k)
                return slim_errf(err, SLIM_EINVAL, "csr channel %lld: index %lld is out of "
                                 "order or not below K = %lld", (long long)j, (long long)c,
                                 (long long)w->k);
            prev = c;
        }
    }
    return SLIM_OK;
}
