/*
 * matmul_dnnl.c - FusedMatMul (com.slimserve): A x W + bias, then an
 * optional activation (Relu, or GELU in its erf form), on oneDNN's matmul.
 *
 * slimserve's MatMul packs W's panels on every call (sgemm does), which at
 * the few rows of a short sequence reads and writes the weights once more
 * than the product reads them. Here W is packed once, at load, by the
 * fuse_matmul pass (passes/fuse_matmul.c), into the blocked layout the
 * matmul kernel (brgemm, AVX-512) reads, replacing the original. The bias
 * and the activation run in the kernel's output stage, so the Add and the
 * five nodes of an exported GELU never touch memory.
 *
 * Threads: like FusedConv (conv_dnnl.c), oneDNN runs single-threaded and
 * the pool splits the work: W's columns are cut into slim_num_threads()
 * parts (multiples of 64), each packed on its own and run as its own
 * primitive writing its column slice of Y. Each execution brings its own
 * scratchpad (the library's is global in this build).
 *
 * Row invariance: with slim_gemm_row_invariant() on, rows go through in
 * tiles of ROW_TILE with primitives made for ROW_TILE rows (the last tile
 * zero-padded), so a row's result does not depend on how many rows came
 * with it. matmul_rows.c runs those tiles in column blocks that stay in
 * cache (1.4x faster at 512 rows; the same bits as the tiles per part on
 * the encoder bench_serving.py serves), which remain here for layouts it
 * cannot cut. Otherwise one primitive per part covers all rows (or, with
 * more than one part, even chunks of up to ROW_CHUNK rows); primitives
 * are made on first use per row count and cached.
 *
 * oneDNN's blocked layout has N's blocks of 64 outermost, so the parts
 * side by side are also the layout of all N columns at once
 * (layout_whole checks it). From WHOLE_MIN_ROWS rows, chunks of rows run
 * one primitive over that whole weight, writing Y's rows in place; a part
 * writes a dense buffer that is then copied into Y's column slice, since
 * brgemm takes no strided destination (oneDNN's strided gemm:jit would
 * need W unpacked). BERT-base at batch 8 x 128 tokens: 0.967x the time.
 */
#include "matmul_dnnl.h"
#include "matmul_layout.h"
#include "matmul_rows.h"
#include "matmul_small.h"
#include "alloc_trim.h"
#include "device.h"

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void omp_set_num_threads(int n); /* libgomp, which oneDNN links */

#define ROW_TILE 16
#define ROW_CHUNK 128  /* rows per task when not row-invariant, with parts */
#define WHOLE_MIN_ROWS 256 /* from here, row chunks over all columns (whole) */
#define NOMINAL_M 128  /* rows the packed layout is chosen for */
#define CACHE_SLOTS 8
#define MAX_PARTS SLIM_FMM_MAX_PARTS

typedef struct fmm_layout {
    int n_parts;
    int64_t n0[MAX_PARTS + 1];       /* column bounds */
    size_t off[MAX_PARTS + 1];       /* float offsets of each part in Wp */
    dnnl_memory_desc_t wmd[MAX_PARTS];
} fmm_layout;

typedef struct fmm_prims {
    int64_t m;
    bool whole; /* one primitive over all N columns (whole_md), in prim[0] */
    dnnl_primitive_t prim[MAX_PARTS];
    dnnl_memory_desc_t src_md, dst_md[MAX_PARTS], bias_md[MAX_PARTS], scratch_md[MAX_PARTS];
    size_t scratch_bytes[MAX_PARTS];
} fmm_prims;

typedef struct fmm_state {
    int64_t k, n;
    int act;
    bool foreign; /* packed by another CPU or oneDNN build: not run */
    fmm_layout lay;
    bool whole_ok;               /* the parts side by side are whole_md */
    dnnl_memory_desc_t whole_md; /* all of Wp as one [K, N] weight */
    pthread_mutex_t mu;
    slim__fmm_rows *rows;        /* the row-invariant product (matmul_rows.c) */
    bool rows_tried;             /* made, or found not to fit the layout */
    slim__fmm_small *small;      /* a few rows in our own loop (matmul_small.c) */
    int n_cached;
    fmm_prims *cache[CACHE_SLOTS];
} fmm_state;

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static __thread dnnl_stream_t thread_stream;

