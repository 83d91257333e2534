/*
 * conv_dnnl_pack.c - what FusedConv (conv_dnnl.c) needs from oneDNN around
 * its convolutions: the CPU engine, a stream per thread with oneDNN kept
 * to that thread, reorders, and the weights' packed layouts
 * (slim_fconv_pack, which the fuse_conv pass calls at load).
 */
#include "conv_dnnl.h"
#include "conv_dnnl_impl.h"
#include "dnnl_mem.h"
#include "matmul_dnnl.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

void omp_set_num_threads(int n); /* libgomp, which oneDNN links */

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static __thread dnnl_stream_t thread_stream;
static __thread bool thread_single;

static void engine_init(void)
{
    slim__dnnl_on_idle(); /* matmul_dnnl.c: one hook for oneDNN's cache */
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        engine = NULL;
}

dnnl_engine_t slim__fconv_engine(void)
{
    pthread_once(&engine_once, engine_init);
    return engine;
}

/* The calling thread's stream (NULL when oneDNN cannot give one), with
 * oneDNN kept to this thread. Streams of a CPU engine are cheap, but not
 * free: one per thread, kept. */
dnnl_stream_t slim__fconv_stream(void)
{
    if (!thread_single) {
        omp_set_num_threads(1);
        thread_single = true;
    }
    if (!thread_stream && slim__fconv_engine())
        if (dnnl_stream_create(&thread_stream, engine, dnnl_stream_default_flags) != dnnl_success)
            thread_stream = NULL;
    return thread_stream;
}

int slim_fconv_weights_format(int64_t c, int64_t m, int64_t group)
{
    if (group == c && group == m && c % 16 == 0)
        return SLIM_FCONV_W_DEPTHWISE;
    if (group != 1 || m % 8 || m < 1)
        return -1;
    if (c % 8 == 0 && c > 0)
        return SLIM_FCONV_W_BLOCKED;
    if (c >= 1 && c <= 4)
        return SLIM_FCONV_W_PLAIN_SRC;
    return -1;
}

void slim_fconv_packed_dims(int wfmt, int64_t m, int64_t c_per_group, int64_t kh, int64_t kw,
                            int64_t dims[4])
{
    dims[0] = wfmt == SLIM_FCONV_W_DEPTHWISE ? m : slim__fconv_round16(m);
    dims[1] = wfmt == SLIM_FCONV_W_BLOCKED ? slim__fconv_round16(c_per_group) : c_per_group;
    dims[2] = kh;
    dims[3] = kw;
}

/* W's descriptor with m output channels (a slice of them when packed) of
 * c input channels per group; oneDNN pads m and (blocked) c to 16. */
void slim__fconv_weights_md(dnnl_memory_desc_t *md, int64_t m, int64_t c, int64_t kh, int64_t kw,
                       int wfmt, bool packed)
{
    if (wfmt == SLIM_FCONV_W_DEPTHWISE) {
        dnnl_dims_t d = {m, 1, 1, kh, kw};
        dnnl_memory_desc_init_by_tag(md, 5, d, dnnl_f32, packed ? dnnl_Goihw16g : dnnl_goihw);
        return;
    }
    dnnl_dims_t d = {m, c, kh, kw};
    dnnl_format_tag_t tag = !packed ? dnnl_oihw
                            : wfmt == SLIM_FCONV_W_BLOCKED ? dnnl_OIhw16i16o : dnnl_Ohwi16o;
    dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, tag);
}

/* Runs one reorder between two memories over the given buffers. */
dnnl_status_t slim__fconv_run_reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *smd, void *src,
                                 const dnnl_memory_desc_t *dmd, void *dst, dnnl_stream_t s)
{
    dnnl_memory_t ms = NULL, md = NULL;
    /* kept per thread and repointed, not made per run (dnnl_mem.c) */
    slim__dnnl_mem_begin();
    dnnl_status_t st = slim__dnnl_mem_bind(smd, src, &ms);
    if (st == dnnl_success)
        st = slim__dnnl_mem_bind(dmd, dst, &md);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
        st = dnnl_primitive_execute(r, s, 2, args);
    }
    return st;
}

dnnl_status_t slim__fconv_make_reorder(dnnl_primitive_t *out, const dnnl_memory_desc_t *a,
                                  const dnnl_memory_desc_t *b)
{
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, a, engine, b, engine, NULL);
    if (st != dnnl_success)
        return st;
    st = dnnl_primitive_create(out, pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

slim_status slim_fconv_pack(const slim_tensor *w, int64_t group, int wfmt, slim_tensor *out,
                            slim_err *err)
{
    if (!slim__fconv_engine())
        return slim_errf(err, SLIM_EUNSUPPORTED, "oneDNN has no CPU engine");
    memset(out, 0, sizeof(*out));
    int64_t dims[4];
    (void)group; /* depthwise: group == M */
    slim_fconv_packed_dims(wfmt, w->dims[0], w->dims[1], w->dims[2], w->dims[3], dims);
    slim_tensor_set_shape(out, SLIM_F32, 4, dims);
    dnnl_memory_desc_t a, b;
    slim__fconv_weights_md(&a, w->dims[0], w->dims[1], w->dims[2], w->dims[3], wfmt, false);
    slim__fconv_weights_md(&b, w->dims[0], w->dims[1], w->dims[2], w->dims[3], wfmt, true);
    if (dnnl_memory_desc_get_size(&b) != sizeof(float) * (size_t)slim_tensor_numel(out))
        return slim_errf(err, SLIM_EINTERNAL, "oneDNN's packed weights are not %lldx%lldx%lldx%lld",
                         (long long)dims[0], (long long)dims[1], (long long)dims[2],
                         (long long)dims[3]);
    slim_status st = slim_tensor_alloc(out, err);
    if (st)
        return st;
    /* The padding channels must read as zeros; the reorder may leave them. */
    memset(out->data, 0, sizeof(float) * (size_t)slim_tensor_numel(out));
    dnnl_primitive_t r = NULL;
    dnnl_stream_t s = slim__fconv_stream();
    dnnl_status_t ds = s ? slim__fconv_make_reorder(&r, &a, &b) : dnnl_runtime_error;
    if (ds == dnnl_success)
        ds = slim__fconv_run_reorder(r, &a, w->data, &b, out->data, s);
    if (ds == dnnl_success)
        ds = dnnl_stream_wait(s);
    dnnl_primitive_destroy(r);
    if (ds != dnnl_success) {
        slim_tensor_release(out);
        return slim_errf(err, SLIM_EINTERNAL, "oneDNN could not pack the weights (status %d)",
                         (int)ds);
    }
    return SLIM_OK;
}

