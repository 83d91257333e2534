/*
 * fuse_matmul.c - MatMul by a constant [K, N] weight, + bias, + Relu or an
 * exported GELU, becomes one FusedMatMul (kernels/cpu/matmul_dnnl.c) with
 * the weight packed once, here, replacing the original.
 *
 * GELU is matched in the form PyTorch exports it (and bench/gen_encoder.py
 * writes), x * 0.5 * (1 + erf(x / sqrt(2))) as
 *   Mul(f, 1/sqrt2) -> Erf -> Add(., 1) -> Mul(f, .) -> Mul(., 0.5)
 * with the constants checked and either operand order; f (the biased
 * product) must be read by exactly those two Muls. The result is
 * oneDNN's gelu_erf, the same function rounded once.
 *
 * Only float32 MatMuls are seen: the int8, half-precision and pruning
 * rewrites, which run first, have already taken the ones they converted.
 * Opt-in (SLIM_FUSE_MATMUL=1; see fuse_matmul_run); left out for GPU models
 * (pass.c). Without oneDNN the pass does nothing.
 */
#include "pass.h"
#include "device.h"

#ifdef SLIM_HAVE_DNNL
#include "matmul_dnnl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_op(const slim_node *n, const char *op)
{
    return n && !n->domain[0] && strcmp(n->op_type, op) == 0;
}

/* The scalar constant c, when v is one. */
static bool scalar(const slim_graph *g, int v, float *c)
{
    const slim_tensor *t = slim_pass_const_f32(g, v);
    if (!t || slim_tensor_numel(t) != 1)
        return false;
    *c = *(const float *)t->data;
    return true;
}

/* Binary node n has x as one operand; the other, returned, or -1. */
static int other_of(const slim_node *n, int x)
{
    if (n->n_in != 2 || n->n_out != 1)
        return -1;
    return n->in[0] == x ? n->in[1] : n->in[1] == x ? n->in[0] : -1;
}

static bool near(float a, float b)
{
    return fabsf(a - b) <= 1e-6f * fabsf(b);
}

/* Matches the exported GELU reading f; marks its nodes dead and returns its
 * output, or -1. */
static int match_gelu(slim_graph *g, const slim_pass_uses *u, int f, bool *dead)
{
    if (f < 0 || f >= u->n_values || u->readers[f] != 2 || g->values[f].is_output)
        return -1;
    slim_node *scale = NULL, *outer = NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        if (dead[i] || !is_op(n, "Mul") || other_of(n, f) < 0)
            continue;
        float c;
        if (scalar(g, other_of(n, f), &c) && near(c, 0.70710678f))
            scale = n;
        else
            outer = n;
    }
    if (!scale || !outer)
        return -1;
    slim_node *erf = slim_pass_sole_reader(g, u, scale->out[0], "Erf");
    slim_node *add1 = erf ? slim_pass_sole_reader(g, u, erf->out[0], "Add") : NULL;
    float c;
    if (!add1 || !scalar(g, other_of(add1, erf->out[0]), &c) || c != 1.0f ||
        other_of(outer, f) != add1->out[0] || u->readers[add1->out[0]] != 1 ||
        g->values[add1->out[0]].is_output)
        return -1;
    slim_node *half = slim_pass_sole_reader(g, u, outer->out[0], "Mul");
    if (!half || !scalar(g, other_of(half, outer->out[0]), &c) || c != 0.5f)
        return -1;
    dead[scale - g->nodes] = dead[erf - g->nodes] = dead[add1 - g->nodes] = true;
    dead[outer - g->nodes] = dead[half - g->nodes] = true;
    return half->out[0];
}

/* mm becomes a FusedMatMul reading the packed weight wv. */
static slim_status rewrite(slim_graph *g, slim_node *mm, int wv, int bias, int out, int act,
                           slim_err *err)
{
    const slim_tensor *w = slim_pass_const_f32(g, mm->in[1]);
    int64_t k = w->dims[0], n = w->dims[1];
    slim_tensor zero = {0};
    slim_status st;
    slim_pass_drop_replaced(g, mm->in[1], mm);
    if (bias < 0) {
        slim_tensor_set_shape(&zero, SLIM_F32, 1, &n);
        if ((st = slim_tensor_alloc(&zero, err)))
            return st;
        memset(zero.data, 0, sizeof(float) * (size_t)n);
        if ((bias = slim_graph_add_initializer(g, g->values[mm->in[1]].name, "_zero_bias", &zero,
                                              err)) < 0)
            return SLIM_ENOMEM;
    }
    int *in = malloc(sizeof(int) * 3);
    char *ot = strdup("FusedMatMul"), *dom = strdup("com.slimserve");
    if (!in || !ot || !dom) {
        free(in);
        free(ot);
        free(dom);
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    }
    in[0] = mm->in[0];
    in[1] = wv;
    in[2] = bias;
    free(mm->in);
    free(mm->op_type);
    free(mm->domain);
    mm->in = in;
    mm->n_in = 3;
    mm->op_type = ot;
    mm->domain = dom;
    mm->opset = 1;
    mm->out[0] = out;
    if ((st = slim_pass_set_int(mm, "K", k, err)) || (st = slim_pass_set_int(mm, "N", n, err)) ||
        (st = slim_pass_set_int(mm, "activation", act, err)))
        return st;
    return SLIM_OK;
}