/* oneDNN keeps every primitive it compiled (JIT code included) in a cache
 * of its own, up to its capacity, whatever model asked for it: once no
 * model is held (alloc_trim.h), a capacity of 0 empties it, and the old
 * capacity is set back for the next model. The primitives a loaded model
 * keeps (fmm_prims) hold references of their own and are not touched.
 * Convolutions' primitives go through the same cache. */
static void drop_primitive_cache(void)
{
    int cap = 0;
    if (dnnl_get_primitive_cache_capacity(&cap) == dnnl_success && cap > 0) {
        dnnl_set_primitive_cache_capacity(0);
        dnnl_set_primitive_cache_capacity(cap);
    }
    /* The library's own code: 2.5 MiB of text paged in by the first
     * product (MiniLM int8: sgemm for attention), clean and unused until
     * a model runs again, which pages back what it needs (docs/memory.md,
     * "Giving back"). */
    slim_memory_page_out_object(dnnl_version());
}

void slim__dnnl_on_idle(void)
{
    slim_memory_on_idle(drop_primitive_cache);
}

static void engine_init(void)
{
    slim__dnnl_on_idle();
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        engine = NULL;
}

static dnnl_stream_t get_stream(void)
{
    pthread_once(&engine_once, engine_init);
    if (!thread_stream && engine) {
        omp_set_num_threads(1);
        if (dnnl_stream_create(&thread_stream, engine, dnnl_stream_default_flags) != dnnl_success)
            thread_stream = NULL;
    }
    return thread_stream;
}

/* The parts and their packed layouts; the pass and prepare both call it,
 * so the layout the weights were packed in is the one the kernel reads.
 * bounds (n_parts + 1 column bounds) are a file's; NULL: one part per
 * thread, in multiples of 64 columns. */
static dnnl_status_t layout_make(int64_t k, int64_t n, const int64_t *bounds, int n_parts,
                                 fmm_layout *lay)
{
    if (!get_stream())
        return dnnl_runtime_error;
    int parts = n_parts;
    if (bounds) {
        if (parts < 1 || parts > MAX_PARTS)
            return dnnl_invalid_arguments;
        for (int p = 0; p <= parts; p++)
            lay->n0[p] = bounds[p];
    } else {
        parts = slim_num_threads();
        int64_t blocks = (n + 63) / 64;
        if (parts > blocks)
            parts = (int)blocks;
        if (parts > MAX_PARTS)
            parts = MAX_PARTS;
        for (int p = 0; p <= parts; p++) {
            int64_t c = blocks * p / parts * 64;
            lay->n0[p] = c < n ? c : n;
        }
    }
    lay->n_parts = parts;
    lay->off[0] = 0;
    for (int p = 0; p < parts; p++) {
        dnnl_memory_desc_t a, w, d;
        dnnl_dims_t ad = {NOMINAL_M, k}, wd = {k, lay->n0[p + 1] - lay->n0[p]},
                    dd = {NOMINAL_M, wd[1]};
        dnnl_memory_desc_init_by_tag(&a, 2, ad, dnnl_f32, dnnl_ab);
        dnnl_memory_desc_init_by_tag(&w, 2, wd, dnnl_f32, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&d, 2, dd, dnnl_f32, dnnl_ab);
        dnnl_matmul_desc_t md;
        dnnl_primitive_desc_t pd;
        dnnl_status_t st = dnnl_matmul_desc_init(&md, &a, &w, NULL, &d);
        if (st == dnnl_success)
            st = dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL);
        if (st != dnnl_success)
            return st;
        lay->wmd[p] = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_primitive_desc_destroy(pd);
        lay->off[p + 1] = lay->off[p] + dnnl_memory_desc_get_size(&lay->wmd[p]) / sizeof(float);
    }
    return dnnl_success;
}

/* Part p's layout in matmul_layout.h's words; false when oneDNN's is not
 * a plain blocked one those words say (it has been, on every ISA seen). */
