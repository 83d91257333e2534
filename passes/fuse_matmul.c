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
 *
 * Which weights (SLIM_FUSE_MATMUL): unset, those in the process's own
 * memory (an .onnx file's); a weight mapped from a .slim file stays a
 * MatMul read in place, since packing it would copy it out of the page
 * cache replicas share. `slim convert` packs (slim_pass_pack_matmul) and
 * the file stores the packed bytes with their layout (matmul_layout.h), so
 * a file written so loads in place AND runs packed. 1 packs mapped weights
 * too; 0 packs none and unpacks a file's.
 *
 * A file's FusedMatMul: kept in place when its layout is the one oneDNN
 * picks on this machine; repacked (the process's memory) when not, e.g.
 * written on another ISA; and undone into MatMul [+ Add] [+ Relu | the
 * GELU nodes above] with the weight unpacked where it cannot run: on a GPU
 * (slim_pass_defuse_matmul), in a build without oneDNN, or with
 * SLIM_FUSE_MATMUL=0. Undone, it computes what the .onnx model's nodes do.
 */
#include "pass.h"
#include "device.h"
#include "matmul_layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SLIM_HAVE_DNNL
#include "matmul_dnnl.h"
#endif

/* SLIM_FUSE_MATMUL: 0 off, 1 every weight, unset: the process's own. */
typedef enum { FMM_OFF, FMM_AUTO, FMM_ALL } fmm_mode;

static fmm_mode mode_from_env(void)
{
    const char *env = getenv("SLIM_FUSE_MATMUL");
    if (env && strcmp(env, "0") == 0)
        return FMM_OFF;
    return env && strcmp(env, "1") == 0 ? FMM_ALL : FMM_AUTO;
}

static bool is_fmm(const slim_node *n)
{
    return strcmp(n->domain, "com.slimserve") == 0 && strcmp(n->op_type, "FusedMatMul") == 0;
}

/* ---- a file's FusedMatMul: checked, unpacked -------------------------------- */

typedef struct filed {
    int64_t k, n;
    int n_parts, n_bounds, n_layout;
    int64_t parts[SLIM_FMM_MAX_PARTS + 1];
    int64_t layout[SLIM_FMM_MAX_PARTS * SLIM_FMM_DESC];
} filed;

/* Reads and checks n's attributes and inputs (a file's, untrusted). */
static slim_status filed_read(const slim_graph *g, const slim_node *n, filed *f, slim_err *err)
{
    f->k = slim_attr_int(n, "K", 0);
    f->n = slim_attr_int(n, "N", 0);
    int64_t act = slim_attr_int(n, "activation", 0);
    f->n_bounds = slim_attr_ints(n, "parts", f->parts, SLIM_FMM_MAX_PARTS + 1);
    f->n_layout = slim_attr_ints(n, "layout", f->layout, SLIM_FMM_MAX_PARTS * SLIM_FMM_DESC);
    const slim_tensor *w = n->n_in == 3 ? slim_pass_const_f32(g, n->in[1]) : NULL;
    const slim_tensor *b = n->n_in == 3 ? slim_pass_const_f32(g, n->in[2]) : NULL;
    if (f->k < 1 || f->n < 1 || f->k > ((int64_t)1 << 31) || f->n > ((int64_t)1 << 31) ||
        act < SLIM_FMM_ACT_NONE || act > SLIM_FMM_ACT_GELU_ERF)
        return slim_errf(err, SLIM_EINVAL, "FusedMatMul %s: K, N or activation out of range",
                         n->name);
    if (!w || w->ndim != 1 || !b || b->ndim != 1 || b->dims[0] != f->n || n->n_out != 1)
        return slim_errf(err, SLIM_EINVAL, "FusedMatMul %s takes A, a packed float32 weight "
                         "and a float32 bias [N] as constants, and gives one output", n->name);
    if (f->n_bounds > SLIM_FMM_MAX_PARTS + 1 || f->n_layout > SLIM_FMM_MAX_PARTS * SLIM_FMM_DESC)
        return slim_errf(err, SLIM_EINVAL, "FusedMatMul %s: more than %d parts", n->name,
                         SLIM_FMM_MAX_PARTS);
    slim_status st = slim_fmm_layout_check(f->parts, f->n_bounds, f->layout, f->n_layout, f->k,
                                           f->n, w->dims[0], &f->n_parts, err);
    if (st)
        return slim_err_prefix(err, "FusedMatMul %s's packed weight: ", n->name);
    return SLIM_OK;
}

/* W [K, N], unpacked from n's packed weight (read with filed_read). */
static slim_status filed_unpack(const slim_graph *g, const slim_node *n, const filed *f,
                                slim_tensor *plain, slim_err *err)
{
    int64_t dims[2] = {f->k, f->n};
    memset(plain, 0, sizeof(*plain));
    slim_tensor_set_shape(plain, SLIM_F32, 2, dims);
    slim_status st = slim_tensor_alloc(plain, err);
    if (st)
        return st;
    slim_fmm_unpack(slim_pass_const_f32(g, n->in[1])->data, f->parts, f->n_parts, f->layout,
                    f->k, f->n, plain->data);
    return SLIM_OK;
}

/* A fresh value named after `base` (no name in the graph has it yet). */
static int fresh_value(slim_graph *g, const char *base, const char *what)
{
    char name[512];
    for (int i = 0;; i++) {
        snprintf(name, sizeof(name), i ? "%s/%s_%d" : "%s/%s", base, what, i);
        if (slim_graph_find_value(g, name) < 0)
            return slim_graph_value(g, name);
    }
}

static int scalar_init(slim_graph *g, const char *base, const char *suffix, float v,
                       slim_err *err)
{
    slim_tensor t = {0};
    slim_tensor_set_shape(&t, SLIM_F32, 0, NULL);
    if (slim_tensor_alloc(&t, err))
        return -1;
    *(float *)t.data = v;
    return slim_graph_add_initializer(g, base, suffix, &t, err);
}

/* Appends op(in...) -> out with the graph's opset; -1 when out of memory. */
static int append(slim_graph *g, const char *base, const char *op, int n_in, const int *in,
                  int out)
{
    char name[512];
    const char *ins[2];
    for (int i = 0; i < n_in; i++)
        ins[i] = g->values[in[i]].name;
    snprintf(name, sizeof(name), "%s/%s", base, op);
    const char *outs[1] = {g->values[out].name};
    int id = slim_graph_add_node(g, name, op, "", n_in, ins, 1, outs);
    if (id >= 0)
        g->nodes[id].opset = g->opset;
    return id;
}

/* Node i (a FusedMatMul) as the nodes it was made of, appended; i is left
 * for the caller to remove. */
static slim_status defuse_one(slim_graph *g, int i, slim_err *err)
{
    filed f;
    slim_tensor plain;
    slim_status st = filed_read(g, &g->nodes[i], &f, err);
    if (!st)
        st = filed_unpack(g, &g->nodes[i], &f, &plain, err);
    if (st)
        return st;
    char base[256];
    snprintf(base, sizeof(base), "%s", g->nodes[i].name);
    int a = g->nodes[i].in[0], bias = g->nodes[i].in[2], y = g->nodes[i].out[0];
    int act = (int)slim_attr_int(&g->nodes[i], "activation", 0);
    int wv = slim_graph_add_initializer(g, g->values[g->nodes[i].in[1]].name, "_unpacked", &plain,
                                        err);
    if (wv < 0)
        return SLIM_ENOMEM;
    /* The pass adds a zero bias where the MatMul had none: left out, so the
     * nodes are the model's own. */
    const slim_tensor *bt = slim_pass_const_f32(g, bias);
    bool has_bias = false;
    for (int64_t j = 0; j < f.n && !has_bias; j++) {
        uint32_t bits;
        memcpy(&bits, (const float *)bt->data + j, sizeof(bits));
        has_bias = bits != 0;
    }
    int prod = has_bias || act ? fresh_value(g, base, "product") : y;
    int sum = has_bias && act ? fresh_value(g, base, "biased") : has_bias ? y : prod;
    bool ok = prod >= 0 && sum >= 0 && append(g, base, "MatMul", 2, (int[]){a, wv}, prod) >= 0;
    if (ok && has_bias)
        ok = append(g, base, "Add", 2, (int[]){prod, bias}, sum) >= 0;
    if (ok && act == SLIM_FMM_ACT_RELU)
        ok = append(g, base, "Relu", 1, (int[]){sum}, y) >= 0;
    if (ok && act == SLIM_FMM_ACT_GELU_ERF) {
        int c1 = scalar_init(g, base, "/gelu_rsqrt2", (float)M_SQRT1_2, err);
        int c2 = scalar_init(g, base, "/gelu_one", 1.0f, err);
        int c3 = scalar_init(g, base, "/gelu_half", 0.5f, err);
        int e0 = fresh_value(g, base, "gelu_scaled"), e1 = fresh_value(g, base, "gelu_erf");
        int e2 = fresh_value(g, base, "gelu_1p"), e3 = fresh_value(g, base, "gelu_x1p");
        ok = c1 >= 0 && c2 >= 0 && c3 >= 0 && e0 >= 0 && e1 >= 0 && e2 >= 0 && e3 >= 0 &&
             append(g, base, "Mul", 2, (int[]){sum, c1}, e0) >= 0 &&
             append(g, base, "Erf", 1, (int[]){e0}, e1) >= 0 &&
             append(g, base, "Add", 2, (int[]){e1, c2}, e2) >= 0 &&
             append(g, base, "Mul", 2, (int[]){sum, e2}, e3) >= 0 &&
             append(g, base, "Mul", 2, (int[]){e3, c3}, y) >= 0;
    }
    return ok ? SLIM_OK : slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
}

slim_status slim_pass_defuse_matmul(slim_graph *g, slim_err *err)
{
    int n0 = g->n_nodes, done = 0;
    slim_status st = SLIM_OK;
    for (int i = 0; i < n0 && !st; i++)
        if (is_fmm(&g->nodes[i])) {
            st = defuse_one(g, i, err);
            done++;
        }
    if (st || !done)
        return st;
    bool *dead = calloc((size_t)g->n_nodes + 1, sizeof(bool));
    if (!dead)
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    for (int i = 0; i < n0; i++)
        dead[i] = is_fmm(&g->nodes[i]);
    slim_pass_sweep(g, dead);
    free(dead);
    return SLIM_OK;
}

#ifdef SLIM_HAVE_DNNL

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
static slim_status rewrite(slim_graph *g, slim_node *mm, int wv, const slim_fmm_packing *how,
                           int bias, int out, int act, slim_err *err)
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
        (st = slim_pass_set_int(mm, "activation", act, err)) ||
        (st = slim_pass_set_ints(mm, "parts", how->parts, how->n_bounds, err)) ||
        (st = slim_pass_set_ints(mm, "layout", how->layout, how->n_layout, err)))
        return st;
    return SLIM_OK;
}

