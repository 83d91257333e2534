/*
 * matmul_rows.c - FusedMatMul's row-invariant product, in column blocks
 * that stay in cache.
 *
 * Row invariance needs every product of a node to run the same code
 * whatever the row count: oneDNN's matmul picks its blocking from the
 * whole shape, so a row could round differently at m = 64 than at m = 512.
 * So rows go through primitives made for SLIM_FMM_ROW_TILE rows (the last
 * tile zero-padded), and nothing about them depends on m.
 *
 * Tiles of 16 rows over a whole column part read the part's weights once
 * per tile: 4.7 MiB per tile for a BERT-base feed-forward part, which does
 * not stay in a core's L2, so every tile streamed its weights from L3 and
 * the served encoder ran 1.4x slower than the same model in-process at
 * batch 8 (bench/bench_serving.py: the server at 0.64x). Here each part is
 * cut into column blocks of about BLOCK_BYTES of weights, and a task runs
 * one block over a group of tiles (about GROUP_BYTES of A): the block's
 * weights come from memory once per group and are read from L2 by every
 * tile after the first. On the 2-core Xeon (2 MiB L2 a core), one thread,
 * that encoder's 8 x 64 rows took 254-258 ms of CPU per run in the tiles
 * per part, 171-185 ms with groups of 512 KiB and 149-178 ms with groups
 * of 2 MiB (one group per block at 512 rows of 768), against 144-168 ms
 * not row-invariant (a busy machine: CPU time, not wall time). The blocks and their primitives are fixed when the
 * node is first run in this mode, so the cut never depends on m either.
 *
 * A block is a range of the part's N-blocks: the packed layout has N's
 * blocks outermost (checked here, as matmul_dnnl.c's layout_whole does),
 * so columns [c, c + nb) of a part, c a multiple of the N-block, are a
 * contiguous range of the part laid out as a [K, nb] weight with the same
 * strides, which the primitive reads in place.
 */
#include "matmul_rows.h"
#include "matmul_layout.h"

#include "kernel.h"
#include "parallel.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_BYTES (1 << 20)   /* a column block's weights, kept in L2 */
#define GROUP_BYTES (2 << 20)   /* the rows of A a task runs a block over */
#define MAX_WIDTHS 16           /* distinct block shapes per node */
#define T SLIM_FMM_ROW_TILE

typedef struct rows_block {
    int64_t c0, nb; /* Y's columns [c0, c0 + nb) */
    size_t woff;    /* float offset of its weights in Wp */
    int shape;      /* index into shapes */
} rows_block;

typedef struct rows_shape {
    dnnl_memory_desc_t wmd, bias_md, dst_md, scratch_md;
    size_t scratch_bytes;
    dnnl_primitive_t prim;
} rows_shape;

struct slim__fmm_rows {
    dnnl_engine_t engine;
    int64_t k, n, max_nb;
    size_t max_scratch;
    dnnl_memory_desc_t src_md;
    int n_blocks, n_shapes;
    rows_block *blocks;
    rows_shape shapes[MAX_WIDTHS];
};

bool slim__fmm_rows_enabled(void)
{
    static atomic_int on = -1; /* read by every thread of a run */
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("SLIM_FMM_ROWS");
        v = !(e && strcmp(e, "0") == 0);
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

/* The N-block of a part's layout when its outermost dimension is N's
 * blocks; 0 otherwise. */
static int64_t n_block_of(const dnnl_memory_desc_t *m)
{
    const dnnl_blocking_desc_t *b = &m->format_desc.blocking;
    if (m->ndims != 2 || m->format_kind != dnnl_blocked || m->offset0 || m->extra.flags ||
        m->padded_offsets[0] || m->padded_offsets[1] || b->inner_nblks < 1)
        return 0;
    int64_t kb = 1, nb = 1;
    for (int i = 0; i < b->inner_nblks; i++)
        if (b->inner_idxs[i] == 0)
            kb *= b->inner_blks[i];
        else
            nb *= b->inner_blks[i];
    if (m->padded_dims[0] % kb || m->padded_dims[1] % nb ||
        b->strides[1] != b->strides[0] * (m->padded_dims[0] / kb))
        return 0;
    return nb;
}

static dnnl_status_t shape_make(slim__fmm_rows *r, rows_shape *sh, int act)
{
    int64_t nb = sh->wmd.dims[1];
    dnnl_dims_t dd = {T, nb}, bd = {1, nb};
    dnnl_memory_desc_init_by_tag(&sh->dst_md, 2, dd, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&sh->bias_md, 2, bd, dnnl_f32, dnnl_ab);
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_matmul_desc_init(&md, &r->src_md, &sh->wmd, &sh->bias_md, &sh->dst_md);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success)
        st = dnnl_post_ops_create(&po);
    if (st == dnnl_success) {
        if (act == SLIM_FMM_ACT_RELU)
            dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
        else if (act == SLIM_FMM_ACT_GELU_ERF)
            dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_erf, 0.0f, 0.0f);
        dnnl_primitive_attr_set_post_ops(attr, po);
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
        st = dnnl_primitive_desc_create(&pd, &md, attr, r->engine, NULL);
    }
    if (st == dnnl_success) {
        /* A weight read in place in a layout the fast kernels do not take
         * would leave oneDNN's reference code: keep the per-part tiles. */
        const char *impl = NULL;
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        if (getenv("SLIM_DNNL_VERBOSE"))
            fprintf(stderr, "FusedMatMul rows %dx%lldx%lld: %s\n", T, (long long)r->k,
                    (long long)nb, impl ? impl : "?");
        if (!impl || strstr(impl, "ref"))
            st = dnnl_unimplemented;
    }
    if (st == dnnl_success) {
        sh->scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        sh->scratch_bytes = dnnl_memory_desc_get_size(&sh->scratch_md);
        st = dnnl_primitive_create(&sh->prim, pd);
    }
    dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

