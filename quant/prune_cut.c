/*
 * prune_cut.c - magnitude pruning's primitives (prune.h, prune_cut.h): the
 * cut that zeroes the smallest |w| over one or many arrays, and 2:4.
 *
 * The magnitude threshold is found by a two-level radix histogram of the
 * |w| bit patterns (for non-negative floats their order as integers is their
 * order as numbers): exact, no sort, and no copy of the weights, which for
 * the global scope would double the model in memory.
 */
#include "prune.h"
#include "prune_cut.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
static inline uint32_t key_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u & 0x7fffffffu; /* |v|; NaN sorts last */
}

slim_status slim__prune_find_cut(const float *const *w, const int64_t *len, int n_arrays,
                                 int64_t count, slim__prune_cut *c, slim_err *err)
{
    int64_t total = 0;
    for (int a = 0; a < n_arrays; a++)
        total += len[a];
    memset(c, 0, sizeof(*c));
    if (count <= 0)
        return SLIM_OK;
    if (count >= total) {
        c->all = true;
        return SLIM_OK;
    }
    int64_t *hist = calloc(65536, sizeof(int64_t));
    if (!hist)
        return slim_errf(err, SLIM_ENOMEM, "out of memory pruning");
    for (int a = 0; a < n_arrays; a++)
        for (int64_t i = 0; i < len[a]; i++)
            hist[key_of(w[a][i]) >> 16]++;
    int64_t below = 0;
    uint32_t hi = 0;
    while (below + hist[hi] <= count) /* count < total: stops inside */
        below += hist[hi++];
    memset(hist, 0, 65536 * sizeof(int64_t));
    for (int a = 0; a < n_arrays; a++)
        for (int64_t i = 0; i < len[a]; i++) {
            uint32_t k = key_of(w[a][i]);
            if (k >> 16 == hi)
                hist[k & 0xffff]++;
        }
    uint32_t lo = 0;
    while (below + hist[lo] <= count)
        below += hist[lo++];
    free(hist);
    /* below = #(|w| < t) <= count < #(|w| <= t). */
    c->t = hi << 16 | lo;
    c->ties = count - below;
    return SLIM_OK;
}

void slim__prune_apply_cut(float *w, int64_t len, slim__prune_cut *c)
{
    for (int64_t i = 0; i < len; i++) {
        uint32_t k = key_of(w[i]);
        if (c->all || k < c->t || (k == c->t && c->ties > 0)) {
            c->ties -= !c->all && k == c->t;
            w[i] = 0.0f;
        }
    }
}

slim_status slim_prune_smallest(float *const *w, const int64_t *len, int n_arrays,
                                int64_t count, slim_err *err)
{
    slim__prune_cut c;
    slim_status st = slim__prune_find_cut((const float *const *)w, len, n_arrays, count, &c, err);
    for (int a = 0; a < n_arrays && !st; a++)
        slim__prune_apply_cut(w[a], len[a], &c);
    return st;
}

void slim_prune_24(float *w, int64_t n, int64_t k, bool w_nk)
{
    for (int64_t j = 0; j < n; j++)
        for (int64_t g = 0; g < k; g += 4) {
            int width = k - g < 4 ? (int)(k - g) : 4;
            if (width <= 2)
                continue;
            float *p[4];
            for (int q = 0; q < width; q++)
                p[q] = w_nk ? &w[j * k + g + q] : &w[(g + q) * n + j];
            /* The 2 largest |w| stay, the lower index first on ties. */
            int keep0 = 0;
            for (int q = 1; q < width; q++)
                if (fabsf(*p[q]) > fabsf(*p[keep0]))
                    keep0 = q;
            int keep1 = keep0 == 0 ? 1 : 0;
            for (int q = 0; q < width; q++)
                if (q != keep0 && fabsf(*p[q]) > fabsf(*p[keep1]))
                    keep1 = q;
            for (int q = 0; q < width; q++)
                if (q != keep0 && q != keep1)
                    *p[q] = 0.0f;
        }
}
