/*
 * attention_core.c - scaled dot-product attention for one job (attention.h):
 * per (batch, head), blocks of query rows: the scores Q K^T (one
 * single-threaded BLAS call), softcap and masks per row, a softmax per row
 * (AVX-512 where the CPU has it), then the block's rows of P V. The 3D
 * layout needs no transposes: a head is a column block of the rows, so the
 * products read it with a leading dimension of H*d.
 */
#include "attention.h"
#include "simd_transpose.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- the softmax of one score row ---------------------------------------- */

static _Atomic int force_portable;

/* expf per element and the sum in double: the reference the fast path is
 * held to. */
static void softmax_row_c(float *row, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t c = 0; c < n; c++)
        mx = row[c] > mx ? row[c] : mx;
    /* exp(-inf - -inf) is NaN: a fully masked row gives NaN, as in the
     * reference. */
    double sum = 0;
    for (int64_t c = 0; c < n; c++) {
        row[c] = expf(row[c] - mx);
        sum += row[c];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t c = 0; c < n; c++)
        row[c] *= inv;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ATTN_X86 1
#define ATTN_AVX512 __attribute__((target("avx512f")))

/* e^x for x <= 0 (a score minus its row's maximum), 16 at a time: x = n ln2
 * + r with |r| <= ln2/2, e^r by a degree-7 polynomial (the classic cephes
 * expf coefficients, within about 1 ulp of expf), times 2^n by vscalefps.
 * Below ln(FLT_MIN) the result is 0 (expf gives denormals there, which add
 * nothing a float sum keeps); NaN stays NaN. */
ATTN_AVX512 static inline __m512 exp512(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33654475f), hi = _mm512_set1_ps(88.72283905f);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    /* max/min return their second operand when either is NaN. */
    x = _mm512_min_ps(hi, _mm512_max_ps(lo, x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(p, n));
}

/* Three passes over the row (max, exp and sum, scale), 16 lanes wide, the
 * tail under a mask. The lane sums are reduced in a fixed order, so a
 * row's result depends on the row alone. */
ATTN_AVX512 static void softmax_row_avx512(float *row, int64_t n)
{
    const int64_t full = n & ~(int64_t)15;
    const __mmask16 tail = (__mmask16)((1u << (n - full)) - 1);
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t c = 0; c < full; c += 16)
        vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(row + c));
    if (tail)
        vmax = _mm512_mask_max_ps(vmax, tail, vmax, _mm512_maskz_loadu_ps(tail, row + full));
    const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t c = 0; c < full; c += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(row + c), vm));
        _mm512_storeu_ps(row + c, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    if (tail) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + full), vm));
        _mm512_mask_storeu_ps(row + full, tail, e);
        vsum = _mm512_mask_add_ps(vsum, tail, vsum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
    for (int64_t c = 0; c < full; c += 16)
        _mm512_storeu_ps(row + c, _mm512_mul_ps(_mm512_loadu_ps(row + c), inv));
    if (tail)
        _mm512_mask_storeu_ps(row + full, tail,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + full), inv));
}

/* Short rows (n <= 16, one vector each: a 16-token sequence's scores) a
 * group of 16 at a time, in phases -- every row's maximum, then every
 * row's exponentials and sum, then every row's scaling -- so the
 * out-of-order core overlaps the rows' reductions instead of running one
 * row's chain after another's. Each row gets softmax_row_avx512's
 * operations on it, in its order: the same bits. */
ATTN_AVX512 static void softmax_rows_short_avx512(float *s, int64_t rows, int64_t n)
{
    const bool full = n == 16;
    const __mmask16 tail = full ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    for (int64_t g = 0; g < rows; g += 16) {
        const int cnt = rows - g < 16 ? (int)(rows - g) : 16;
        float mx[16], sum[16];
        for (int i = 0; i < cnt; i++) {
            const float *row = s + (g + i) * n;
            __m512 vmax = full ? _mm512_max_ps(ninf, _mm512_loadu_ps(row))
                               : _mm512_mask_max_ps(ninf, tail, ninf,
                                                    _mm512_maskz_loadu_ps(tail, row));
            mx[i] = _mm512_reduce_max_ps(vmax);
        }
        for (int i = 0; i < cnt; i++) {
            float *row = s + (g + i) * n;
            const __m512 vm = _mm512_set1_ps(mx[i]);
            __m512 e, vsum;
            if (full) {
                e = exp512(_mm512_sub_ps(_mm512_loadu_ps(row), vm));
                _mm512_storeu_ps(row, e);
                vsum = _mm512_add_ps(zero, e);
            } else {
                e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row), vm));
                _mm512_mask_storeu_ps(row, tail, e);
                vsum = _mm512_mask_add_ps(zero, tail, zero, e);
            }
            sum[i] = _mm512_reduce_add_ps(vsum);
        }
        for (int i = 0; i < cnt; i++) {
            float *row = s + (g + i) * n;
            const __m512 inv = _mm512_set1_ps(1.0f / sum[i]);
            if (full)
                _mm512_storeu_ps(row, _mm512_mul_ps(_mm512_loadu_ps(row), inv));
            else
                _mm512_mask_storeu_ps(row, tail,
                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row), inv));
        }
    }
}

