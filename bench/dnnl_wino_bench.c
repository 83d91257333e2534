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
#include <oneapi/dnnl/dnnl.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void omp_set_num_threads(int n); /* libgomp, which oneDNN links */

enum { DIRECT, WINO_RUN, WINO_STORED, KINDS };
#define TRIALS 31

static dnnl_engine_t engine;
static dnnl_stream_t stream;

typedef struct kernel {
    dnnl_primitive_t prim;
    dnnl_memory_t mem[5];
    void *buf[5];
    int reps;
} kernel;

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

/* Makes conv c x h x w -> m, 3x3, pad 1, of this kind; 0 on success. */
static int make(kernel *k, int c, int h, int w, int m, int kind)
{
    dnnl_memory_desc_t smd, wmd, bmd, dmd;
    dnnl_dims_t sd = {1, c, h, w}, wd = {m, c, 3, 3}, bd = {m}, dd = {1, m, h, w};
    dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, dnnl_nChw16c);
    dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32,
                                 kind == WINO_STORED ? dnnl_format_tag_any : dnnl_OIhw16i16o);
    dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a);
    dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, dnnl_nChw16c);
    dnnl_dims_t strides = {1, 1}, dil = {0, 0}, pad = {1, 1};
    dnnl_convolution_desc_t cd;
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_attr_create(&attr);
    dnnl_post_ops_create(&po);
    dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    int bad = dnnl_dilated_convolution_forward_desc_init(
                  &cd, kind == WINO_RUN ? dnnl_forward_training : dnnl_forward_inference,
                  kind == DIRECT ? dnnl_convolution_direct : dnnl_convolution_winograd, &smd,
                  &wmd, &bmd, &dmd, strides, dil, pad, pad) != dnnl_success ||
              dnnl_primitive_desc_create(&pd, &cd, attr, engine, NULL) != dnnl_success;
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (bad)
        return -1;
    /* the stored kernel's W: whatever layout it asked for (values do not
     * matter for timing) */
    const dnnl_memory_desc_t *mds[5] = {
        &smd, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), &bmd, &dmd,
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0)};
    for (int i = 0; i < 5; i++) {
        k->buf[i] = filled(dnnl_memory_desc_get_size(mds[i]) + 64);
        if (!k->buf[i] || dnnl_memory_create(&k->mem[i], mds[i], engine, k->buf[i]))
            bad = 1;
    }
    if (!bad && dnnl_primitive_create(&k->prim, pd) != dnnl_success)
        bad = 1;
    dnnl_primitive_desc_destroy(pd);
    k->reps = (int)(5e7 / (2.0 * c * m * 9 * h * w)) + 1;
    return bad ? -1 : 0;
}

static double once(const kernel *k)
{
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, k->mem[0]}, {DNNL_ARG_WEIGHTS, k->mem[1]},
                               {DNNL_ARG_BIAS, k->mem[2]}, {DNNL_ARG_DST, k->mem[3]},
                               {DNNL_ARG_SCRATCHPAD, k->mem[4]}};
    double t0 = thread_ms();
    for (int r = 0; r < k->reps; r++)
        dnnl_primitive_execute(k->prim, stream, 5, args);
    dnnl_stream_wait(stream);
    return (thread_ms() - t0) / k->reps;
}

static void release(kernel *k)
{
    dnnl_primitive_destroy(k->prim);
    for (int i = 0; i < 5; i++) {
        dnnl_memory_destroy(k->mem[i]);
        free(k->buf[i]);
    }
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
        release(&k[i]);
}

int main(int argc, char **argv)
{
    if ((argc - 1) % 4) {
        fprintf(stderr, "usage: bench_dnnl_wino [C H W M ...]\n");
        return 2;
    }
    omp_set_num_threads(1);
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        fprintf(stderr, "bench_dnnl_wino: no oneDNN CPU engine\n");
        return 1;
    }
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
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
    return 0;
}