static bool layout_describe(const fmm_layout *lay, int p, int64_t *d)
{
    const dnnl_memory_desc_t *m = &lay->wmd[p];
    const dnnl_blocking_desc_t *b = &m->format_desc.blocking;
    if (m->ndims != 2 || m->format_kind != dnnl_blocked || m->offset0 || m->padded_offsets[0] ||
        m->padded_offsets[1] || m->extra.flags || b->inner_nblks < 0 || b->inner_nblks > 4)
        return false;
    memset(d, 0, sizeof(int64_t) * SLIM_FMM_DESC);
    d[0] = m->padded_dims[0];
    d[1] = m->padded_dims[1];
    d[2] = b->strides[0];
    d[3] = b->strides[1];
    d[4] = b->inner_nblks;
    for (int i = 0; i < b->inner_nblks; i++) {
        d[5 + i] = b->inner_blks[i];
        d[9 + i] = b->inner_idxs[i];
    }
    d[13] = (int64_t)(lay->off[p + 1] - lay->off[p]);
    return true;
}

/* Whether the packed parts, side by side, are exactly the layout oneDNN
 * picks for all N columns at once; then *whole is that layout. They are
 * where its outermost dimension is N's blocks (as in every blocked layout
 * seen, K-blocks of 16 inside N-blocks of 64) and every bound is a
 * multiple of the N-block: part p then starts where column n0[p] starts. */
static bool layout_whole(int64_t k, int64_t n, const fmm_layout *lay, dnnl_memory_desc_t *whole)
{
    int64_t bounds[2] = {0, n};
    fmm_layout one;
    if (lay->n_parts == 1) {
        *whole = lay->wmd[0];
        return true;
    }
    if (layout_make(k, n, bounds, 1, &one) != dnnl_success)
        return false;
    const dnnl_memory_desc_t *w = &one.wmd[0];
    const dnnl_blocking_desc_t *b = &w->format_desc.blocking;
    if (w->format_kind != dnnl_blocked || w->offset0 || w->extra.flags ||
        b->strides[1] < b->strides[0] || b->inner_nblks < 1)
        return false;
    int64_t nblk = 1;
    for (int i = 0; i < b->inner_nblks; i++)
        if (b->inner_idxs[i] == 1)
            nblk *= b->inner_blks[i];
    if (one.off[1] != lay->off[lay->n_parts])
        return false;
    for (int p = 0; p < lay->n_parts; p++) {
        const dnnl_memory_desc_t *m = &lay->wmd[p];
        const dnnl_blocking_desc_t *pb = &m->format_desc.blocking;
        if (m->format_kind != dnnl_blocked || lay->n0[p] % nblk ||
            pb->strides[0] != b->strides[0] || pb->strides[1] != b->strides[1] ||
            pb->inner_nblks != b->inner_nblks ||
            memcmp(pb->inner_blks, b->inner_blks, sizeof(b->inner_blks[0]) * (size_t)b->inner_nblks) ||
            memcmp(pb->inner_idxs, b->inner_idxs, sizeof(b->inner_idxs[0]) * (size_t)b->inner_nblks) ||
            lay->off[p] != (size_t)(lay->n0[p] / nblk * b->strides[1]))
            return false;
    }
    *whole = *w;
    return true;
}

bool slim_fmm_layout_here(int64_t k, int64_t n, const int64_t *bounds, int n_parts,
                          int64_t *layout)
{
    fmm_layout lay;
    if (layout_make(k, n, bounds, n_parts, &lay) != dnnl_success)
        return false;
    for (int p = 0; p < lay.n_parts; p++)
        if (!layout_describe(&lay, p, layout + p * SLIM_FMM_DESC))
            return false;
    return true;
}

static dnnl_status_t reorder(const dnnl_memory_desc_t *a, void *pa, const dnnl_memory_desc_t *b,
                             void *pb)
{
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t r = NULL;
    dnnl_memory_t ma = NULL, mb = NULL;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, a, engine, b, engine, NULL);
    if (st != dnnl_success)
        return st;
    st = dnnl_primitive_create(&r, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st == dnnl_success)
        st = dnnl_memory_create(&ma, a, engine, pa);
    if (st == dnnl_success)
        st = dnnl_memory_create(&mb, b, engine, pb);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ma}, {DNNL_ARG_TO, mb}};
        st = dnnl_primitive_execute(r, get_stream(), 2, args);
    }
    if (st == dnnl_success)
        st = dnnl_stream_wait(get_stream());
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_primitive_destroy(r);
    return st;
}

