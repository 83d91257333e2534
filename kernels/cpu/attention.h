/*
 * attention.h - the attention core shared by Attention (opset 23) and
 * slimserve's FusedAttention (cpu/attention.c), in cpu/attention_core.c:
 *
 *     slim__attn_job j = {.st = &state, .a = dims, .q = q, ...strides...};
 *     slim__attn_strides(j.qs, three_d, H, S, d);
 *     st = slim__attn_run(&j, err);        (splits by batch and head)
 *
 * and the softmax of one score row, which tests reach directly. The
 * AVX-512 paths are taken when the CPU has them (CPUID at run time), the
 * portable C path otherwise or when a test forces it.
 */
#ifndef SLIM_ATTENTION_H
#define SLIM_ATTENTION_H

#include "kernel.h"

#include <stdbool.h>
#include <stdint.h>

/* Attention's attributes (FusedAttention runs with all of them off). */
typedef struct {
    bool causal;
    int64_t q_heads, kv_heads; /* 0 when absent */
    int64_t qk_mode;
    bool has_scale;
    float scale, softcap;
} slim__attn_state;

/* The problem's sizes, from the inputs' shapes. */
typedef struct {
    bool three_d;
    int64_t B, Hq, Hkv, Sq, Skv, P, T, D, Dv;
} slim__attn_dims;

/* A task's score block holds rows x T floats, rows = ATTN_BLOCK / T
 * within [ATTN_MIN_ROWS, Sq]: a whole head's scores while they fit in
 * 128 KiB (fewer, larger products: each call packs K and V again), never
 * every head's at once. rows depends on Sq and T only, never on the batch. */
#define ATTN_BLOCK (32 * 1024)
#define ATTN_MIN_ROWS 16

typedef struct {
    const slim__attn_state *st;
    slim__attn_dims a;
    /* Element strides of batch, head and sequence position of each
     * operand; the last dim is contiguous. */
    const float *q, *k, *v;
    int64_t qs[3], ks[3], vs[3], ys[3];
    float *y, *qk;            /* qk: [B, Hq, Sq, T] or NULL */
    float scale;
    /* The mask: as float32 with strides over (B, Hq, Sq, T), 0 where it
     * broadcasts, and its column count (past that, -inf: Attention's
     * short mask); or, for other types, the tensor read per score. */
    const float *mf;
    int64_t ms[4], mcols;
    const slim_tensor *mask;
    int64_t mstride[3];
    const int64_t *nonpad;    /* [B] or NULL */
    float *scratch;           /* task_floats per task */
    int64_t task_floats;      /* rows * T, + D * T rounded up to 16 for short T */
    int64_t rows, per_task, n_bh;
} slim__attn_job;

/* Runs the job over every (batch, head), each task with its own score
 * block from the allocator. A (batch, head)'s result comes from the same
 * calls on the same data whatever the batch and the split, so it is
 * bitwise independent of both. */
slim_status slim__attn_run(slim__attn_job *j, slim_err *err);
/* Strides of an operand [B, S, H*d] (3D) or [B, H, S, d] (4D). */
void slim__attn_strides(int64_t *s, bool three_d, int64_t H, int64_t S, int64_t d);
/* j->ms: float32 mask strides over (B, Hq, Sq, T) for the mask's dims
 * right-aligned against them, 0 on size-1 (broadcast) dims. */
void slim__attn_mask_strides(slim__attn_job *j, const slim_tensor *m);

/* row[i] = exp(row[i] - max) / sum over the row, in place. A row whose
 * maximum is -inf (every key masked) becomes NaN, as the ONNX reference
 * gives. The result depends only on the row itself. */
void slim__attn_softmax_row(float *row, int64_t n);
/* rows consecutive rows of n, each as slim__attn_softmax_row gives it
 * (bitwise): rows of at most 16 grouped on AVX-512, so that their
 * reductions overlap. */
void slim__attn_softmax_rows(float *s, int64_t rows, int64_t n);

/* Sets the score block's budget in floats (0: ATTN_BLOCK), so that tests
 * reach several blocks per head with short sequences. */
void slim__attn_set_block(int64_t floats);

/* Forces the portable path (true) or lets CPUID choose (false); returns
 * whether the AVX-512 path exists on this CPU. For tests. */
bool slim__attn_force_portable(bool on);

#endif