#endif

bool slim__attn_force_portable(bool on)
{
    atomic_store(&force_portable, on ? 1 : 0);
#ifdef ATTN_X86
    return slim_cpu_has_avx512f();
#else
    return false;
#endif
}

void slim__attn_softmax_row(float *row, int64_t n)
{
#ifdef ATTN_X86
    if (!atomic_load(&force_portable) && slim_cpu_has_avx512f()) {
        softmax_row_avx512(row, n);
        return;
    }
#endif
    softmax_row_c(row, n);
}

void slim__attn_softmax_rows(float *s, int64_t rows, int64_t n)
{
#ifdef ATTN_X86
    if (n > 0 && n <= 16 && !atomic_load(&force_portable) && slim_cpu_has_avx512f()) {
        softmax_rows_short_avx512(s, rows, n);
        return;
    }
#endif
    for (int64_t r = 0; r < rows; r++)
        slim__attn_softmax_row(s + r * n, n);
}

/* ---- products for short sequences --------------------------------------- */

/* A BLAS call costs about a microsecond before it multiplies anything; a
 * head of a 16-token sequence is 16 x 16 x 64 multiply-adds, which takes
 * less. Below these sizes the two products of a block are done here, with
 * K transposed once per (batch, head) into the task's scratch so that
 * both are broadcast-FMA loops over contiguous rows. The choice depends
 * only on the dims, so every (batch, head) of a model takes the same path
 * and the batch never changes a result. */
#define ATTN_SMALL_T 64
#define ATTN_SMALL_D 256

static bool attn_small(const slim__attn_dims *a)
{
    return a->T > 0 && a->T <= ATTN_SMALL_T && a->D > 0 && a->D <= ATTN_SMALL_D &&
           a->Dv <= ATTN_SMALL_D;
}

static int64_t attn_t16(int64_t t)
{
    return (t + 15) & ~(int64_t)15;
}

/* kt[d][c] = k[c][d], columns padded to a multiple of 16 with zeros. */
static void attn_transpose_k_c(const float *k, int64_t ldk, int64_t T, int64_t D, float *kt)
{
    const int64_t T16 = attn_t16(T);
    for (int64_t d = 0; d < D; d++) {
        float *row = kt + d * T16;
        for (int64_t c = 0; c < T; c++)
            row[c] = k[c * ldk + d];
        for (int64_t c = T; c < T16; c++)
            row[c] = 0.0f;
    }
}

/* s[r][c] = scale * sum_d q[r][d] kt[d][c], the sum in order of d. */
static void attn_scores_c(const float *q, int64_t ldq, const float *kt, int64_t rows, int64_t T,
                          int64_t D, float scale, float *s)
{
    const int64_t T16 = attn_t16(T);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < T; c++) {
            float acc = 0.0f;
            for (int64_t d = 0; d < D; d++)
                acc = fmaf(q[r * ldq + d], kt[d * T16 + c], acc);
            s[r * T + c] = acc * scale;
        }
}

/* y[r][j] = sum_c p[r][c] v[c][j], the sum in order of c. */
static void attn_pv_c(const float *p, int64_t T, const float *v, int64_t ldv, int64_t rows,
                      int64_t Dv, float *y, int64_t ldy)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < Dv; j++) {
            float acc = 0.0f;
            for (int64_t c = 0; c < T; c++)
                acc = fmaf(p[r * T + c], v[c * ldv + j], acc);
            y[r * ldy + j] = acc;
        }
}

