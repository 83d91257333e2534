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
 */
#include <oneapi/dnnl/dnnl.h>

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

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_dnnl_matmul M K N [--copies C] [--repeat R]\n");
        return 2;
    }
    long m = atol(argv[1]), k = atol(argv[2]), n = atol(argv[3]);
    int copies = 16, repeat = 50;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--copies") == 0)
            copies = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--repeat") == 0)
            repeat = atoi(argv[i + 1]);
    }
    if (m < 1 || k < 1 || n < 1 || copies < 1 || repeat < 1) {
        fprintf(stderr, "bench_dnnl_matmul: M, K, N, C and R must be positive\n");
        return 2;
    }
    omp_set_num_threads(1);
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