typedef struct pack_job {
    const fmm_layout *lay;
    int64_t k, n;
    const float *w;
    float *out;
    atomic_int failed;
} pack_job;

static void pack_parts(int64_t begin, int64_t end, void *user)
{
    pack_job *j = user;
    for (int64_t p = begin; p < end; p++) {
        /* W's column slice, read in place through its row stride. */
        dnnl_memory_desc_t src;
        dnnl_dims_t d = {j->k, j->lay->n0[p + 1] - j->lay->n0[p]}, strides = {j->n, 1};
        dnnl_memory_desc_init_by_strides(&src, 2, d, dnnl_f32, strides);
        if (reorder(&src, (float *)(j->w + j->lay->n0[p]), &j->lay->wmd[p],
                    j->out + j->lay->off[p]) != dnnl_success)
            atomic_store(&j->failed, 1);
    }
}

slim_status slim_fmm_pack(const slim_tensor *w, slim_tensor *out, slim_fmm_packing *how,
                          slim_err *err)
{
    memset(out, 0, sizeof(*out));
    if (w->dtype != SLIM_F32 || w->ndim != 2)
        return slim_errf(err, SLIM_EUNSUPPORTED, "FusedMatMul packs float32 [K, N] weights");
    int64_t k = w->dims[0], n = w->dims[1];
    fmm_layout lay;
    if (layout_make(k, n, NULL, 0, &lay) != dnnl_success)
        return slim_errf(err, SLIM_EUNSUPPORTED, "oneDNN has no matmul for [%lld, %lld] weights",
                         (long long)k, (long long)n);
    how->n_bounds = lay.n_parts + 1;
    for (int p = 0; p <= lay.n_parts; p++)
        how->parts[p] = lay.n0[p];
    for (int p = 0; p < lay.n_parts; p++)
        if (!layout_describe(&lay, p, how->layout + p * SLIM_FMM_DESC))
            return slim_errf(err, SLIM_EUNSUPPORTED, "oneDNN packs [%lld, %lld] weights in a "
                             "layout a file cannot describe", (long long)k, (long long)n);
    how->n_layout = lay.n_parts * SLIM_FMM_DESC;
    int64_t total = (int64_t)lay.off[lay.n_parts];
    slim_tensor_set_shape(out, SLIM_F32, 1, &total);
    slim_status st = slim_tensor_alloc(out, err);
    if (st)
        return st;
    /* Written whole just below and read whole on every run: huge pages
     * before the first write (runtime/device.c says why). */
    slim_buffer_advise_whole(out->buf);
    /* The parts are packed side by side on the kernel threads (a reorder
     * moves bytes only, so how they are cut changes nothing): loading a
     * model packs all its MatMul weights, 324 MiB for BERT-base. */
    pack_job j = {.lay = &lay, .k = k, .n = n, .w = w->data, .out = out->data};
    atomic_init(&j.failed, 0);
    slim_parallel_for(lay.n_parts, 1, pack_parts, &j);
    if (atomic_load(&j.failed)) {
        slim_tensor_release(out);
        return slim_errf(err, SLIM_EINTERNAL, "oneDNN could not pack the weights");
    }
    return SLIM_OK;
}

/* ---- the operator ------------------------------------------------------ */

