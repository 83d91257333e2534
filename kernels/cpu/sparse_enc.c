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
