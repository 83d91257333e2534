/*
 * prune_cut.h - internal to quant/: the magnitude cut the pruning pass
 * (prune.c) and slim_prune_smallest share.
 *
 *     slim__prune_cut c;
 *     if (!slim__prune_find_cut(ws, lens, n, count, &c, err))   // reads only
 *         for (int a = 0; a < n; a++)
 *             slim__prune_apply_cut(ws[a], lens[a], &c);          // zeroes
 *
 * apply consumes the ties as it goes: apply one cut to the arrays in the
 * order find saw them.
 */
#ifndef SLIM_QUANT_PRUNE_CUT_H
#define SLIM_QUANT_PRUNE_CUT_H

#include "slim.h"

#include <stdbool.h>
#include <stdint.h>

/* The cut for zeroing the `count` smallest |w| over the arrays: every key
 * below *t, then *ties of those equal to it, in array and index order.
 * Reads the weights only. */
typedef struct {
    uint32_t t;
    int64_t ties;
    bool all;
} slim__prune_cut;

slim_status slim__prune_find_cut(const float *const *w, const int64_t *len, int n_arrays,
                                 int64_t count, slim__prune_cut *c, slim_err *err);
/* Zeroes w's elements below the cut (and the cut's remaining ties). */
void slim__prune_apply_cut(float *w, int64_t len, slim__prune_cut *c);

#endif
