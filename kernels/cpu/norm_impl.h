/*
 * norm_impl.h - the row helpers norm.c and softmax.c share: rows of any
 * float type gathered into doubles and scattered back, the float-type
 * check, and the tasks' grain.
 */
#ifndef SLIM_NORM_IMPL_H
#define SLIM_NORM_IMPL_H

#include "kernel.h"

/* dst[i] = element off + i * stride, widened to double. */
static inline void gather(slim_dtype dt, const void *base, int64_t off, int64_t stride, int64_t n,
                   double *dst)
{
    if (dt == SLIM_F32) {
        const float *p = (const float *)base + off;
        for (int64_t i = 0; i < n; i++)
            dst[i] = p[i * stride];
    } else if (dt == SLIM_F64) {
        const double *p = (const double *)base + off;
        for (int64_t i = 0; i < n; i++)
            dst[i] = p[i * stride];
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = slim_load_f64(dt, base, off + i * stride);
    }
}

static inline void scatter(slim_dtype dt, void *base, int64_t off, int64_t stride, int64_t n,
                    const double *src)
{
    if (dt == SLIM_F32) {
        float *p = (float *)base + off;
        for (int64_t i = 0; i < n; i++)
            p[i * stride] = (float)src[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            slim_store_f64(dt, base, off + i * stride, src[i]);
    }
}

static inline slim_status check_float(const slim_tensor *t, const char *what, slim_err *err)
{
    return slim_check_dtype(t, what, err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                            SLIM_DTYPE_UNDEFINED);
}

/* Tasks of at least ~32K elements. */
static inline int64_t grain_for(int64_t elems_per_unit)
{
    int64_t g = 32768 / (elems_per_unit > 0 ? elems_per_unit : 1);
    return g > 0 ? g : 1;
}

#endif