static slim_status fmm_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    fmm_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    s->k = slim_attr_int(node, "K", 0);
    s->n = slim_attr_int(node, "N", 0);
    s->act = (int)slim_attr_int(node, "activation", 0);
    /* Packed by a file's writer: its parts, and its layout, which the
     * fuse_matmul pass has checked is this machine's (or repacked). */
    int64_t bounds[MAX_PARTS + 1], layout[MAX_PARTS * SLIM_FMM_DESC],
            here[MAX_PARTS * SLIM_FMM_DESC];
    int n_bounds = slim_attr_ints(node, "parts", bounds, MAX_PARTS + 1);
    int n_layout = slim_attr_ints(node, "layout", layout, MAX_PARTS * SLIM_FMM_DESC);
    bool filed = n_bounds > 0 || n_layout > 0;
    bool bad_bounds = filed && (n_bounds < 2 || n_bounds > MAX_PARTS + 1 ||
                                n_layout != (n_bounds - 1) * SLIM_FMM_DESC);
    for (int p = 0; filed && !bad_bounds && p < n_bounds - 1; p++)
        bad_bounds = bounds[0] != 0 || bounds[p + 1] <= bounds[p] ||
                     bounds[n_bounds - 1] != s->n;
    if (s->k < 1 || s->n < 1 || s->act < 0 || s->act > SLIM_FMM_ACT_GELU_ERF || bad_bounds ||
        layout_make(s->k, s->n, filed ? bounds : NULL, n_bounds - 1, &s->lay) != dnnl_success) {
        free(s);
        return slim_errf(err, SLIM_EINVAL, "FusedMatMul attributes K, N, activation, parts, "
                         "layout are wrong or oneDNN cannot run them");
    }
    /* Only a load without the passes (slim inspect, SLIM_PASSES=0) sees
     * another machine's layout here: it may look, not run. */
    s->foreign = filed && (!slim_fmm_layout_here(s->k, s->n, bounds, n_bounds - 1, here) ||
                           memcmp(here, layout, sizeof(int64_t) * (size_t)n_layout) != 0);
    s->whole_ok = !s->foreign && layout_whole(s->k, s->n, &s->lay, &s->whole_md);
    if (!s->foreign) {
        slim__fmm_rows_parts parts = {.n_parts = s->lay.n_parts, .n0 = s->lay.n0,
                                      .off = s->lay.off, .wmd = s->lay.wmd};
        s->small = slim__fmm_small_make(s->k, &parts);
    }
    pthread_mutex_init(&s->mu, NULL);
    *state = s;
    return SLIM_OK;
}

static void prims_free(fmm_prims *c)
{
    for (int p = 0; c && p < MAX_PARTS; p++)
        dnnl_primitive_destroy(c->prim[p]);
    free(c);
}

static void fmm_release(void *state)
{
    fmm_state *s = state;
    for (int i = 0; i < s->n_cached; i++)
        prims_free(s->cache[i]);
    slim__fmm_rows_free(s->rows);
    slim__fmm_small_free(s->small);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static slim_status fmm_infer(slim_op_ctx *ctx)
{
    const fmm_state *s = ctx->state;
    const slim_tensor *a = ctx->in[0], *w = ctx->in[1], *b = ctx->in[2];
    if (a->dtype != SLIM_F32 || w->dtype != SLIM_F32 || b->dtype != SLIM_F32)
        return slim_errf(ctx->err, SLIM_ETYPE, "FusedMatMul takes float32 A, W and B");
    if (a->ndim < 1 || a->dims[a->ndim - 1] != s->k)
        return slim_errf(ctx->err, SLIM_ESHAPE, "A's last dim must be K = %lld", (long long)s->k);
    if (slim_tensor_numel(w) != (int64_t)s->lay.off[s->lay.n_parts] || slim_tensor_numel(b) != s->n)
        return slim_errf(ctx->err, SLIM_ESHAPE, "packed W or B does not match K, N");
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, a->dims, sizeof(int64_t) * (size_t)a->ndim);
    dims[a->ndim - 1] = s->n;
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], SLIM_F32, a->ndim, dims);
    return SLIM_OK;
}