/* A file's FusedMatMul (node i) on this machine: kept when its layout is
 * the one oneDNN picks here for its parts, else repacked from the
 * unpacked weight (in the process's memory); *repacked says which. */
static slim_status settle_filed(slim_graph *g, int i, bool *repacked, slim_err *err)
{
    filed f;
    int64_t here[SLIM_FMM_MAX_PARTS * SLIM_FMM_DESC];
    slim_status st = filed_read(g, &g->nodes[i], &f, err);
    *repacked = false;
    if (st)
        return st;
    if (slim_fmm_layout_here(f.k, f.n, f.parts, f.n_parts, here) &&
        memcmp(here, f.layout, sizeof(int64_t) * (size_t)f.n_layout) == 0)
        return SLIM_OK;
    slim_tensor plain, packed;
    slim_fmm_packing *how = malloc(sizeof(*how));
    if (!how)
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    if ((st = filed_unpack(g, &g->nodes[i], &f, &plain, err))) {
        free(how);
        return st;
    }
    slim_err why = {0};
    st = slim_fmm_pack(&plain, &packed, how, &why);
    slim_tensor_release(&plain);
    if (st) {
        free(how);
        *err = why;
        return slim_err_prefix(err, "FusedMatMul %s, repacking for this CPU: ",
                               g->nodes[i].name);
    }
    int old = g->nodes[i].in[1];
    int wv = slim_graph_add_initializer(g, g->values[old].name, "_repacked", &packed, err);
    if (wv < 0) {
        free(how);
        return SLIM_ENOMEM;
    }
    slim_node *n = &g->nodes[i];
    slim_pass_drop_replaced(g, old, n);
    n->in[1] = wv;
    if (!(st = slim_pass_set_ints(n, "parts", how->parts, how->n_bounds, err)))
        st = slim_pass_set_ints(n, "layout", how->layout, how->n_layout, err);
    free(how);
    *repacked = true;
    return st;
}

