/*
 * sparse_check.c - the checks of a sparse weight read from an untrusted
 * file, shared by SparseMatMul (sparse_op.c) and SparseConv
 * (sparse_conv_op.c): first its operands' dtypes and shapes against the
 * encoding and K (slim_sparse_operands, before a byte is read), then, once,
 * their contents (slim_sparse_check: row pointers, index ranges, scales).
 * One copy, so that a rule added for one op (a new index type, a limit)
 * cannot be missed by the other.
 */
#include "sparse.h"

#include <string.h>

slim_status slim_sparse_operands(slim_sparse_enc enc, int64_t k, const slim_tensor *v,
                                 const slim_tensor *ix, const slim_tensor *rp,
                                 const slim_tensor *bias, const slim_tensor *scale, char rows,
                                 bool half, slim_sparse_w *w, int64_t *nnz, slim_err *err)
{
    memset(w, 0, sizeof(*w));
    w->enc = enc;
    w->k = k;
    w->vdtype = v->dtype;
    w->values = v->data;
    w->idx = ix->data;
    w->idtype = ix->dtype;
    if (enc == SLIM_SPARSE_24) {
        int64_t g = slim_sparse_24_groups(k);
        if (rp)
            return slim_errf(err, SLIM_EINVAL, "2:4 takes no row pointers (input 3)");
        if (v->ndim != 2 || v->dims[0] < 1 || v->dims[1] != 2 * g)
            return slim_errf(err, SLIM_ESHAPE, "2:4 values must be [%c, %lld] for K = %lld",
                             rows, (long long)(2 * g), (long long)k);
        w->n = v->dims[0];
        if (ix->dtype != SLIM_U8 || ix->ndim != 2 || ix->dims[0] != w->n ||
            ix->dims[1] != slim_sparse_24_idx_bytes(k))
            return slim_errf(err, SLIM_ESHAPE, "2:4 indices must be uint8 [%lld, %lld]",
                             (long long)w->n, (long long)slim_sparse_24_idx_bytes(k));
        *nnz = w->n * 2 * g;
    } else {
        if (!rp || rp->dtype != SLIM_I32 || rp->ndim != 1 || rp->dims[0] < 2 ||
            rp->dims[0] - 1 > (1LL << 31))
            return slim_errf(err, SLIM_ESHAPE, "csr row pointers (input 3) must be int32 "
                             "[%c + 1]", rows);
        w->n = rp->dims[0] - 1;
        w->rowptr = rp->data;
        if (ix->dtype != slim_sparse_csr_idtype(k))
            return slim_errf(err, SLIM_ETYPE, "csr indices must be %s for K = %lld, not %s",
                             slim_dtype_name(slim_sparse_csr_idtype(k)), (long long)k,
                             slim_dtype_name(ix->dtype));
        if (v->ndim != 1 || ix->ndim != 1 || ix->dims[0] != v->dims[0] ||
            v->dims[0] >= (1LL << 31))
            return slim_errf(err, SLIM_ESHAPE, "csr values and indices must be 1-D of "
                             "the same length (below 2^31)");
        *nnz = v->dims[0];
    }
    bool bias_ok = bias && (bias->dtype == SLIM_F32 || (half && (bias->dtype == SLIM_F16 ||
                                                                   bias->dtype == SLIM_BF16)));
    if (bias && (!bias_ok || bias->ndim != 1 || bias->dims[0] != w->n))
        return slim_errf(err, SLIM_ESHAPE, "bias must be %s [%lld]", half ? "float" : "float32",
                         (long long)w->n);
    if (scale && (scale->dtype != SLIM_F32 || scale->ndim != 1 || scale->dims[0] != w->n))
        return slim_errf(err, SLIM_ESHAPE, "scale must be float32 [%lld]", (long long)w->n);
    w->scale = scale ? scale->data : NULL;
    return SLIM_OK;
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