static dnnl_status_t prims_make(const fmm_state *s, int64_t m, bool whole, fmm_prims *c)
{
    c->m = m;
    c->whole = whole;
    dnnl_dims_t ad = {m, s->k};
    dnnl_memory_desc_init_by_tag(&c->src_md, 2, ad, dnnl_f32, dnnl_ab);
    dnnl_status_t st = dnnl_success;
    for (int p = 0; p < (whole ? 1 : s->lay.n_parts) && st == dnnl_success; p++) {
        int64_t np = whole ? s->n : s->lay.n0[p + 1] - s->lay.n0[p];
        /* Dense: brgemm refuses a strided destination (a column slice of
         * Y), which would leave oneDNN's reference code, 1000x slower. */
        dnnl_dims_t dd = {m, np}, bd = {1, np};
        dnnl_memory_desc_init_by_tag(&c->dst_md[p], 2, dd, dnnl_f32, dnnl_ab);
        dnnl_memory_desc_init_by_tag(&c->bias_md[p], 2, bd, dnnl_f32, dnnl_ab);
        dnnl_matmul_desc_t md;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        dnnl_primitive_desc_t pd = NULL;
        st = dnnl_matmul_desc_init(&md, &c->src_md, whole ? &s->whole_md : &s->lay.wmd[p],
                                   &c->bias_md[p], &c->dst_md[p]);
        if (st == dnnl_success)
            st = dnnl_primitive_attr_create(&attr);
        if (st == dnnl_success)
            st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) {
            if (s->act == SLIM_FMM_ACT_RELU)
                dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
            else if (s->act == SLIM_FMM_ACT_GELU_ERF)
                dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_erf, 0.0f, 0.0f);
            dnnl_primitive_attr_set_post_ops(attr, po);
            dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
            st = dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL);
        }
        if (st == dnnl_success && getenv("SLIM_DNNL_VERBOSE")) {
            const char *impl = NULL;
            dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
            fprintf(stderr, "FusedMatMul %lldx%lldx%lld %s %d: %s\n", (long long)m,
                    (long long)s->k, (long long)np, whole ? "whole" : "part", p, impl);
        }
        if (st == dnnl_success) {
            c->scratch_md[p] = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
            c->scratch_bytes[p] = dnnl_memory_desc_get_size(&c->scratch_md[p]);
            st = dnnl_primitive_create(&c->prim[p], pd);
        }
        dnnl_primitive_desc_destroy(pd);
        dnnl_post_ops_destroy(po);
        dnnl_primitive_attr_destroy(attr);
    }
    return st;
}

/* The primitives for m rows, per part or whole; *owned when the cache
 * was full. */
static fmm_prims *prims_get(fmm_state *s, int64_t m, bool whole, bool *owned)
{
    pthread_mutex_lock(&s->mu);
    *owned = false;
    fmm_prims *c = NULL;
    for (int i = 0; i < s->n_cached && !c; i++)
        if (s->cache[i]->m == m && s->cache[i]->whole == whole)
            c = s->cache[i];
    if (!c) {
        /* raw: a cached primitive set, one per batch size, freed with the model */
        c = calloc(1, sizeof(*c));
        if (c && prims_make(s, m, whole, c) != dnnl_success) {
            prims_free(c);
            c = NULL;
        }
        if (c && s->n_cached < CACHE_SLOTS)
            s->cache[s->n_cached++] = c;
        else if (c)
            *owned = true;
    }
    pthread_mutex_unlock(&s->mu);
    return c;
}

typedef struct fmm_job {
    const fmm_state *s;
    const fmm_prims *c;
    const float *a, *w, *b;
    float *y;
    int64_t rows;        /* rows per task: all, ROW_TILE or a chunk */
    int64_t m;           /* rows in all */
    atomic_int failed;
} fmm_job;

