/*
 * dnnl_conv_parts_bench.c - what one part of FusedConv's output-channel
 * split costs (kernels/cpu/conv_dnnl_build.c, parts_per_thread): oneDNN's
 * float32 direct (or Winograd) convolution of one image, nChw16c in and
 * out, W OIhw16i16o, ReLU post-op, as FusedConv makes it, for the whole
 * output and for 1/P of its channels, P = 2, 4, 8, 16.
 *
 *     bench_dnnl_conv_parts [--repeat-flops F]
 *
 * One thread; times are the calling thread's CPU time (the best of 7
 * trials of about F flops each, default 2e8), so other work on shared
 * cores stretches them far less than wall time. Each row gives the whole
 * conv's ms and, per P, P x one part's ms over the whole's: below the
 * P = 2 figure, cutting finer than one part per thread (of two) pays.
 * The shapes are ResNet-18/50's and MobileNetV2's at 224x224.
 */
#include "dnnl_bench_conv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The best ms of one run of conv c x h x w -> m, k x k, stride 1, pad k/2;
 * negative when oneDNN does not make it. */
static double conv_ms(int c, int h, int w, int m, int k, int wino, double flops_per_trial)
{
    slim_bench_conv conv;
    /* Winograd as FusedConv asks for it: forward_training reads W packed */
    if (slim_bench_conv_make(&conv, c, h, w, m, k,
                             wino ? dnnl_forward_training : dnnl_forward_inference,
                             wino ? dnnl_convolution_winograd : dnnl_convolution_direct, false))
        return -1.0;
    dnnl_exec_arg_t args[5];
    slim_bench_conv_args(&conv, args);
    int reps = (int)(flops_per_trial / (2.0 * c * m * k * k * h * w)) + 1;
    double best = 1e30;
    for (int t = 0; t < 7; t++) {
        double t0 = slim_bench_thread_ms();
        for (int r = 0; r < reps; r++) {
            dnnl_primitive_execute(conv.prim, slim_bench_stream, 5, args);
            dnnl_stream_wait(slim_bench_stream);
        }
        double ms = (slim_bench_thread_ms() - t0) / reps;
        best = ms < best ? ms : best;
    }
    slim_bench_conv_release(&conv);
    return best;
}

int main(int argc, char **argv)
{
    double flops = 2e8;
    if (argc == 3 && strcmp(argv[1], "--repeat-flops") == 0)
        flops = atof(argv[2]);
    else if (argc != 1) {
        fprintf(stderr, "usage: bench_dnnl_conv_parts [--repeat-flops F]\n");
        return 2;
    }
    if (slim_bench_dnnl_init("bench_dnnl_conv_parts"))
        return 1;
    /* c, h (= w), m, k, Winograd */
    static const int shapes[][5] = {
        {64, 56, 64, 3, 1},   {128, 28, 128, 3, 1}, {128, 28, 128, 3, 0}, {256, 14, 256, 3, 0},
        {512, 7, 512, 3, 0},  {256, 56, 64, 1, 0},  {64, 56, 256, 1, 0},  {512, 28, 128, 1, 0},
        {128, 28, 512, 1, 0}, {1024, 14, 256, 1, 0}, {256, 14, 1024, 1, 0}, {2048, 7, 512, 1, 0},
        {512, 7, 2048, 1, 0}, {144, 56, 24, 1, 0},  {192, 28, 32, 1, 0},  {576, 14, 96, 1, 0},
        {960, 7, 160, 1, 0},  {320, 7, 1280, 1, 0},
    };
    printf("one thread, CPU time, oneDNN %d.%d.%d; P x one part of m/P channels over the whole\n",
           dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch);
    printf("%-24s %9s %7s %7s %7s %7s\n", "conv", "whole ms", "P=2", "P=4", "P=8", "P=16");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const int *s = shapes[i];
        char name[48];
        snprintf(name, sizeof(name), "%dx%dx%d->%d %dx%d%s", s[0], s[1], s[1], s[2], s[3], s[3],
                 s[4] ? " wino" : "");
        double whole = conv_ms(s[0], s[1], s[1], s[2], s[3], s[4], flops);
        printf("%-24s %9.3f", name, whole);
        for (int p = 2; p <= 16; p *= 2) {
            double part = s[2] / p >= 16 ? conv_ms(s[0], s[1], s[1], s[2] / p, s[3], s[4], flops)
                                         : -1.0;
            if (part > 0 && whole > 0)
                printf(" %7.2f", part * p / whole);
            else
                printf(" %7s", "-");
        }
        printf("\n");
        fflush(stdout);
    }
    slim_bench_dnnl_fini();
    return 0;
}
