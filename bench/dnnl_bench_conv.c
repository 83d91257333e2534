/*
 * dnnl_bench_conv.c - the oneDNN convolution benches' shared pieces
 * (dnnl_bench_conv.h).
 */
#include "dnnl_bench_conv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void omp_set_num_threads(int n); /* libgomp, which oneDNN links */

dnnl_engine_t slim_bench_engine;
dnnl_stream_t slim_bench_stream;

int slim_bench_dnnl_init(const char *prog)
{
    omp_set_num_threads(1);
    if (dnnl_engine_create(&slim_bench_engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&slim_bench_stream, slim_bench_engine, dnnl_stream_default_flags) !=
            dnnl_success) {
        fprintf(stderr, "%s: no oneDNN CPU engine\n", prog);
        return 1;
    }
    return 0;
}

void slim_bench_dnnl_fini(void)
{
    dnnl_stream_destroy(slim_bench_stream);
    dnnl_engine_destroy(slim_bench_engine);
}

double slim_bench_thread_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

void *slim_bench_filled(size_t n)
{
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, n + 64))
        return NULL;
    for (size_t i = 0; i < (n + 64) / sizeof(float); i++)
        p[i] = (float)(i % 7) * 0.01f;
    return p;
}

int slim_bench_conv_make(slim_bench_conv *k, int c, int h, int w, int m, int ks,
                         dnnl_prop_kind_t prop, dnnl_alg_kind_t alg, bool any_weights)
{
    memset(k, 0, sizeof(*k));
    dnnl_memory_desc_t smd, wmd, bmd, dmd;
    dnnl_dims_t sd = {1, c, h, w}, wd = {m, c, ks, ks}, bd = {m}, dd = {1, m, h, w};
    dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, dnnl_nChw16c);
    dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32,
                                 any_weights ? dnnl_format_tag_any : dnnl_OIhw16i16o);
    dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a);
    dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, dnnl_nChw16c);
    dnnl_dims_t strides = {1, 1}, dil = {0, 0}, pad = {ks / 2, ks / 2};
    dnnl_convolution_desc_t cd;
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_create(&attr);
    dnnl_post_ops_create(&po);
    dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    int bad = dnnl_dilated_convolution_forward_desc_init(&cd, prop, alg, &smd, &wmd, &bmd, &dmd,
                                                         strides, dil, pad, pad) != dnnl_success ||
              dnnl_primitive_desc_create(&pd, &cd, attr, slim_bench_engine, NULL) != dnnl_success;
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (bad)
        return -1;
    /* W in whatever layout the primitive asked for (its values do not
     * matter for timing); the scratchpad may be empty */
    const dnnl_memory_desc_t *mds[5] = {
        &smd, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), &bmd, &dmd,
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0)};
    for (int i = 0; i < 5; i++) {
        k->buf[i] = slim_bench_filled(dnnl_memory_desc_get_size(mds[i]) + 64);
        if (!k->buf[i] || dnnl_memory_create(&k->mem[i], mds[i], slim_bench_engine, k->buf[i]))
            bad = 1;
    }
    if (!bad && dnnl_primitive_create(&k->prim, pd) != dnnl_success)
        bad = 1;
    dnnl_primitive_desc_destroy(pd);
    if (bad) {
        slim_bench_conv_release(k);
        return -1;
    }
    return 0;
}

void slim_bench_conv_args(const slim_bench_conv *k, dnnl_exec_arg_t args[5])
{
    const int which[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST,
                          DNNL_ARG_SCRATCHPAD};
    for (int i = 0; i < 5; i++)
        args[i] = (dnnl_exec_arg_t){which[i], k->mem[i]};
}

void slim_bench_conv_release(slim_bench_conv *k)
{
    if (k->prim)
        dnnl_primitive_destroy(k->prim);
    for (int i = 0; i < 5; i++) {
        dnnl_memory_destroy(k->mem[i]);
        free(k->buf[i]);
    }
    memset(k, 0, sizeof(*k));
}