static dnnl_status_t run_part(const fmm_job *j, int p, const float *a, float *y)
{
    const fmm_prims *c = j->c;
    dnnl_stream_t strm = get_stream();
    int64_t c0 = c->whole ? 0 : j->s->lay.n0[p];
    int64_t np = c->whole ? j->s->n : j->s->lay.n0[p + 1] - c0;
    const dnnl_memory_desc_t *wmd = c->whole ? &j->s->whole_md : &j->s->lay.wmd[p];
    size_t woff = c->whole ? 0 : j->s->lay.off[p];
    slim_tensor scratch = {.dtype = SLIM_U8, .ndim = 1, .dims = {(int64_t)c->scratch_bytes[p]}};
    /* One part covers all of Y's columns: its rows are Y's, written in
     * place (a copy of Y's size saved, at batch 8 x 128 tokens 12 MiB). */
    bool whole = np == j->s->n;
    slim_tensor part = {.dtype = SLIM_F32, .ndim = 1, .dims = {c->m * np}};
    slim_err ignored;
    if (!strm || (c->scratch_bytes[p] && slim_tensor_alloc(&scratch, &ignored)))
        return dnnl_out_of_memory;
    if (whole) {
        part.data = y;
    } else if (slim_tensor_alloc(&part, &ignored)) {
        slim_tensor_release(&scratch);
        return dnnl_out_of_memory;
    }
    dnnl_memory_t m[5] = {NULL, NULL, NULL, NULL, NULL};
    dnnl_status_t st = dnnl_memory_create(&m[0], &c->src_md, engine, (void *)a);
    if (st == dnnl_success)
        st = dnnl_memory_create(&m[1], wmd, engine, (void *)(j->w + woff));
    if (st == dnnl_success)
        st = dnnl_memory_create(&m[2], &c->bias_md[p], engine, (void *)(j->b + c0));
    if (st == dnnl_success)
        st = dnnl_memory_create(&m[3], &c->dst_md[p], engine, part.data);
    if (st == dnnl_success && c->scratch_bytes[p])
        st = dnnl_memory_create(&m[4], &c->scratch_md[p], engine, scratch.data);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]},
                                   {DNNL_ARG_BIAS, m[2]}, {DNNL_ARG_DST, m[3]},
                                   {DNNL_ARG_SCRATCHPAD, m[4]}};
        st = dnnl_primitive_execute(c->prim[p], strm, c->scratch_bytes[p] ? 5 : 4, args);
    }
    if (st == dnnl_success)
        st = dnnl_stream_wait(strm);
    for (int64_t r = 0; st == dnnl_success && !whole && r < c->m; r++)
        memcpy(y + r * j->s->n + c0, (const float *)part.data + r * np, sizeof(float) * (size_t)np);
    for (int i = 0; i < 5; i++)
        dnnl_memory_destroy(m[i]);
    slim_tensor_release(&scratch);
    if (!whole)
        slim_tensor_release(&part);
    return st;
}

/* Task t: row tile t / parts, column part t % parts. A short last tile goes
 * through zero-padded copies, so it runs the same ROW_TILE-row code. */
static void fmm_tasks(int64_t begin, int64_t end, void *user)
{
    fmm_job *j = user;
    int parts = j->c->whole ? 1 : j->s->lay.n_parts;
    for (int64_t t = begin; t < end; t++) {
        int p = (int)(t % parts);
        int64_t r0 = t / parts * j->rows, rows = j->m - r0 < j->rows ? j->m - r0 : j->rows;
        const float *a = j->a + r0 * j->s->k;
        float *y = j->y + r0 * j->s->n;
        dnnl_status_t st;
        if (rows == j->rows) {
            st = run_part(j, p, a, y);
        } else {
            /* raw: per chunk on a kernel thread, which has no account to charge (parallel.c carries only the cancel token); one row of the input */
            float *pa = calloc((size_t)(j->rows * (j->s->k + j->s->n)), sizeof(float));
            if (!pa) {
                atomic_store(&j->failed, 1);
                continue;
            }
            float *py = pa + j->rows * j->s->k;
            memcpy(pa, a, sizeof(float) * (size_t)(rows * j->s->k));
            st = run_part(j, p, pa, py);
            int64_t c0 = j->c->whole ? 0 : j->s->lay.n0[p];
            int64_t c1 = j->c->whole ? j->s->n : j->s->lay.n0[p + 1];
            for (int64_t r = 0; r < rows; r++)
                memcpy(y + r * j->s->n + c0, py + r * j->s->n + c0, sizeof(float) * (size_t)(c1 - c0));
            free(pa);
        }
        if (st != dnnl_success)
            atomic_store(&j->failed, 1);
    }
}

/* The row-invariant product in cached column blocks, made on first use;
 * NULL where the layout does not allow them (then ROW_TILE tiles per
 * part, below). */
static const slim__fmm_rows *rows_get(fmm_state *s)
{
    pthread_mutex_lock(&s->mu);
    if (!s->rows_tried) {
        slim__fmm_rows_parts parts = {.n_parts = s->lay.n_parts, .n0 = s->lay.n0,
                                      .off = s->lay.off, .wmd = s->lay.wmd};
        s->rows = slim__fmm_rows_make(get_stream() ? engine : NULL, s->k, &parts, s->act);
        s->rows_tried = true;
    }
    pthread_mutex_unlock(&s->mu);
    return s->rows;
}