#ifdef ATTN_X86
/* The same operations, 16 columns at a time: each lane is one (r, c) or
 * (r, j) sum taken in the C path's order, so both give the same bits. The
 * vector counts are compile-time constants in each copy (NV), so the sums
 * stay in registers. */
#define ATTN_MASK(left) \
    ((left) >= 16 ? (__mmask16)0xFFFF : (left) > 0 ? (__mmask16)((1u << (left)) - 1) : (__mmask16)0)

/* rb rows of scores at once: a row's sum is one chain of D dependent
 * FMAs, which at nv = 1 (a 16-token sequence) would leave the FMA units
 * waiting on latency; rb rows make rb * nv independent chains. Each lane's
 * sum keeps the order of d, so the grouping changes no bit. */
ATTN_AVX512 __attribute__((always_inline)) static inline void
attn_scores_rows(const float *q, int64_t ldq, const float *kt, int64_t T16, int64_t T,
                 int64_t D, __m512 vs, float *s, const int nv, const int rb)
{
    __m512 acc[8][ATTN_SMALL_T / 16];
    for (int i = 0; i < rb; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
        __m512 kv[ATTN_SMALL_T / 16];
        for (int v = 0; v < nv; v++)
            kv[v] = _mm512_loadu_ps(kt + d * T16 + v * 16);
        for (int i = 0; i < rb; i++) {
            const __m512 x = _mm512_set1_ps(q[i * ldq + d]);
            for (int v = 0; v < nv; v++)
                acc[i][v] = _mm512_fmadd_ps(x, kv[v], acc[i][v]);
        }
    }
    for (int i = 0; i < rb; i++)
        for (int v = 0; v < nv; v++)
            _mm512_mask_storeu_ps(s + i * T + v * 16, ATTN_MASK(T - v * 16),
                                  _mm512_mul_ps(acc[i][v], vs));
}

ATTN_AVX512 __attribute__((always_inline)) static inline void
attn_scores_nv(const float *q, int64_t ldq, const float *kt, int64_t rows, int64_t T, int64_t D,
               float scale, float *s, const int nv)
{
    const int64_t T16 = attn_t16(T);
    const __m512 vs = _mm512_set1_ps(scale);
    const int rb = nv == 1 ? 8 : nv == 2 ? 4 : 2;
    int64_t r = 0;
    for (; r + rb <= rows; r += rb)
        attn_scores_rows(q + r * ldq, ldq, kt, T16, T, D, vs, s + r * T, nv, rb);
    for (; r < rows; r++)
        attn_scores_rows(q + r * ldq, ldq, kt, T16, T, D, vs, s + r * T, nv, 1);
}

ATTN_AVX512 static void attn_scores_avx512(const float *q, int64_t ldq, const float *kt,
                                           int64_t rows, int64_t T, int64_t D, float scale,
                                           float *s)
{
    switch (attn_t16(T) / 16) {
    case 1: attn_scores_nv(q, ldq, kt, rows, T, D, scale, s, 1); break;
    case 2: attn_scores_nv(q, ldq, kt, rows, T, D, scale, s, 2); break;
    case 3: attn_scores_nv(q, ldq, kt, rows, T, D, scale, s, 3); break;
    default: attn_scores_nv(q, ldq, kt, rows, T, D, scale, s, 4); break;
    }
}

/* Columns [j, j + 16 nv) of rb rows' P V, the last vector under a mask;
 * rb rows at once for independent FMA chains, as in the scores. */
ATTN_AVX512 __attribute__((always_inline)) static inline void
attn_pv_rows(const float *p, int64_t T, const float *v, int64_t ldv, const __mmask16 *m,
             int64_t j, float *y, int64_t ldy, const int nv, const int rb)
{
    __m512 acc[8][4];
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < nv; i++)
            acc[r][i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < T; c++) {
        const float *vr = v + c * ldv + j;
        __m512 vv[4];
        for (int i = 0; i < nv; i++)
            vv[i] = _mm512_maskz_loadu_ps(m[i], vr + i * 16);
        for (int r = 0; r < rb; r++) {
            const __m512 x = _mm512_set1_ps(p[r * T + c]);
            for (int i = 0; i < nv; i++)
                acc[r][i] = _mm512_fmadd_ps(x, vv[i], acc[r][i]);
        }
    }
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < nv; i++)
            _mm512_mask_storeu_ps(y + r * ldy + j + i * 16, m[i], acc[r][i]);
}

