/*
 * det.c - Det: determinants of a batch of square matrices [..., M, M].
 *
 * LU decomposition with partial pivoting in double, whatever the element
 * type: the product of M pivots loses precision fast in float, and
 * matrices here are small (the op shows up in geometry heads and
 * normalizing flows, not in hot paths).
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>

static slim_status det_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    char a[128];
    slim_status s = slim_check_dtype(x, "X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (x->ndim < 2 || x->dims[x->ndim - 1] != x->dims[x->ndim - 2])
        return slim_errf(ctx->err, SLIM_ESHAPE, "X %s must be [..., M, M]",
                         slim_shape_str(x->ndim, x->dims, a, sizeof(a)));
    slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim - 2, x->dims);
    return SLIM_OK;
}

static double det_lu(double *m, int64_t n)
{
    double det = 1;
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < n; r++)
            if (fabs(m[r * n + c]) > fabs(m[p * n + c]))
                p = r;
        if (m[p * n + c] == 0)
            return 0;
        if (p != c) {
            for (int64_t k = 0; k < n; k++) {
                double t = m[c * n + k];
                m[c * n + k] = m[p * n + k];
                m[p * n + k] = t;
            }
            det = -det;
        }
        double piv = m[c * n + c];
        det *= piv;
        for (int64_t r = c + 1; r < n; r++) {
            double f = m[r * n + c] / piv;
            for (int64_t k = c + 1; k < n; k++)
                m[r * n + k] -= f * m[c * n + k];
        }
    }
    return det;
}

static slim_status det_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    const int64_t n = x->dims[x->ndim - 1], batch = slim_tensor_numel(y);
    double *m = slim_scratch_malloc(sizeof(double) * (size_t)(n * n > 0 ? n * n : 1));
    if (!m)
        return slim_scratch_oom(ctx->err);
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < n * n; i++)
            m[i] = slim_load_f64(x->dtype, x->data, b * n * n + i);
        slim_store_f64(y->dtype, y->data, b, det_lu(m, n));
    }
    slim_scratch_free(m);
    return SLIM_OK;
}

const slim_op_def slim__ops_det[] = {
    {"Det", 11, NULL, NULL, det_infer, det_exec, 0},
    {0},
};
