/*
 * transpose_plan.h - a Transpose reduced to its simplest equivalent copy,
 * for movement.cu (plain C, so the host tests can check it without a GPU).
 *
 *     slim_transpose_plan p;
 *     slim_transpose_plan_make(x->ndim, x->dims, perm, es, align, &p);
 *
 * The plan reads like the original: output element i (row-major over
 * p.dims) is input element sum(idx[d] * p.strides[d]), elements p.es bytes
 * wide. Making it:
 *   - drops axes of size 1, which move nothing;
 *   - merges output axes that are also neighbours, in the same order, in
 *     the input ([B,S,12,64] by [0,2,3,1] is [B, 768, S]: the 12 and the 64
 *     travel together);
 *   - widens the elements when the last output axis is the input's
 *     innermost run: 64 fp16 values moved as 8 16-byte ones, when the run's
 *     bytes and both buffers' alignment allow.
 * What is left is a plain copy (one axis, stride 1), a gather whose last
 * axis is contiguous, a batch of 2-D transposes (the second-to-last axis is
 * the input's contiguous one; movement.cu tiles those), or a general gather.
 */
#ifndef SLIM_CUDA_TRANSPOSE_PLAN_H
#define SLIM_CUDA_TRANSPOSE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define SLIM_TRANSPOSE_MAX_DIMS 8

typedef struct slim_transpose_plan {
    int ndim;                                   /* at least 1 */
    int64_t dims[SLIM_TRANSPOSE_MAX_DIMS];      /* output dims */
    int64_t strides[SLIM_TRANSPOSE_MAX_DIMS];   /* input stride of each, in elements */
    size_t es;                                  /* bytes per element moved */
    int64_t n;                                  /* elements moved */
} slim_transpose_plan;

/* ndim input dims and the permutation (output axis d is input axis
 * perm[d]); es the element size; align a power of two both buffers'
 * addresses are multiples of (16 or more allows the widest moves). */
static inline void slim_transpose_plan_make(int ndim, const int64_t *in_dims, const int64_t *perm,
                                            size_t es, size_t align, slim_transpose_plan *p)
{
    int64_t in_str[SLIM_TRANSPOSE_MAX_DIMS], s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        in_str[d] = s;
        s *= in_dims[d];
    }
    p->ndim = 0;
    p->es = es;
    for (int d = 0; d < ndim; d++) {
        int64_t dim = in_dims[perm[d]], str = in_str[perm[d]];
        if (dim == 1)
            continue;
        int last = p->ndim - 1;
        if (last >= 0 && p->strides[last] == str * dim) {
            p->dims[last] *= dim;   /* the two are one run of the input */
            p->strides[last] = str;
        } else {
            p->dims[p->ndim] = dim;
            p->strides[p->ndim++] = str;
        }
    }
    if (p->ndim == 0) {
        p->ndim = 1;
        p->dims[0] = 1;
        p->strides[0] = 1;
    }
    p->n = 1;
    for (int d = 0; d < p->ndim; d++)
        p->n *= p->dims[d];
    int last = p->ndim - 1;
    if (p->strides[last] != 1 || p->n == 0)
        return;
    for (size_t w = 16; w > es; w /= 2) {
        int64_t f = (int64_t)(w / es);
        if (w % es || align % w || p->dims[last] % f)
            continue;
        int ok = 1;
        for (int d = 0; d < last; d++)
            ok &= p->strides[d] % f == 0;
        if (!ok)
            continue;
        p->dims[last] /= f;
        for (int d = 0; d < last; d++)
            p->strides[d] /= f;
        p->es = w;
        p->n /= f;
        return;
    }
}

#endif
