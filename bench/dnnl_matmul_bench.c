/*
 * dnnl_matmul_bench.c - how close oneDNN's float32 matmul (the kernel
 * FusedMatMul runs, kernels/cpu/matmul_dnnl.c) comes to the FMA peak on
 * one core, with its weights hot in cache and streamed from memory.
 *
 *     bench_dnnl_matmul M K N [--copies C] [--repeat R]
 *
 * W [K, N] is packed once in the layout oneDNN picks (as FusedMatMul packs
 * it) into C copies; "hot" runs the product R times on one copy, "cold"
 * runs it R times cycling through the copies, so with C x W larger than
 * the last-level cache every run reads its weights from memory, as a
 * model's layers do. Prints GFLOP/s (2 M K N per run; best run for hot,
 * all runs for cold). One thread: compare with `bench_qgemm --peak-f32`
 * divided by its thread count. Used to bound what fp32 BERT rows can gain
 * (README, issue 13).
 *
 *     bench_dnnl_matmul --stream MB [--threads T] [--repeat R]
 *
 * What T threads (2 by default) stream from memory: each reads its own
 * MB / T megabytes with 64-byte loads, R passes (5 by default), and the
 * best pass's GB/s is printed. The ceiling of a product at few rows, whose
 * time is the time to read its weights (BERT-base at 16 tokens: 340 MB a
 * run; issue 34).
 */
#include "matmul_small.h"

#include <oneapi/dnnl/dnnl.h>

#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void omp_set_num_threads(int n); /* libgomp, which oneDNN links */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int fail(const char *what, dnnl_status_t st)
{
    fprintf(stderr, "bench_dnnl_matmul: %s failed (oneDNN status %d)\n", what, (int)st);
    return 1;
}

typedef struct stream_part {
    const char *p;
    size_t bytes;
    float sum;
} stream_part;

/* One read of the part, 64 bytes a load, four chains so that the adds do
 * not limit it. */
__attribute__((target("avx512f"))) static void *stream_read(void *arg)
{
    stream_part *sp = arg;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t o = 0; o + 256 <= sp->bytes; o += 256) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps((const float *)(sp->p + o)));
        s1 = _mm512_add_ps(s1, _mm512_load_ps((const float *)(sp->p + o + 64)));
        s2 = _mm512_add_ps(s2, _mm512_load_ps((const float *)(sp->p + o + 128)));
        s3 = _mm512_add_ps(s3, _mm512_load_ps((const float *)(sp->p + o + 192)));
    }
    sp->sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    return NULL;
}