ATTN_AVX512 __attribute__((always_inline)) static inline void
attn_pv_nv(const float *p, int64_t T, const float *v, int64_t ldv, int64_t rows, int64_t j,
           int64_t w, float *y, int64_t ldy, const int nv)
{
    __mmask16 m[4];
    for (int i = 0; i < nv; i++)
        m[i] = ATTN_MASK(w - i * 16);
    const int rb = nv == 1 ? 8 : nv == 2 ? 4 : 2;
    int64_t r = 0;
    for (; r + rb <= rows; r += rb)
        attn_pv_rows(p + r * T, T, v, ldv, m, j, y + r * ldy, ldy, nv, rb);
    for (; r < rows; r++)
        attn_pv_rows(p + r * T, T, v, ldv, m, j, y + r * ldy, ldy, nv, 1);
}

ATTN_AVX512 static void attn_pv_avx512(const float *p, int64_t T, const float *v, int64_t ldv,
                                       int64_t rows, int64_t Dv, float *y, int64_t ldy)
{
    for (int64_t j = 0; j < Dv; j += 64) {
        const int64_t w = Dv - j < 64 ? Dv - j : 64;
        switch ((w + 15) / 16) {
        case 1: attn_pv_nv(p, T, v, ldv, rows, j, w, y, ldy, 1); break;
        case 2: attn_pv_nv(p, T, v, ldv, rows, j, w, y, ldy, 2); break;
        case 3: attn_pv_nv(p, T, v, ldv, rows, j, w, y, ldy, 3); break;
        default: attn_pv_nv(p, T, v, ldv, rows, j, w, y, ldy, 4); break;
        }
    }
}

/* kt from 16 x 16 blocks of K transposed in registers (simd_transpose.h):
 * K's rows are ldk floats apart (three heads' worth when Q, K
 * and V are packed), and the scalar copy, one element per load, took 60%
 * of a 16-token head; 16-lane gathers were slower still. Rows past T and
 * columns past D load as zero. A copy: no value changes. */
ATTN_AVX512 static void attn_transpose_k_avx512(const float *k, int64_t ldk, int64_t T,
                                                int64_t D, float *kt)
{
    const int64_t T16 = attn_t16(T);
    for (int64_t c0 = 0; c0 < T16; c0 += 16)
        for (int64_t d0 = 0; d0 < D; d0 += 16) {
            const __mmask16 dm = ATTN_MASK(D - d0);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = c0 + i < T ? _mm512_maskz_loadu_ps(dm, k + (c0 + i) * ldk + d0)
                                  : _mm512_setzero_ps();
            slim__transpose16_ps(r); /* row i's element j ends in r[j]'s lane i */
            for (int i = 0; i < 16 && d0 + i < D; i++)
                _mm512_storeu_ps(kt + (d0 + i) * T16 + c0, r[i]);
        }
}
#undef ATTN_MASK
#endif

static void attn_transpose_k(const float *k, int64_t ldk, int64_t T, int64_t D, float *kt)
{
#ifdef ATTN_X86
    if (!atomic_load(&force_portable) && slim_cpu_has_avx512f()) {
        attn_transpose_k_avx512(k, ldk, T, D, kt);
        return;
    }
#endif
    attn_transpose_k_c(k, ldk, T, D, kt);
}

static void attn_scores_small(const float *q, int64_t ldq, const float *kt, int64_t rows,
                              int64_t T, int64_t D, float scale, float *s)
{
#ifdef ATTN_X86
    if (!atomic_load(&force_portable) && slim_cpu_has_avx512f()) {
        attn_scores_avx512(q, ldq, kt, rows, T, D, scale, s);
        return;
    }
#endif
    attn_scores_c(q, ldq, kt, rows, T, D, scale, s);
}

static void attn_pv_small(const float *p, int64_t T, const float *v, int64_t ldv, int64_t rows,
                          int64_t Dv, float *y, int64_t ldy)
{
#ifdef ATTN_X86
    if (!atomic_load(&force_portable) && slim_cpu_has_avx512f()) {
        attn_pv_avx512(p, T, v, ldv, rows, Dv, y, ldy);
        return;
    }
#endif
    attn_pv_c(p, T, v, ldv, rows, Dv, y, ldy);
}

/* ---- the attention core, shared by Attention and FusedAttention ---------- */

static _Atomic int64_t block_floats; /* 0: ATTN_BLOCK */

