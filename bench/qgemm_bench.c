/*
 * qgemm_bench.c - times slim_qgemm (the MatMulInt8 product) on one shape,
 * and its parts, for bench/bench_qgemm.py (which runs it beside
 * onnxruntime's int8 on the same shape and prints the table).
 *
 *     bench_qgemm M N K [--outliers O] [--act none|relu|gelu] [--repeat R]
 *     bench_qgemm --peak
 *     bench_qgemm --peak-f32
 *
 * Threads: SLIM_NUM_THREADS (the kernel pool). Prints one JSON object:
 * the median and the fastest ms of R calls of each configuration, round
 * robin (on a shared machine the fastest call is the least disturbed):
 *   full     slim_qgemm with O outlier channels (as quant/int8.c makes them)
 *   plain    the same without the outliers
 *   quant    only the per-row quantization of x (one thread, all rows, as
 *            slim_qgemm does it: slim_qgemm_quantize_rows)
 * --peak times a register-only vpdpbusd loop on every pool thread and
 * prints its GOPS: what the product can reach at most on this machine.
 * --peak-f32 does the same with float32 FMAs and prints GFLOP/s: the
 * ceiling of a float32 convolution or product (bench/bench_models.py
 * divides each model's multiply-adds by it). Both try several accumulator
 * chain counts and say what the machine is (qgemm_peak.c).
 */
#include "kernel.h"
#include "qgemm.h"
#include "qgemm_peak.h"
#include "slim_init.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static uint64_t rng = 88172645463325252ull;
static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv)
{
    slim_init();
    if (argc > 1 && strcmp(argv[1], "--peak") == 0)
        return slim_bench_peak(false);
    if (argc > 1 && strcmp(argv[1], "--peak-f32") == 0)
        return slim_bench_peak(true);
    if (argc < 4) {
        fprintf(stderr, "usage: bench_qgemm M N K [--outliers O] [--act none|relu|gelu] "
                        "[--repeat R] | --peak | --peak-f32\n");
        return 2;
    }
    int64_t m = atoll(argv[1]), n = atoll(argv[2]), k = atoll(argv[3]), n_outl = 0;
    int repeat = 50;
    slim_qgemm_act act = SLIM_QGEMM_ACT_NONE;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--outliers") == 0)
            n_outl = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--repeat") == 0)
            repeat = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--act") == 0)
            act = strcmp(argv[i + 1], "relu") == 0   ? SLIM_QGEMM_ACT_RELU
#ifdef SLIM_QGEMM_HAS_GELU
                  : strcmp(argv[i + 1], "gelu") == 0 ? SLIM_QGEMM_ACT_GELU
#endif
                                                     : SLIM_QGEMM_ACT_NONE;
    }
    if (m < 1 || n < 1 || k < 1 || k > SLIM_QGEMM_MAX_K || n_outl < 0 || n_outl > k ||
        repeat < 1) {
        fprintf(stderr, "bench_qgemm: bad shape or option\n");
        return 2;
    }
    float *x = malloc(sizeof(float) * (size_t)(m * k));
    int8_t *wq = malloc((size_t)(n * k));
    int8_t *packed = aligned_alloc(64, (slim_qgemm_packed_bytes(n, k) + 63) & ~(size_t)63);
    int32_t *colsum = malloc(sizeof(int32_t) * (size_t)n);
    float *sw = malloc(sizeof(float) * (size_t)n), *bias = malloc(sizeof(float) * (size_t)n);
    float *osc = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)(m * n));
    int64_t *oidx = malloc(sizeof(int64_t) * (size_t)(n_outl + 1));
    int8_t *oq = malloc((size_t)((n_outl + 1) * n));
    size_t sb = (slim_qgemm_scratch_bytes(m, k) + 63) & ~(size_t)63;
    void *scratch = aligned_alloc(64, sb);
    uint8_t *qx = malloc((size_t)(m * slim_qgemm_k4(k)));
    float *sx = malloc(sizeof(float) * (size_t)m);
    int32_t *zx = malloc(sizeof(int32_t) * (size_t)m);
    if (!x || !wq || !packed || !colsum || !sw || !bias || !osc || !y || !oidx || !oq ||
        !scratch || !qx || !sx || !zx) {
        fprintf(stderr, "bench_qgemm: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < m * k; i++)
        x[i] = (float)(uniform() * 2 - 1);
    for (int64_t i = 0; i < n * k; i++)
        wq[i] = (int8_t)(uniform() * 254.999 - 127);
    for (int64_t o = 0; o < n_outl; o++) {
        oidx[o] = o * (k / n_outl);
        for (int64_t j = 0; j < n; j++)
            wq[j * k + oidx[o]] = 0;
    }
    for (int64_t i = 0; i < n_outl * n; i++)
        oq[i] = (int8_t)(uniform() * 254.999 - 127);
    for (int64_t j = 0; j < n; j++) {
        sw[j] = 0.001f;
        bias[j] = (float)(uniform() - 0.5);
        osc[j] = 0.002f;
    }
    slim_qgemm_pack(wq, n, k, packed, colsum);
    slim_qgemm_args full = {.m = m, .n = n, .k = k, .x = x, .ldx = k, .packed = packed,
                            .colsum = colsum, .w_scale = sw, .bias = bias, .act = act, .y = y,
                            .ldy = n, .n_outl = n_outl, .outl_idx = oidx, .outl_q = oq,
                            .outl_scale = osc};
    slim_qgemm_args plain = full;
    plain.n_outl = 0;
    double *t_full = malloc(sizeof(double) * (size_t)repeat);
    double *t_plain = malloc(sizeof(double) * (size_t)repeat);
    double *t_quant = malloc(sizeof(double) * (size_t)repeat);
    if (!t_full || !t_plain || !t_quant)
        return 1;
    for (int w = 0; w < 3; w++) {
        slim_qgemm(&full, scratch);
        slim_qgemm(&plain, scratch);
    }
    for (int r = 0; r < repeat; r++) {
        double t0 = now_ms();
        slim_qgemm(&full, scratch);
        double t1 = now_ms();
        slim_qgemm(&plain, scratch);
        double t2 = now_ms();
        slim_qgemm_quantize_rows(x, k, m, k, qx, sx, zx);
        double t3 = now_ms();
        t_full[r] = t1 - t0;
        t_plain[r] = t2 - t1;
        t_quant[r] = t3 - t2;
    }
    /* median() sorts: the fastest is then element 0 */
    double mf = median(t_full, repeat), mp = median(t_plain, repeat), mq = median(t_quant, repeat);
    printf("{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"outliers\": %lld, \"threads\": %d, "
           "\"isa\": \"%s%s\", \"full_ms\": %.6f, \"plain_ms\": %.6f, \"quant_ms\": %.6f, "
           "\"full_min\": %.6f, \"plain_min\": %.6f, \"quant_min\": %.6f}\n",
           (long long)m, (long long)n, (long long)k, (long long)n_outl, slim_num_threads(),
           slim_qgemm_isa_name(slim_qgemm_get_isa()), slim_qgemm_amx_active() ? "+amx" : "", mf, mp, mq, t_full[0], t_plain[0], t_quant[0]);
    free(x), free(wq), free(packed), free(colsum), free(sw), free(bias), free(osc), free(y);
    free(oidx), free(oq), free(scratch), free(qx), free(sx), free(zx), free(t_full), free(t_plain), free(t_quant);
    return 0;
}
