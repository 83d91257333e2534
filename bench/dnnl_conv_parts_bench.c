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
#include <oneapi/dnnl/dnnl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void omp_set_num_threads(int n); /* libgomp, which oneDNN links */

static dnnl_engine_t engine;
static dnnl_stream_t stream;

static double thread_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* A buffer of n bytes with small nonzero floats (no denormals). */
static void *filled(size_t n)
{
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, n + 64))
        return NULL;
    for (size_t i = 0; i < (n + 64) / sizeof(float); i++)
        p[i] = (float)(i % 7) * 0.01f;
    return p;
}

/* The best ms of one run of conv c x h x w -> m, k x k, stride 1, pad k/2;
 * negative when oneDNN does not make it. */
static double conv_ms(int c, int h, int w, int m, int k, int wino, double flops_per_trial)
{
    dnnl_memory_desc_t smd, wmd, bmd, dmd;
    dnnl_dims_t sd = {1, c, h, w}, wd = {m, c, k, k}, bd = {m}, dd = {1, m, h, w};
    dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, dnnl_nChw16c);
    dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, dnnl_OIhw16i16o);
    dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a);
    dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, dnnl_nChw16c);
    dnnl_dims_t strides = {1, 1}, dil = {0, 0}, pad = {k / 2, k / 2};
    dnnl_convolution_desc_t cd;
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_primitive_attr_create(&attr);
    dnnl_post_ops_create(&po);
    dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    /* Winograd as FusedConv asks for it: forward_training reads W packed */
    dnnl_status_t st = dnnl_dilated_convolution_forward_desc_init(
        &cd, wino ? dnnl_forward_training : dnnl_forward_inference,
        wino ? dnnl_convolution_winograd : dnnl_convolution_direct, &smd, &wmd, &bmd, &dmd,
        strides, dil, pad, pad);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &cd, attr, engine, NULL);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return -1.0;
    const dnnl_memory_desc_t *spmd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t sp_bytes = dnnl_memory_desc_get_size(spmd);
    dnnl_primitive_create(&prim, pd);
    void *buf[5] = {filled(dnnl_memory_desc_get_size(&smd)), filled(dnnl_memory_desc_get_size(&wmd)),
                    filled(sizeof(float) * (size_t)m), filled(dnnl_memory_desc_get_size(&dmd)),
                    sp_bytes ? filled(sp_bytes) : NULL};
    dnnl_memory_t mem[5] = {NULL, NULL, NULL, NULL, NULL};
    const dnnl_memory_desc_t *mds[5] = {&smd, &wmd, &bmd, &dmd, spmd};
    for (int i = 0; i < (sp_bytes ? 5 : 4); i++)
        dnnl_memory_create(&mem[i], mds[i], engine, buf[i]);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]},
                               {DNNL_ARG_BIAS, mem[2]}, {DNNL_ARG_DST, mem[3]},
                               {DNNL_ARG_SCRATCHPAD, mem[4]}};
    int reps = (int)(flops_per_trial / (2.0 * c * m * k * k * h * w)) + 1;
    double best = 1e30;
    for (int t = 0; t < 7; t++) {
        double t0 = thread_ms();
        for (int r = 0; r < reps; r++) {
            dnnl_primitive_execute(prim, stream, sp_bytes ? 5 : 4, args);
            dnnl_stream_wait(stream);
        }
        double ms = (thread_ms() - t0) / reps;
        best = ms < best ? ms : best;
    }
    for (int i = 0; i < 5; i++) {
        dnnl_memory_destroy(mem[i]);
        free(buf[i]);
    }
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
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
    omp_set_num_threads(1);
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        fprintf(stderr, "bench_dnnl_conv_parts: no oneDNN CPU engine\n");
        return 1;
    }
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
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
    return 0;
}
