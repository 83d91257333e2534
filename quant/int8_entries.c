/*
 * int8_entries.c - the int8 pass's sparse float32 entries (int8.c): each
 * MatMul / Gemm output channel's largest weights kept out of its int8
 * codes, which the product adds in its epilogue (kernels/qgemm.h, n_sp).
 */
#include "int8_impl.h"

#include <math.h>
#include <stdlib.h>

/* slim__int8_sparse_count's entries per 1024 inputs when SLIM_INT8_SPARSE
 * is unset. On the BERT-sized encoder at sequence 16 (docs/int8.md) 2 took
 * the cosine to fp32 from 0.976 to 0.997 for 1.5% more weight bytes, but
 * the sums cost 12-75% more time on the loaded machine where it was
 * measured (AMX leaves the products about 1.5 cycles an output at K =
 * 768, and the sums' transposes are a good part of that): off until a
 * quiet run shows every encoder row within 0.7x onnxruntime's int8 with
 * them; SLIM_INT8_SPARSE=2 turns them on. */
#define SLIM_INT8_SPARSE_DEFAULT "0"

/* The channels of at least this many inputs are "long" for
 * SLIM_INT8_SPARSE=S,L (a transformer's FFN out, K = 4 x hidden, against
 * its K = hidden products). */
#define SLIM_INT8_SPARSE_LONG_K 1024

/* How many float32 entries each output channel of a K-input weight keeps
 * out of its int8 codes (SLIM_INT8_SPARSE: entries per 1024 inputs,
 * rounded up; 0 none; "S,L": S per 1024 on channels of fewer than 1024
 * inputs, L on longer ones, so the sums can be spent where the error is:
 * FFN out, K = 3072, is the most sensitive product of the encoders,
 * docs/int8.md). Heavy-tailed weights (trained transformers'; the
 * Student-t ones of bench/gen_encoder.py) have a few entries per channel
 * far out in the tail, and they set the channel's int8 step for all the
 * others: per-channel int8 then errs by about 0.03-0.04 of the weight,
 * which on an output that is nearly one vector (BERT at sequence 16)
 * took the cosine to fp32 to 0.976 (docs/int8.md). Kept exact, the rest
 * get a step sized for them. Each entry costs 8 bytes (index and value)
 * and one gathered multiply-add per row, so channels of fewer than 256
 * inputs (1/32 of a channel's bytes an entry) keep none. */
int64_t slim__int8_sparse_count(int64_t k)
{
    const char *spec = getenv("SLIM_INT8_SPARSE");
    if (!spec || !spec[0])
        spec = SLIM_INT8_SPARSE_DEFAULT;
    char *end;
    long per = strtol(spec, &end, 10);
    if (*end == ',' && k >= SLIM_INT8_SPARSE_LONG_K)
        per = strtol(end + 1, NULL, 10);
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