/* The shape of a block of nb columns of a part laid out as wmd; -1 when
 * there would be too many or oneDNN cannot run it. */
static int shape_of(slim__fmm_rows *r, const dnnl_memory_desc_t *wmd, int64_t nb, int64_t nblk,
                    int act)
{
    dnnl_memory_desc_t w = *wmd;
    w.dims[1] = nb;
    w.padded_dims[1] = (nb + nblk - 1) / nblk * nblk;
    for (int i = 0; i < r->n_shapes; i++)
        if (dnnl_memory_desc_equal(&w, &r->shapes[i].wmd))
            return i;
    if (r->n_shapes == MAX_WIDTHS)
        return -1;
    rows_shape *sh = &r->shapes[r->n_shapes];
    sh->wmd = w;
    if (shape_make(r, sh, act) != dnnl_success)
        return -1;
    if (sh->scratch_bytes > r->max_scratch)
        r->max_scratch = sh->scratch_bytes;
    return r->n_shapes++;
}

void slim__fmm_rows_free(slim__fmm_rows *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_shapes; i++)
        dnnl_primitive_destroy(r->shapes[i].prim);
    free(r->blocks);
    free(r);
}

slim__fmm_rows *slim__fmm_rows_make(dnnl_engine_t engine, int64_t k,
                                    const slim__fmm_rows_parts *parts, int act)
{
    if (!engine || k < 1 || parts->n_parts < 1)
        return NULL;
    /* raw: fixed-size load-time state, freed with the node's */
    slim__fmm_rows *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->engine = engine;
    r->k = k;
    r->n = parts->n0[parts->n_parts];
    dnnl_dims_t ad = {T, k};
    dnnl_memory_desc_init_by_tag(&r->src_md, 2, ad, dnnl_f32, dnnl_ab);
    /* Each part in about equal blocks of whole N-blocks, each about
     * BLOCK_BYTES of weights (at least one N-block). */
    int64_t cap = 0;
    int64_t want[SLIM_FMM_MAX_PARTS];
    for (int p = 0; p < parts->n_parts; p++) {
        int64_t nblk = n_block_of(&parts->wmd[p]);
        if (!nblk)
            goto fail;
        int64_t np = parts->n0[p + 1] - parts->n0[p], blocks_in = (np + nblk - 1) / nblk;
        int64_t per = BLOCK_BYTES / ((int64_t)sizeof(float) * k * nblk);
        per = per < 1 ? 1 : per;
        want[p] = (blocks_in + per - 1) / per;
        cap += want[p];
    }
    /* raw: load-time state, freed with the node's */
    if (!(r->blocks = calloc((size_t)cap, sizeof(*r->blocks))))
        goto fail;
    for (int p = 0; p < parts->n_parts; p++) {
        const dnnl_memory_desc_t *wmd = &parts->wmd[p];
        int64_t nblk = n_block_of(wmd), np = parts->n0[p + 1] - parts->n0[p];
        int64_t blocks_in = (np + nblk - 1) / nblk;
        for (int64_t i = 0; i < want[p]; i++) {
            int64_t b0 = blocks_in * i / want[p], b1 = blocks_in * (i + 1) / want[p];
            int64_t c = b0 * nblk, e = b1 * nblk < np ? b1 * nblk : np;
            rows_block *blk = &r->blocks[r->n_blocks++];
            blk->c0 = parts->n0[p] + c;
            blk->nb = e - c;
            blk->woff = parts->off[p] + (size_t)(b0 * wmd->format_desc.blocking.strides[1]);
            if ((blk->shape = shape_of(r, wmd, blk->nb, nblk, act)) < 0)
                goto fail;
            if (blk->nb > r->max_nb)
                r->max_nb = blk->nb;
        }
    }
    return r;
fail:
    slim__fmm_rows_free(r);
    return NULL;
}

typedef struct rows_job {
    const slim__fmm_rows *r;
    dnnl_stream_t (*stream)(void);
    const float *a, *w, *bias;
    float *y;
    int64_t m, tiles, group, groups;
    atomic_int failed;
} rows_job;