void slim__attn_set_block(int64_t floats)
{
    atomic_store(&block_floats, floats);
}


/* The additive bias of score (b, h, i, col) from a mask of another type
 * than float32, or from nonpad_kv_seqlen. */
static float attn_bias(const slim__attn_job *j, int64_t b, int64_t h, int64_t i, int64_t col)
{
    float bias = 0;
    if (j->mask) {
        int64_t tm = j->mask->dims[j->mask->ndim - 1];
        if (col >= tm)
            return -INFINITY;
        int64_t off = b * j->mstride[0] + h * j->mstride[1] + i * j->mstride[2] + col;
        if (j->mask->dtype == SLIM_BOOL)
            bias = ((const uint8_t *)j->mask->data)[off] ? 0.0f : -INFINITY;
        else
            bias = (float)slim_load_f64(j->mask->dtype, j->mask->data, off);
    }
    if (j->nonpad && col >= j->nonpad[b])
        bias += -INFINITY;
    return bias;
}

/* p + off, where an empty operand's data may be NULL (and NULL + 0 is
 * undefined in C). */
static inline const float *attn_at(const float *p, int64_t off)
{
    return p ? p + off : p;
}

static inline float *attn_at_mut(float *p, int64_t off)
{
    return p ? p + off : p;
}

/* Score row i of (b, h) after the product, up to its softmax: softcap and
 * the masks, with the qk output copies Attention asks for before it. */
static void attn_row(const slim__attn_job *j, float *row, int64_t b, int64_t h, int64_t i)
{
    const slim__attn_state *st = j->st;
    const int64_t T = j->a.T;
    float *qk = j->qk ? j->qk + ((b * j->a.Hq + h) * j->a.Sq + i) * T : NULL;
    if (st->softcap > 0)
        for (int64_t c = 0; c < T; c++)
            row[c] = st->softcap * tanhf(row[c] / st->softcap);
    if (qk && st->qk_mode <= 1)
        memcpy(qk, row, sizeof(float) * (size_t)T);
    if (j->mf) {
        const float *m = j->mf + b * j->ms[0] + h * j->ms[1] + i * j->ms[2];
        const int64_t n = j->mcols < T ? j->mcols : T;
        if (j->ms[3])
            for (int64_t c = 0; c < n; c++)
                row[c] += m[c];
        else
            for (int64_t c = 0; c < n; c++)
                row[c] += m[0];
        for (int64_t c = n; c < T; c++)
            row[c] = -INFINITY;
    }
    if (j->mask || j->nonpad)
        for (int64_t c = 0; c < T; c++)
            row[c] += attn_bias(j, b, h, i, c);
    if (st->causal)
        for (int64_t c = i + j->a.P + 1; c < T; c++)
            row[c] = -INFINITY;
    if (qk && st->qk_mode == 2)
        memcpy(qk, row, sizeof(float) * (size_t)T);
}

/* The block's rows [i0, i0 + rows) of (b, h): softmax, then the copy of
 * the probabilities Attention's qk output mode 3 asks for. */
static void attn_rows_softmax(const slim__attn_job *j, float *s, int64_t rows, int64_t b,
                              int64_t h, int64_t i0)
{
    const int64_t T = j->a.T;
    slim__attn_softmax_rows(s, rows, T);
    if (j->qk && j->st->qk_mode == 3)
        for (int64_t r = 0; r < rows; r++)
            memcpy(j->qk + ((b * j->a.Hq + h) * j->a.Sq + i0 + r) * T, s + r * T,
                   sizeof(float) * (size_t)T);
}

/* Tasks are runs of per_task (batch, head) pairs, each with its own score
 * block. A pair's result comes from the same calls on the same data
 * whatever the batch and the split, so it is bitwise independent of both. */
