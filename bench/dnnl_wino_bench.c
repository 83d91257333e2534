/*
 * dnnl_wino_bench.c - which kernel FusedConv's 3x3 stride-1 parts should
 * run (kernels/cpu/conv_dnnl_build.c: use_winograd, wino_stored,
 * parts_per_thread): oneDNN's float32 direct kernel, its Winograd F(4x4,
 * 3x3) with W transformed on every run (forward_training, what FusedConv
 * runs on large planes), and its F(2x2, 3x3) inference kernel reading W
 * transformed beforehand ("stored"), on one image of each shape, nChw16c
 * in and out, ReLU post-op.
 *
 *     bench_dnnl_wino [C H W M ...]     (default: ResNet's shapes, as
 *                                        FusedConv cuts them on 2 threads)
 *
 * One thread; times are the calling thread's CPU time, so other work on
 * shared cores stretches them far less than wall time. The three kernels
 * alternate within each of 31 trials (about 5e7 flops each), and the
 * ratios are medians of the per-trial ratios, so drift hits all alike.
 * bench/bench_wino.py prints the machine line first and runs this.
 */
#include "dnnl_bench_conv.h"

#include <stdio.h>
#include <stdlib.h>

enum { DIRECT, WINO_RUN, WINO_STORED, KINDS };
#define TRIALS 31

typedef struct kernel {
    slim_bench_conv conv;
    int reps;
} kernel;

/* Makes conv c x h x w -> m, 3x3, pad 1, of this kind; 0 on success. */
static int make(kernel *k, int c, int h, int w, int m, int kind)
{
    k->reps = (int)(5e7 / (2.0 * c * m * 9 * h * w)) + 1;
    return slim_bench_conv_make(&k->conv, c, h, w, m, 3,
                                kind == WINO_RUN ? dnnl_forward_training : dnnl_forward_inference,
                                kind == DIRECT ? dnnl_convolution_direct
                                               : dnnl_convolution_winograd,
                                kind == WINO_STORED);
}

static double once(const kernel *k)
{
    dnnl_exec_arg_t args[5];
    slim_bench_conv_args(&k->conv, args);
    double t0 = slim_bench_thread_ms();
    for (int r = 0; r < k->reps; r++)
        dnnl_primitive_execute(k->conv.prim, slim_bench_stream, 5, args);
    dnnl_stream_wait(slim_bench_stream);
    return (slim_bench_thread_ms() - t0) / k->reps;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), by_value);
    return v[n / 2];
}

static void row(int c, int h, int w, int m)
{
    kernel k[KINDS] = {0};
    int ok[KINDS];
    for (int i = 0; i < KINDS; i++)
        ok[i] = make(&k[i], c, h, w, m, i) == 0;
    double t[KINDS][TRIALS], r[KINDS][TRIALS];
    for (int n = 0; n < TRIALS; n++)
        for (int i = 0; i < KINDS; i++)
            t[i][n] = ok[i] ? once(&k[i]) : -1.0;
    for (int n = 0; n < TRIALS; n++)
        for (int i = 0; i < KINDS; i++)
            r[i][n] = ok[i] && ok[DIRECT] ? t[i][n] / t[DIRECT][n] : -1.0;
    char name[48];
    snprintf(name, sizeof(name), "%dx%dx%d->%d", c, h, w, m);
    printf("%-18s %10.3f", name, ok[DIRECT] ? median(t[DIRECT], TRIALS) : -1.0);
    for (int i = WINO_RUN; i < KINDS; i++)
        printf(" %10.3f %6.2f", ok[i] ? median(t[i], TRIALS) : -1.0, median(r[i], TRIALS));
    printf("\n");
    fflush(stdout);
    for (int i = 0; i < KINDS; i++)
        slim_bench_conv_release(&k[i].conv);
}

int main(int argc, char **argv)
{
    if ((argc - 1) % 4) {
        fprintf(stderr, "usage: bench_dnnl_wino [C H W M ...]\n");
        return 2;
    }
    if (slim_bench_dnnl_init("bench_dnnl_wino"))
        return 1;
    printf("one thread, CPU time, oneDNN %d.%d.%d, medians of %d alternating trials; "
           "ratio: per-trial time over direct's\n",
           dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch, TRIALS);
    printf("%-18s %10s %10s %6s %10s %6s\n", "conv 3x3 (part)", "direct ms", "F4x4 run", "ratio",
           "F2x2 strd", "ratio");
    /* ResNet's 3x3 stride-1 convs as FusedConv cuts them on 2 threads,
     * and the cuts parts_per_thread weighs against them */
    static const int shapes[][4] = {
        {64, 56, 56, 32},  {64, 56, 56, 64},   {128, 28, 28, 64}, {128, 28, 28, 32},
        {256, 14, 14, 128}, {256, 14, 14, 64}, {512, 7, 7, 64},   {512, 7, 7, 128},
    };
    if (argc > 1)
        for (int i = 1; i + 3 < argc; i += 4)
            row(atoi(argv[i]), atoi(argv[i + 1]), atoi(argv[i + 2]), atoi(argv[i + 3]));
    else
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
            row(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
    slim_bench_dnnl_fini();
    return 0;
}