/* One block over one group of tiles: the block's weights stay in cache
 * from the first tile on. pad: room for a tile of A when the last one is
 * short. */
static dnnl_status_t run_block(const rows_job *j, const rows_block *blk, int64_t g, float *scratch,
                               float *dst, float *pad)
{
    const slim__fmm_rows *r = j->r;
    const rows_shape *sh = &r->shapes[blk->shape];
    dnnl_stream_t strm = j->stream();
    if (!strm)
        return dnnl_runtime_error;
    dnnl_memory_t mem[5] = {NULL, NULL, NULL, NULL, NULL};
    dnnl_status_t st = dnnl_memory_create(&mem[0], &r->src_md, r->engine, (void *)j->a);
    if (st == dnnl_success)
        st = dnnl_memory_create(&mem[1], &sh->wmd, r->engine, (void *)(j->w + blk->woff));
    if (st == dnnl_success)
        st = dnnl_memory_create(&mem[2], &sh->bias_md, r->engine, (void *)(j->bias + blk->c0));
    if (st == dnnl_success)
        st = dnnl_memory_create(&mem[3], &sh->dst_md, r->engine, dst);
    if (st == dnnl_success && sh->scratch_bytes)
        st = dnnl_memory_create(&mem[4], &sh->scratch_md, r->engine, scratch);
    int64_t t_end = (g + 1) * j->group < j->tiles ? (g + 1) * j->group : j->tiles;
    for (int64_t t = g * j->group; st == dnnl_success && t < t_end; t++) {
        int64_t r0 = t * T, rows = j->m - r0 < T ? j->m - r0 : T;
        const float *src = j->a + r0 * r->k;
        if (rows < T) { /* the short last tile, zero-padded */
            memcpy(pad, src, sizeof(float) * (size_t)(rows * r->k));
            memset(pad + rows * r->k, 0, sizeof(float) * (size_t)((T - rows) * r->k));
            src = pad;
        }
        st = dnnl_memory_set_data_handle(mem[0], (void *)src);
        if (st == dnnl_success) {
            dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]},
                                       {DNNL_ARG_BIAS, mem[2]}, {DNNL_ARG_DST, mem[3]},
                                       {DNNL_ARG_SCRATCHPAD, mem[4]}};
            st = dnnl_primitive_execute(sh->prim, strm, sh->scratch_bytes ? 5 : 4, args);
        }
        if (st == dnnl_success)
            st = dnnl_stream_wait(strm);
        for (int64_t i = 0; st == dnnl_success && i < rows; i++)
            memcpy(j->y + (r0 + i) * r->n + blk->c0, dst + i * blk->nb,
                   sizeof(float) * (size_t)blk->nb);
    }
    for (int i = 0; i < 5; i++)
        dnnl_memory_destroy(mem[i]);
    return st;
}

/* Task t: block t / groups over tile group t % groups. */
static void rows_tasks(int64_t begin, int64_t end, void *user)
{
    rows_job *j = user;
    const slim__fmm_rows *r = j->r;
    /* One buffer per chunk of tasks: scratch, a tile's output, and a
     * padded tile of A where the last tile is short. */
    size_t scratch_floats = (r->max_scratch + sizeof(float) * 16 - 1) / sizeof(float) / 16 * 16;
    int64_t floats = (int64_t)scratch_floats + T * r->max_nb + (j->m % T ? T * r->k : 0);
    slim_tensor buf = {.dtype = SLIM_F32, .ndim = 1, .dims = {floats}};
    slim_err ignored;
    if (slim_tensor_alloc(&buf, &ignored) != SLIM_OK) {
        atomic_store(&j->failed, 1);
        return;
    }
    float *scratch = buf.data, *dst = scratch + scratch_floats, *pad = dst + T * r->max_nb;
    for (int64_t t = begin; t < end; t++)
        if (run_block(j, &r->blocks[t / j->groups], t % j->groups, scratch, dst, pad) !=
            dnnl_success)
            atomic_store(&j->failed, 1);
    slim_tensor_release(&buf);
}

bool slim__fmm_rows_run(const slim__fmm_rows *r, dnnl_stream_t (*stream)(void), const float *a,
                        const float *wp, const float *bias, float *y, int64_t m)
{
    if (m <= 0)
        return true;
    rows_job j = {.r = r, .stream = stream, .a = a, .w = wp, .bias = bias, .y = y, .m = m};
    atomic_init(&j.failed, 0);
    j.tiles = (m + T - 1) / T;
    j.group = GROUP_BYTES / ((int64_t)sizeof(float) * T * r->k);
    j.group = j.group < 1 ? 1 : j.group;
    j.groups = (j.tiles + j.group - 1) / j.group;
    slim_parallel_for(r->n_blocks * j.groups, 1, rows_tasks, &j);
    return !atomic_load(&j.failed);
}