static slim_status fuse_matmul_run(slim_graph *g, int *changed, slim_err *err)
{
    /* Off unless SLIM_FUSE_MATMUL=1. The packed copy
     * replaces the original in both load paths, so weight memory does not
     * grow: from .onnx the heap original is freed as each weight is packed;
     * from a mapped .slim file slim_pass_drop_replaced gives the weight's
     * pages back (MADV_DONTNEED on the whole pages inside it), so resident
     * memory holds the packed copy instead of the mapped one. Both paths
     * pack the same bytes the same way, so their outputs are bitwise equal.
     * What the mapping no longer gives: pages shared between processes
     * serving the same file, and a load that reads nothing (packing reads
     * every weight once): BERT-base from .slim loads in ~190 ms instead of
     * 1.5 ms and holds 324 MiB of its own instead of shared page cache.
     * Those are the .slim format's promises (zero-copy, replicas sharing
     * pages), so the pass stays opt-in until the file stores the packed
     * layout, which ties a file to one oneDNN build and ISA and needs a
     * repack path for the others. */
    const char *on = getenv("SLIM_FUSE_MATMUL");
    if (!on || strcmp(on, "1") != 0)
        return SLIM_OK;
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    const slim_pass_uses *u = &w.uses;
    bool *dead = w.dead;
    /* A weight read by several MatMuls (layers sharing weights) is packed
     * once: packed_of[v] is its packed copy's value, or -1. */
    int n_values = g->n_values;
    int *packed_of = malloc(sizeof(int) * ((size_t)n_values + 1));
    if (!packed_of)
        return slim_pass_walk_finish(&w, g, slim_errf(err, SLIM_ENOMEM,
                                                      "out of memory optimizing the graph"));
    for (int v = 0; v < n_values; v++)
        packed_of[v] = -1;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *mm = &g->nodes[i];
        if (dead[i] || !is_op(mm, "MatMul") || mm->n_in != 2 || mm->n_out != 1 || mm->out[0] < 0)
            continue;
        const slim_tensor *w = slim_pass_const_f32(g, mm->in[1]);
        if (!w || w->ndim != 2 || w->dims[0] < 1 || w->dims[1] < 1 ||
            slim_pass_const_f32(g, mm->in[0]))
            continue;
        /* Packed before the epilogue is matched, so a shape oneDNN takes no
         * matmul for leaves the MatMul (and its readers) as they are. */
        int wv = packed_of[mm->in[1]];
        if (wv < 0) {
            slim_tensor packed;
            slim_err why = {0};
            st = slim_fmm_pack(w, &packed, &why);
            if (st == SLIM_EUNSUPPORTED) {
                st = SLIM_OK;
                continue;
            }
            if (st) {
                *err = why;
                break;
            }
            wv = slim_graph_add_initializer(g, g->values[mm->in[1]].name, "_packed", &packed, err);
            if (wv < 0) {
                st = SLIM_ENOMEM;
                break;
            }
            packed_of[mm->in[1]] = wv;
            w = slim_pass_const_f32(g, mm->in[1]); /* g->values may have moved */
        }
        int out = mm->out[0], bias = -1, act = SLIM_FMM_ACT_NONE;
        slim_node *add = slim_pass_sole_reader(g, u, out, "Add");
        if (add && !dead[add - g->nodes]) {
            int b = other_of(add, out);
            const slim_tensor *bt = slim_pass_const_f32(g, b);
            if (bt && bt->ndim == 1 && bt->dims[0] == w->dims[1]) {
                bias = b;
                out = add->out[0];
                dead[add - g->nodes] = true;
            }
        }
        slim_node *relu = slim_pass_sole_reader(g, u, out, "Relu");
        int gelu_out;
        if (relu && !dead[relu - g->nodes]) {
            act = SLIM_FMM_ACT_RELU;
            out = relu->out[0];
            dead[relu - g->nodes] = true;
        } else if ((gelu_out = match_gelu(g, u, out, dead)) >= 0) {
            act = SLIM_FMM_ACT_GELU_ERF;
            out = gelu_out;
        }
        if ((st = rewrite(g, mm, wv, bias, out, act, err)))
            break;
        (*changed)++;
    }
    free(packed_of);
    return slim_pass_walk_finish(&w, g, st);
}

#else

static slim_status fuse_matmul_run(slim_graph *g, int *changed, slim_err *err)
{
    (void)g;
    (void)changed;
    (void)err;
    return SLIM_OK;
}

#endif

const slim_pass slim__pass_fuse_matmul = {"fuse_matmul", fuse_matmul_run};