static int stream_bench(double mb, int threads, int repeat)
{
    if (mb <= 0 || threads < 1 || threads > 64 || repeat < 1) {
        fprintf(stderr, "bench_dnnl_matmul: --stream MB, --threads and --repeat must be positive\n");
        return 2;
    }
    size_t per = (size_t)(mb * 1e6 / threads) / 256 * 256;
    char *buf = aligned_alloc(64, per * (size_t)threads);
    if (!buf) {
        fprintf(stderr, "bench_dnnl_matmul: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < per * (size_t)threads; i += sizeof(float))
        *(float *)(buf + i) = (float)(i & 255) * 1e-3f;
    stream_part parts[64];
    pthread_t tid[64];
    double best = 1e30;
    float check = 0;
    for (int r = 0; r < repeat + 1; r++) { /* the first pass faults pages in */
        double t = now_s();
        for (int i = 0; i < threads; i++) {
            parts[i] = (stream_part){buf + per * (size_t)i, per, 0};
            pthread_create(&tid[i], NULL, stream_read, &parts[i]);
        }
        for (int i = 0; i < threads; i++) {
            pthread_join(tid[i], NULL);
            check += parts[i].sum;
        }
        t = now_s() - t;
        if (r && t < best)
            best = t;
    }
    printf("stream %.1f MB on %d threads: best of %d passes %.2f ms, %.1f GB/s (sum %g)\n",
           (double)per * threads / 1e6, threads, repeat, best * 1e3,
           (double)per * threads / best * 1e-9, (double)check);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--stream") == 0) {
        int threads = 2, repeat = 5;
        for (int i = 3; i + 1 < argc; i += 2) {
            if (strcmp(argv[i], "--threads") == 0)
                threads = atoi(argv[i + 1]);
            else if (strcmp(argv[i], "--repeat") == 0)
                repeat = atoi(argv[i + 1]);
        }
        return stream_bench(atof(argv[2]), threads, repeat);
    }
    if (argc < 4) {
        fprintf(stderr, "usage: bench_dnnl_matmul M K N [--copies C] [--repeat R]\n"
                        "       bench_dnnl_matmul --stream MB [--threads T] [--repeat R]\n");
        return 2;
    }
    long m = atol(argv[1]), k = atol(argv[2]), n = atol(argv[3]);
    int copies = 16, repeat = 50, ours = 0;
    for (int i = 4; i < argc; i++)
        if (strcmp(argv[i], "--ours") == 0)
            ours = 1;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--ours") == 0)
            i--;
        else if (strcmp(argv[i], "--copies") == 0)
            copies = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--repeat") == 0)
            repeat = atoi(argv[i + 1]);
    }
    if (m < 1 || k < 1 || n < 1 || copies < 1 || repeat < 1) {
        fprintf(stderr, "bench_dnnl_matmul: M, K, N, C and R must be positive\n");
        return 2;
    }
    omp_set_num_threads(1);
    setenv("SLIM_NUM_THREADS", "1", 1); /* our loop on this thread too */
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_status_t st = dnnl_engine_create(&eng, dnnl_cpu, 0);
    if (st != dnnl_success || (st = dnnl_stream_create(&strm, eng, 0)) != dnnl_success)
        return fail("engine", st);

    dnnl_memory_desc_t a_md, w_any, w_plain, d_md;
    dnnl_dims_t ad = {m, k}, wd = {k, n}, dd = {m, n};
    dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&w_any, 2, wd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&w_plain, 2, wd, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&d_md, 2, dd, dnnl_f32, dnnl_ab);
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    if ((st = dnnl_matmul_desc_init(&md, &a_md, &w_any, NULL, &d_md)) != dnnl_success ||
        (st = dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL)) != dnnl_success)
        return fail("matmul", st);
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    dnnl_memory_desc_t w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    size_t wbytes = dnnl_memory_desc_get_size(&w_md);
    dnnl_primitive_t mm;
    if ((st = dnnl_primitive_create(&mm, pd)) != dnnl_success)
        return fail("matmul primitive", st);

    float *a = aligned_alloc(64, ((size_t)m * (size_t)k * 4 + 63) / 64 * 64);
    float *w = aligned_alloc(64, ((size_t)k * (size_t)n * 4 + 63) / 64 * 64);
    float *d = aligned_alloc(64, ((size_t)m * (size_t)n * 4 + 63) / 64 * 64);
    char *packed = aligned_alloc(64, (wbytes + 63) / 64 * 64 * (size_t)copies);
    if (!a || !w || !d || !packed) {
        fprintf(stderr, "bench_dnnl_matmul: out of memory\n");
        return 1;
    }
    for (long i = 0; i < m * k; i++)
        a[i] = (float)(i % 13) * 0.01f - 0.06f;
    for (long i = 0; i < k * n; i++)
        w[i] = (float)(i % 7) * 0.02f - 0.06f;

    /* Pack W into each copy, as FusedMatMul's pass does once at load. */
    size_t stride = (wbytes + 63) / 64 * 64;
    dnnl_memory_t wm_plain, am, dm, *wm = calloc((size_t)copies, sizeof(*wm));
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t reorder;
    if (!wm || dnnl_memory_create(&wm_plain, &w_plain, eng, w) != dnnl_success ||
        dnnl_memory_create(&am, &a_md, eng, a) != dnnl_success ||
        dnnl_memory_create(&dm, &d_md, eng, d) != dnnl_success ||
        dnnl_reorder_primitive_desc_create(&rpd, &w_plain, eng, &w_md, eng, NULL) != dnnl_success ||
        dnnl_primitive_create(&reorder, rpd) != dnnl_success)
        return fail("packing", dnnl_runtime_error);
    for (int c = 0; c < copies; c++) {
        if (dnnl_memory_create(&wm[c], &w_md, eng, packed + stride * (size_t)c) != dnnl_success)
            return fail("packed memory", dnnl_runtime_error);
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, wm_plain}, {DNNL_ARG_TO, wm[c]}};
        if ((st = dnnl_primitive_execute(reorder, strm, 2, ra)) != dnnl_success)
            return fail("pack", st);
    }
    dnnl_stream_wait(strm);

    double flop = 2.0 * (double)m * (double)k * (double)n, best = 1e30, cold = 0;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm[0]}, {DNNL_ARG_DST, dm}};
    for (int r = 0; r < repeat + 1; r++) { /* the first run warms up */
        double t = now_s();
        if ((st = dnnl_primitive_execute(mm, strm, 3, args)) != dnnl_success)
            return fail("run", st);
        dnnl_stream_wait(strm);
        t = now_s() - t;
        if (r && t < best)
            best = t;
    }
    for (int r = 0; r < copies; r++) { /* one pass to fault every copy in */
        args[1].memory = wm[r];
        dnnl_primitive_execute(mm, strm, 3, args);
    }
    dnnl_stream_wait(strm);
    double t0 = now_s();
    for (int r = 0; r < repeat; r++) {
        args[1].memory = wm[(r + 1) % copies];
        dnnl_primitive_execute(mm, strm, 3, args);
        dnnl_stream_wait(strm);
    }
    cold = (now_s() - t0) / repeat;
    if (ours && m <= SLIM_FMM_SMALL_CAP) {
        int64_t n0[2] = {0, n};
        size_t off[2] = {0, wbytes / sizeof(float)};
        slim__fmm_rows_parts parts = {.n_parts = 1, .n0 = n0, .off = off, .wmd = &w_md};
        slim__fmm_small *sm = slim__fmm_small_make(k, &parts);
        float *bias = calloc((size_t)n, sizeof(float));
        if (!sm || !bias) {
            fprintf(stderr, "bench_dnnl_matmul: our loop does not take this layout here\n");
            return 1;
        }
        double t_dnnl = 0, t_ours = 0;
        for (int r = 0; r < repeat; r++) {
            args[1].memory = wm[(2 * r + 1) % copies];
            double t = now_s();
            dnnl_primitive_execute(mm, strm, 3, args);
            dnnl_stream_wait(strm);
            t_dnnl += now_s() - t;
            t = now_s();
            slim__fmm_small_run(sm, a, (const float *)(packed + stride * (size_t)((2 * r + 2) % copies)),
                                bias, d, m, 0);
            t_ours += now_s() - t;
        }
        printf("alternating cold runs: oneDNN %.1f GFLOP/s (%.1f GB/s of weights), ours %.1f "
               "GFLOP/s (%.1f GB/s), ours/oneDNN time %.3f\n",
               flop * repeat / t_dnnl * 1e-9, (double)wbytes * repeat / t_dnnl * 1e-9,
               flop * repeat / t_ours * 1e-9, (double)wbytes * repeat / t_ours * 1e-9,
               t_ours / t_dnnl);
        slim__fmm_small_free(sm);
        free(bias);
    }
    printf("M %ld K %ld N %ld, %s, one thread: hot %.1f GFLOP/s, cold (%d copies, %.1f MB) "
           "%.1f GFLOP/s\n",
           m, k, n, impl, flop / best * 1e-9, copies, (double)stride * copies / 1e6,
           flop / cold * 1e-9);
    for (int c = 0; c < copies; c++)
        dnnl_memory_destroy(wm[c]);
    dnnl_memory_destroy(wm_plain);
    dnnl_memory_destroy(am);
    dnnl_memory_destroy(dm);
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_primitive_destroy(mm);
    dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    free(wm);
    free(packed);
    free(a);
    free(w);
    free(d);
    return 0;
}
