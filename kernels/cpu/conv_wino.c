/*
 * conv_wino.c - stored Winograd: at load, FusedConv's W is transformed
 * into the layout oneDNN's F(2x2, 3x3) inference kernel reads, in place
 * of the packed W, for the 3x3 stride-1 convs on planes from 14x14 to
 * 28x28 where that kernel wins (SLIM_CONV_WINO_STORED=1).
 *
 * The kernel reads only its own transformed weights (4x4 values per 3x3:
 * 16/9 of the packed bytes), made for one input plane and cut into parts
 * of 64 output channels (conv_dnnl_build.c, WINO_PART). Once made lazily
 * beside the packed W, they were weight bytes the model's predicted
 * footprint did not see. Here they replace the packed W in the graph at
 * the plan stage, before the model takes a run: the model's weight bytes,
 * the footprint's prediction (which runs the same stage, on zero weights
 * of the same shapes) and what the loaded model holds all count them, and
 * the packed W is given back. Only where the input plane is known at load
 * (every graph input's dims static but the batch): the transformed W takes
 * no other plane, and FusedConv's infer refuses one with a clear error.
 *
 * Measured per part as FusedConv cuts them (one thread, CPU time, median
 * of 31 alternating trials, oneDNN 2.6.3, Xeon model 207): 128x28x28->64
 * 0.52x direct (F(4x4) per run: 0.64x), 256x14x14->128 0.76x (F(4x4) per
 * run: 1.72x), but 64x56x56->32 0.76x against F(4x4)'s 0.58x and
 * 512x7x7->64 0.92x: hence the range. Float32 W only.
 */
#include "conv_dnnl.h"
#include "conv_dnnl_impl.h"
#include "conv_dnnl_set.h"
#include "model.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

#define WINO_STORED_MIN_PLANE (14 * 14)
#define WINO_STORED_MAX_PLANE (28 * 28)

/* Whether this conv's output plane is in the stored range, with its shape. */
static bool wino_wanted(const fconv_state *s, int64_t h, int64_t w)
{
    int64_t oh = out_extent(s, 0, h), ow = out_extent(s, 1, w);
    return slim__fconv_wino_shape(s) && oh > 0 && ow > 0 &&
           oh * ow >= WINO_STORED_MIN_PLANE && oh * ow <= WINO_STORED_MAX_PLANE;
}

/* One part's slice of the packed W (blocked, o0..o1 of c input channels)
 * into want at dst: through plain OIHW, the only layout oneDNN reorders
 * into Winograd's from. */
static dnnl_status_t transform_part(const fconv_state *s, const slim_tensor *w, int64_t c,
                                    const part *pt, float *dst, dnnl_stream_t strm)
{
    dnnl_memory_desc_t packed, plain;
    slim__fconv_weights_md(&packed, pt->o1 - pt->o0, c, s->kernel[0], s->kernel[1],
                           SLIM_FCONV_W_BLOCKED, true);
    dnnl_memory_desc_init_by_tag(&plain, 4, packed.dims, dnnl_f32, dnnl_oihw);
    slim_err ignored;
    slim_tensor tmp = {.dtype = SLIM_U8, .ndim = 1,
                       .dims = {(int64_t)dnnl_memory_desc_get_size(&plain)}};
    const float *slice = (const float *)w->data + pt->o0 * (slim_tensor_numel(w) / w->dims[0]);
    dnnl_primitive_t to_plain = NULL, to_wino = NULL;
    dnnl_status_t st = slim_tensor_alloc(&tmp, &ignored) ? dnnl_out_of_memory : dnnl_success;
    if (st == dnnl_success)
        st = slim__fconv_make_reorder(&to_plain, &packed, &plain);
    if (st == dnnl_success)
        st = slim__fconv_make_reorder(&to_wino, &plain, &pt->wei_md);
    if (st == dnnl_success)
        st = slim__fconv_run_reorder(to_plain, &packed, (void *)slice, &plain, tmp.data, strm);
    if (st == dnnl_success)
        st = slim__fconv_run_reorder(to_wino, &plain, tmp.data, &pt->wei_md, dst, strm);
    if (st == dnnl_success)
        st = dnnl_stream_wait(strm);
    dnnl_primitive_destroy(to_plain);
    dnnl_primitive_destroy(to_wino);
    slim_tensor_release(&tmp);
    return st;
}

/* W (packed) transformed for input [1, c, h, w] into *out; s->wino_h/w
 * are set only when it worked (else the conv keeps its packed W and its
 * kernel as before). */
