/*
 * int8_entries.c - what the int8 pass (int8.c) spends on a product's
 * precision beyond its int8 codes, by the product's kind: its sparse
 * float32 entries (each MatMul / Gemm output channel's largest weights
 * kept out of its int8 codes, which the product adds in its epilogue:
 * kernels/qgemm.h, n_sp) and whether it gets a second int8 weight.
 */
#include "int8_impl.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* slim__int8_sparse_count's entries per 1024 inputs when SLIM_INT8_SPARSE
 * is unset. On the BERT-sized encoder at sequence 16 (docs/int8.md) 2 took
 * the cosine to fp32 from 0.976 to 0.997 for 1.5% more weight bytes, but
 * the sums cost 12-75% more time on the loaded machine where it was
 * measured (AMX leaves the products about 1.5 cycles an output at K =
 * 768, and the sums' transposes are a good part of that): off until a
 * quiet run shows every encoder row within 0.7x onnxruntime's int8 with
 * them; SLIM_INT8_SPARSE=2 turns them on. The cheapest spec with every
 * encoder row over 0.99 is "square:1" (lowest 0.9945; the sums at least
 * 5-12% of a run, against 13-30% for 2: docs/int8.md, 2026-11-28), the
 * candidate for this default once a quiet run shows its time. */
#define SLIM_INT8_SPARSE_DEFAULT "0"

/* Whether s[0..len) names a product kind (slim__int8_kind). */
static bool is_kind(const char *s, size_t len)
{
    static const char *const kinds[] = {"down", "up", "square"};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strlen(kinds[i]) == len && strncmp(s, kinds[i], len) == 0)
            return true;
    return false;
}

const char *slim__int8_kind(int64_t k, int64_t n)
{
    return k >= 2 * n ? "down" : n >= 2 * k ? "up" : "square";
}

/* Which products get a second int8 weight for the first one's rounding
 * error (kernels/cpu/qgemm_res.c), by kind (slim__int8_kind). Measured on
 * the BERT-sized encoder at sequence 16 (docs/int8.md), cosine to fp32 at
 * batch 1 / 8: 0.976 / 0.993 (none), 0.989 / 0.993 (down), 0.991 /
 * 0.998 (square), 0.993 / 0.992 (down, up), 0.997 / 0.997 (down,
 * square), 0.999 / 0.999 (all). Each kind is a third
 * of an encoder's weight bytes, and with few rows (sequence 16, batch 1)
 * the products stream their weights from memory, so each kind adds about
 * a third to the products' time there (quiet machine, 2 threads: BERT
 * seq 16 batch 1 0.48x onnxruntime int8 without, 0.76x with "square").
 * Default off, as a server built around memory should: the second weight
 * is an opt-in for accuracy at short sequences, SLIM_INT8_RESIDUAL=square
 * (over 0.99 on every encoder row for a third more weight bytes), all, or
 * a list of kinds ("down,square": more margin, two thirds more). */
bool slim__int8_use_residual(const char *kind)
{
    const char *env = getenv("SLIM_INT8_RESIDUAL");
    if (!env || !env[0])
        env = "off";
    return strcmp(env, "all") == 0 || strstr(env, kind) != NULL;
}

/* How many float32 entries each output channel of a K-input weight of
 * kind `kind` (slim__int8_kind) keeps out of its int8 codes, from
 * SLIM_INT8_SPARSE: a comma list of V (entries per 1024 inputs, rounded
 * up, on every kind; 0 none) and kind:V (that kind alone, over the bare
 * V), so that the sums can be spent where they pay: "1,down:2" is 1 per
 * 1024 but 2 on FFN out. -1 for a spec that is neither. Heavy-tailed
 * weights (trained transformers'; the Student-t ones of
 * bench/gen_encoder.py) have a few entries per channel far out in the
 * tail, and they set the channel's int8 step for all the others:
 * per-channel int8 then errs by about 0.03-0.04 of the weight, which on an
 * output that is nearly one vector (BERT at sequence 16) took the cosine
 * to fp32 to 0.976 (docs/int8.md). Kept exact, the rest get a step sized
 * for them. Each entry costs 8 bytes (index and value) and one
 * multiply-add per row, so channels of fewer than 256 inputs (1/32 of a
 * channel's bytes an entry) keep none. */
int64_t slim__int8_sparse_count(int64_t k, const char *kind)
{
    const char *s = getenv("SLIM_INT8_SPARSE");
    if (!s || !s[0])
        s = SLIM_INT8_SPARSE_DEFAULT;
    long all = 0, mine = -1;
    while (*s) {
        const char *colon = strchr(s, ':'), *comma = strchr(s, ',');
        bool named = colon && (!comma || colon < comma);
        char *end;
        long v = strtol(named ? colon + 1 : s, &end, 10);
        if (end == (named ? colon + 1 : s) || v < 0 || (*end && *end != ','))
            return -1;
        if (!named)
            all = v;
        else if (strncmp(s, kind, (size_t)(colon - s)) == 0 && kind[colon - s] == 0)
            mine = v;
        else if (!is_kind(s, (size_t)(colon - s)))
            return -1;
        s = *end ? end + 1 : end;
    }
    long per = mine >= 0 ? mine : all;
    if (per <= 0 || k < 256)
        return 0;
    if (per > 1024)
        per = 1024;
    return (k * per + 1023) / 1024;
}

/* Takes the nsp entries of largest magnitude out of channel c (k floats,
 * the outlier rows already 0): their indices and values to idx[t * ld]
 * and val[t * ld], and 0 in c. Ties go to the lower index; a channel
 * with fewer nonzero entries pads with index 0 and value 0. */
void slim__int8_take_largest(float *c, int64_t k, int64_t nsp, int32_t *idx, float *val,
                             int64_t ld)
{
    for (int64_t t = 0; t < nsp; t++) {
        int64_t best = -1;
        float bm = 0;
        for (int64_t i = 0; i < k; i++) {
            float a = fabsf(c[i]);
            if (a > bm) {
                bm = a;
                best = i;
            }
        }
        idx[t * ld] = best < 0 ? 0 : (int32_t)best;
        val[t * ld] = best < 0 ? 0.0f : c[best];
        if (best >= 0)
            c[best] = 0.0f;
    }
}

/* Channel j gathered into c (k floats: outlier rows and its sparse
 * entries 0) for quantize_with; adds the sparse entries' squared norm
 * (they are exact: no error) to *w2. */
void slim__int8_gather_main(const float *w, int64_t k, int64_t sk, const bool *skip, int64_t nsp,
                            const int32_t *idx, const float *val, int64_t ld, float *c,
                            double *w2)
{
    for (int64_t t = 0; t < k; t++)
        c[t] = skip && skip[t] ? 0.0f : w[t * sk];
    for (int64_t t = 0; t < nsp; t++) {
        c[idx[t * ld]] = 0.0f;
        *w2 += (double)val[t * ld] * val[t * ld];
    }
}

