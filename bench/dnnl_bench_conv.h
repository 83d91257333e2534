/*
 * dnnl_bench_conv.h - what the oneDNN convolution benches
 * (dnnl_conv_parts_bench.c, dnnl_wino_bench.c) share (dnnl_bench_conv.c):
 * one thread's engine and stream, the calling thread's CPU clock, filled
 * buffers, and one float32 convolution of one image as FusedConv makes it
 * (kernels/cpu/conv_dnnl_build.c): nChw16c in and out, stride 1, pad k/2,
 * ReLU post-op, its scratchpad the caller's.
 *
 *     if (slim_bench_dnnl_init("bench_x")) return 1;
 *     slim_bench_conv k;
 *     if (slim_bench_conv_make(&k, c, h, w, m, 3, dnnl_forward_inference,
 *                              dnnl_convolution_direct, false) == 0) {
 *         dnnl_exec_arg_t args[5];
 *         slim_bench_conv_args(&k, args);
 *         ... dnnl_primitive_execute(k.prim, slim_bench_stream, 5, args) ...
 *         slim_bench_conv_release(&k);
 *     }
 *     slim_bench_dnnl_fini();
 */
#ifndef SLIM_BENCH_DNNL_BENCH_CONV_H
#define SLIM_BENCH_DNNL_BENCH_CONV_H

#include <oneapi/dnnl/dnnl.h>

#include <stdbool.h>
#include <stddef.h>

extern dnnl_engine_t slim_bench_engine;
extern dnnl_stream_t slim_bench_stream;

/* oneDNN on one thread (its OpenMP's), a CPU engine and a stream; 1 after
 * saying on stderr that prog found no engine, 0 when ready. */
int slim_bench_dnnl_init(const char *prog);
void slim_bench_dnnl_fini(void);

/* The calling thread's CPU time in ms: other work on shared cores
 * stretches it far less than wall time. */
double slim_bench_thread_ms(void);

/* A 64-byte aligned buffer of n + 64 bytes of small nonzero floats (no
 * denormals); NULL when out of memory. */
void *slim_bench_filled(size_t n);

typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t mem[5]; /* src, weights, bias, dst, scratchpad */
    void *buf[5];
} slim_bench_conv;

/* Conv c x h x w -> m, k x k, of prop kind and algorithm alg, W OIhw16i16o
 * (any_weights: the layout oneDNN asks for, as a stored Winograd W);
 * 0 on success, -1 when oneDNN does not make it (k is then released). */
int slim_bench_conv_make(slim_bench_conv *k, int c, int h, int w, int m, int ks,
                         dnnl_prop_kind_t prop, dnnl_alg_kind_t alg, bool any_weights);
/* The five arguments of one run. */
void slim_bench_conv_args(const slim_bench_conv *k, dnnl_exec_arg_t args[5]);
void slim_bench_conv_release(slim_bench_conv *k);

#endif