static slim_status fuse_matmul(slim_graph *g, fmm_mode mode, int *changed, slim_err *err)
{
    /* The packed copy replaces the original, so weight memory does not
     * grow: from .onnx the heap original is freed as each weight is packed;
     * from a mapped .slim file (SLIM_FUSE_MATMUL=1) slim_pass_drop_replaced
     * gives the weight's pages back. A file written by `slim convert`
     * brings its FusedMatMuls packed already. */
    if (mode == FMM_OFF)
        return slim_pass_defuse_matmul(g, err);
    slim_status st = SLIM_OK;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        bool repacked;
        if (is_fmm(&g->nodes[i]))
            st = settle_filed(g, i, &repacked, err);
    }
    if (st)
        return st;
    slim_pass_walk w;
    if ((st = slim_pass_walk_init(&w, g, err)))
        return st;
    const slim_pass_uses *u = &w.uses;
    bool *dead = w.dead;
    /* A weight read by several MatMuls (layers sharing weights) is packed
     * once: packed_of[v] is its packed copy's value, or -1. */
    int n_values = g->n_values;
    int *packed_of = malloc(sizeof(int) * ((size_t)n_values + 1));
    slim_fmm_packing **how_of = calloc((size_t)n_values + 1, sizeof(*how_of));
    if (!packed_of || !how_of) {
        free(packed_of);
        free(how_of);
        return slim_pass_walk_finish(&w, g, slim_errf(err, SLIM_ENOMEM,
                                                      "out of memory optimizing the graph"));
    }
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
        int map_fd;
        int64_t map_off;
        if (mode == FMM_AUTO && packed_of[mm->in[1]] < 0 &&
            slim_file_map_lookup(w->data, slim_tensor_nbytes(w), &map_fd, &map_off))
            continue; /* read in place: see the top of the file */
        /* Packed before the epilogue is matched, so a shape oneDNN takes no
         * matmul for leaves the MatMul (and its readers) as they are. */
        int wv = packed_of[mm->in[1]];
        if (wv < 0) {
            slim_tensor packed;
            slim_err why = {0};
            slim_fmm_packing *how = malloc(sizeof(*how));
            if (!how) {
                st = slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
                break;
            }
            st = slim_fmm_pack(w, &packed, how, &why);
            if (st == SLIM_EUNSUPPORTED) {
                free(how);
                st = SLIM_OK;
                continue;
            }
            if (st) {
                free(how);
                *err = why;
                break;
            }
            how_of[mm->in[1]] = how;
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
        /* mm->in[1] is still the weight wv was packed from. */
        if ((st = rewrite(g, mm, wv, how_of[mm->in[1]], bias, out, act, err)))
            break;
        (*changed)++;
    }
    for (int v = 0; v < n_values; v++)
        free(how_of[v]);
    free(how_of);
    free(packed_of);
    return slim_pass_walk_finish(&w, g, st);
}

static slim_status fuse_matmul_run(slim_graph *g, int *changed, slim_err *err)
{
    return fuse_matmul(g, mode_from_env(), changed, err);
}

slim_status slim_pass_pack_matmul(slim_graph *g, slim_err *err)
{
    int changed = 0;
    fmm_mode mode = mode_from_env();
    return mode == FMM_OFF ? SLIM_OK : fuse_matmul(g, FMM_ALL, &changed, err);
}

#else

/* Without oneDNN nothing runs a FusedMatMul: a file's are undone. */
static slim_status fuse_matmul_run(slim_graph *g, int *changed, slim_err *err)
{
    (void)changed;
    return slim_pass_defuse_matmul(g, err);
}

slim_status slim_pass_pack_matmul(slim_graph *g, slim_err *err)
{
    (void)g;
    (void)err;
    return SLIM_OK;
}

#endif

const slim_pass slim__pass_fuse_matmul = {"fuse_matmul", fuse_matmul_run};