/* SLIM_FMM_WHOLE=0 keeps the column parts at every row count (to compare). */
static bool whole_enabled(void)
{
    static atomic_int on = -1; /* read by every thread of a run */
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("SLIM_FMM_WHOLE");
        v = !(e && strcmp(e, "0") == 0);
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

static slim_status fmm_exec(slim_op_ctx *ctx)
{
    fmm_state *s = (fmm_state *)ctx->state;
    const slim_tensor *a = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    if (!y || slim_tensor_numel(y) == 0)
        return SLIM_OK;
    if (s->foreign)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "FusedMatMul: its weight was packed for "
                         "another CPU or oneDNN build; a load with the graph passes repacks it");
    int64_t m = slim_tensor_numel(a) / s->k;
    int64_t rows = m;
    bool whole = false;
    /* A few rows stream the weights from memory: our loop streams them
     * faster than brgemm at that shape (matmul_small.c). Not in the
     * row-invariant mode, whose rows must run one code at every m. */
    if (s->small && !slim_gemm_row_invariant() && m <= slim__fmm_small_max_rows()) {
        slim__fmm_small_run(s->small, a->data, ctx->in[1]->data, ctx->in[2]->data, y->data, m,
                            s->act);
        return SLIM_OK;
    }
    if (slim_gemm_row_invariant() && slim__fmm_rows_enabled()) {
        const slim__fmm_rows *r = rows_get(s);
        if (r) {
            if (!slim__fmm_rows_run(r, get_stream, a->data, ctx->in[1]->data, ctx->in[2]->data,
                                    y->data, m))
                return slim_errf(ctx->err, SLIM_EINTERNAL, "oneDNN matmul failed");
            return SLIM_OK;
        }
    }
    if (slim_gemm_row_invariant()) {
        rows = ROW_TILE;
    } else if (m >= WHOLE_MIN_ROWS && s->whole_ok && whole_enabled()) {
        /* Row chunks over all of N, written in place: no part buffer and
         * no copy into Y's column slices (5% of BERT-base's time at 128
         * rows), and the chunks are even and a multiple of the threads.
         * Each chunk reads all of W, so below WHOLE_MIN_ROWS the column
         * parts, which read half each, stay faster. */
        int64_t threads = slim_num_threads();
        int64_t chunks = (m + WHOLE_MIN_ROWS - 1) / WHOLE_MIN_ROWS;
        chunks = (chunks + threads - 1) / threads * threads;
        rows = (m + chunks - 1) / chunks;
        whole = true;
    } else if (s->lay.n_parts > 1 && m > ROW_CHUNK) {
        /* Column parts go through a buffer of rows x part: in chunks of
         * about ROW_CHUNK rows it stays in cache instead of making a round
         * trip of Y's size through memory (BERT-base batch 8 x 128). The
         * chunks are even, so a short last one pads few rows. */
        int64_t chunks = (m + ROW_CHUNK - 1) / ROW_CHUNK;
        rows = (m + chunks - 1) / chunks;
    }
    bool owned;
    fmm_prims *c = prims_get(s, rows, whole, &owned);
    if (!c)
        return slim_errf(ctx->err, SLIM_EINTERNAL, "oneDNN could not make the matmul");
    fmm_job j = {.s = s, .c = c, .a = a->data, .w = ctx->in[1]->data, .b = ctx->in[2]->data,
                 .y = y->data, .rows = rows, .m = m};
    int64_t n_tiles = (m + j.rows - 1) / j.rows;
    slim_parallel_for(n_tiles * (whole ? 1 : s->lay.n_parts), 1, fmm_tasks, &j);
    if (owned)
        prims_free(c);
    if (atomic_load(&j.failed))
        return slim_errf(ctx->err, SLIM_EINTERNAL, "oneDNN matmul failed");
    return SLIM_OK;
}

const slim_op_def slim__ops_fmm[] = {
    {"FusedMatMul", 1, fmm_prepare, fmm_release, fmm_infer, fmm_exec, 0},
    {0},
};