static void attn_task(int64_t begin, int64_t end, void *user)
{
    slim__attn_job *j = user;
    const slim__attn_dims *a = &j->a;
    const int64_t T = a->T, D = a->D, Dv = a->Dv, rep = a->Hq / a->Hkv;
    const bool small = attn_small(a);
    for (int64_t task = begin; task < end; task++) {
        float *s = j->scratch + task * j->task_floats;
        float *kt = s + j->rows * T; /* small path: K transposed */
        int64_t last = (task + 1) * j->per_task < j->n_bh ? (task + 1) * j->per_task : j->n_bh;
        for (int64_t bh = task * j->per_task; bh < last; bh++) {
            const int64_t b = bh / a->Hq, h = bh % a->Hq, hk = h / rep;
            const float *k = attn_at(j->k, b * j->ks[0] + hk * j->ks[1]);
            const float *v = attn_at(j->v, b * j->vs[0] + hk * j->vs[1]);
            if (small)
                attn_transpose_k(k, j->ks[2], T, D, kt);
            for (int64_t i0 = 0; i0 < a->Sq; i0 += j->rows) {
                const int64_t rows = a->Sq - i0 < j->rows ? a->Sq - i0 : j->rows;
                const float *q = attn_at(j->q, b * j->qs[0] + h * j->qs[1] + i0 * j->qs[2]);
                float *y = attn_at_mut(j->y, b * j->ys[0] + h * j->ys[1] + i0 * j->ys[2]);
                if (small)
                    attn_scores_small(q, j->qs[2], kt, rows, T, D, j->scale, s);
                else if (T > 0 && D > 0)
                    slim_sgemm_serial(false, true, rows, T, D, j->scale, q, j->qs[2], k,
                                      j->ks[2], 0.0f, s, T);
                else if (T > 0)
                    memset(s, 0, sizeof(float) * (size_t)(rows * T));
                for (int64_t r = 0; r < rows; r++)
                    attn_row(j, s + r * T, b, h, i0 + r);
                attn_rows_softmax(j, s, rows, b, h, i0);
                if (Dv <= 0)
                    continue;
                if (small)
                    attn_pv_small(s, T, v, j->vs[2], rows, Dv, y, j->ys[2]);
                else if (T > 0)
                    slim_sgemm_serial(false, false, rows, Dv, T, 1.0f, s, T, v, j->vs[2], 0.0f,
                                      y, j->ys[2]);
                else
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t c = 0; c < Dv; c++)
                            y[r * j->ys[2] + c] = NAN; /* a softmax over no keys */
            }
        }
    }
}

/* Strides of an operand [B, S, H*d] (3D) or [B, H, S, d] (4D). */
void slim__attn_strides(int64_t *s, bool three_d, int64_t H, int64_t S, int64_t d)
{
    s[0] = H * S * d;
    s[1] = three_d ? d : S * d;
    s[2] = three_d ? H * d : d;
}

/* Float32 mask strides over (B, Hq, Sq, T) for mask dims right-aligned
 * against them, 0 on size-1 (broadcast) dims. */
void slim__attn_mask_strides(slim__attn_job *j, const slim_tensor *m)
{
    int64_t stride = 1;
    for (int i = 3; i >= 0; i--) {
        int mi = i - (4 - m->ndim);
        j->ms[i] = (mi < 0 || m->dims[mi] == 1) ? 0 : stride;
        if (mi >= 0)
            stride *= m->dims[mi];
    }
}

/* Runs the job over every (batch, head) with score blocks from the
 * allocator. */
slim_status slim__attn_run(slim__attn_job *j, slim_err *err)
{
    const slim__attn_dims *a = &j->a;
    j->n_bh = a->B * a->Hq;
    if (j->n_bh <= 0 || a->Sq <= 0)
        return SLIM_OK;
    int64_t tasks = (int64_t)slim_num_threads() * 2;
    if (tasks > j->n_bh)
        tasks = j->n_bh;
    j->per_task = (j->n_bh + tasks - 1) / tasks;
    tasks = (j->n_bh + j->per_task - 1) / j->per_task;
    const int64_t budget = atomic_load(&block_floats);
    j->rows = (budget > 0 ? budget : ATTN_BLOCK) / (a->T > 0 ? a->T : 1);
    if (j->rows < ATTN_MIN_ROWS)
        j->rows = ATTN_MIN_ROWS;
    if (j->rows > a->Sq)
        j->rows = a->Sq;
    j->task_floats = j->rows * (a->T > 0 ? a->T : 1);
    if (attn_small(a))
        j->task_floats += a->D * attn_t16(a->T);
    slim_tensor scratch = {.dtype = SLIM_F32, .ndim = 1, .dims = {tasks * j->task_floats}};
    slim_status s = slim_tensor_alloc(&scratch, err);
    if (s)
        return slim_err_prefix(err, "attention scores: ");
    j->scratch = scratch.data;
    slim_parallel_for(tasks, 1, attn_task, j);
    slim_tensor_release(&scratch);
    return SLIM_OK;
}