static dnnl_status_t transform(fconv_state *s, const slim_tensor *w, const int64_t *xd,
                               bool residual, slim_tensor *out)
{
    slim_tensor x = {.dtype = SLIM_F32, .ndim = 4, .dims = {1, xd[1], xd[2], xd[3]}};
    dnnl_stream_t strm = slim__fconv_stream();
    if (!strm)
        return dnnl_runtime_error;
    prim_set set;
    s->wino_h = xd[2]; /* the set is made as the runs will make it */
    s->wino_w = xd[3];
    dnnl_status_t st = slim__fconv_build_set(s, w, &x, residual, &set);
    s->wino_h = s->wino_w = 0;
    if (st != dnnl_success)
        return st;
    slim_err ignored;
    *out = (slim_tensor){.dtype = SLIM_F32, .ndim = 1, .dims = {set.wino_floats}};
    if (slim_tensor_alloc(out, &ignored))
        st = dnnl_out_of_memory;
    for (int p = 0; p < set.n_parts && st == dnnl_success; p++)
        st = transform_part(s, w, xd[1], &set.parts[p], (float *)out->data + set.parts[p].w_off,
                            strm);
    slim__fconv_set_release(&set);
    if (st != dnnl_success) {
        slim_tensor_release(out);
        return st;
    }
    s->wino_h = xd[2];
    s->wino_w = xd[3];
    return dnnl_success;
}

/* The run's input signature at batch 1, or NULL when an input's dims (the
 * batch apart) are not all known at load. */
static slim_tensor *static_signature(const slim_model *m)
{
    int n = m->graph->n_inputs;
    slim_tensor *sig = calloc((size_t)(n ? n : 1), sizeof(*sig));
    for (int i = 0; sig && i < n; i++) {
        const slim_io_info *info = &m->inputs[i];
        bool ok = info->dtype != SLIM_DTYPE_UNDEFINED && info->ndim >= 0 && !info->kind;
        for (int d = 1; ok && d < info->ndim; d++)
            ok = info->dims[d] >= 0;
        if (!ok) {
            free(sig);
            return NULL;
        }
        sig[i].dtype = info->dtype;
        sig[i].ndim = info->ndim;
        for (int d = 0; d < info->ndim; d++)
            sig[i].dims[d] = info->dims[d] >= 0 ? info->dims[d] : 1;
    }
    return sig;
}

static bool is_fconv(const slim_node *n)
{
    return n->op_state && n->domain && strcmp(n->domain, "com.slimserve") == 0 &&
           strcmp(n->op_type, "FusedConv") == 0;
}

slim_status slim_fconv_store_winograd(slim_model *m, slim_err *err)
{
    const char *on = getenv("SLIM_CONV_WINO_STORED"); /* read at load */
    if (!on || strcmp(on, "1") != 0 || m->nested || m->device)
        return SLIM_OK;
    slim_graph *g = m->graph;
    slim_tensor *sig = static_signature(m);
    slim_tensor *shapes = sig ? calloc((size_t)(g->n_values ? g->n_values : 1),
                                       sizeof(*shapes)) : NULL;
    slim_err ignored;
    /* Shapes it cannot see through leave every W packed, as before. */
    bool known = shapes && slim_model_infer_shapes(m, sig, shapes, &ignored) == SLIM_OK;
    bool changed = false;
    for (int i = 0; known && i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        if (!is_fconv(n) || n->n_in < 3 || n->in[1] < 0 || n->in[0] < 0)
            continue;
        fconv_state *s = n->op_state;
        slim_value *wv = &g->values[n->in[1]];
        const slim_tensor *xs = &shapes[n->in[0]];
        /* W read by this node alone, float32, packed, on the host */
        if (s->wino_h || !s->m || wv->kind != SLIM_VALUE_INITIALIZER || wv->n_consumers != 1 ||
            wv->init.dtype != SLIM_F32 || wv->init.ndim != 4 || wv->init.device ||
            !wv->init.data || xs->ndim != 4 || !wino_wanted(s, xs->dims[2], xs->dims[3]))
            continue;
        slim_tensor t;
        bool residual = n->n_in > 3 && n->in[3] >= 0;
        if (transform(s, &wv->init, xs->dims, residual, &t) != dnnl_success)
            continue; /* no such kernel here (no AVX-512): packed, as before */
        slim_tensor_release(&wv->init);
        wv->init = t;
        changed = true;
    }
    free(sig);
    free(shapes);
    return changed ? slim__model_refresh(m, err) : SLIM_OK;
}
