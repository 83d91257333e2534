/*
 * test_pass_attention.c - the fuse_attention pass (passes/fuse_attention.c)
 * and the FusedAttention kernel: small random encoders in the exporters'
 * variants give the same outputs with and without the pass, and the pass
 * fired (FusedAttention nodes, no Softmax or Transpose left); variants the
 * fused node cannot reproduce are left alone, and so is a model placed on
 * a GPU; a sequence's result is bitwise the same alone and in a batch; the
 * AVX-512 and portable softmax rows agree with a double-precision
 * reference. With passes/merge_qkv.c first, each layer's projections are
 * one MatMul + Add whose result the FusedAttention reads packed (no Split
 * left), with the same outputs; near misses are not merged; undone (for a
 * GPU) the Splits go and the outputs stay.
 */
#include "testutil.h"

#include "attention.h"
#include "pass.h"
#include "pipeline.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { E = 12, H = 3, DH = 4, LAYERS = 2 };

typedef enum { SC_MUL, SC_DIV, SC_ON_Q, SC_NONE } scale_kind;
typedef enum {
    MASK_NONE,
    MASK_KEYS,    /* [B, 1, 1, S] from the attention mask, BERT's */
    MASK_QUERIES, /* [B, 1, S, 1]: broadcast along the keys */
    MASK_RANK5,   /* [1, B, 1, 1, S]: grows the scores, left alone */
    MASK_HEADS2,  /* a constant [1, 2, 1, 1] with 3 heads, left alone */
} mask_kind;

typedef struct {
    scale_kind scale;
    mask_kind mask;
    bool k_two_transposes; /* (0,2,1,3) then (0,1,3,2) instead of (0,2,3,1) */
    bool minus_one;        /* Reshape targets [0,-1,H,D] and [0,-1,E] */
    int softmax_opset;     /* 13, or 11 with axis -1 */
    bool out_perm_other;   /* the context Transpose is (0,1,2,3): left alone */
} variant;

static uint32_t rng_state;

static float rndf(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void add_init(slim_graph *g, const char *name, int ndim, const int64_t *dims,
                     const float *vals, float amp)
{
    int v = slim_graph_value(g, name);
    int64_t n = slim_shape_numel(ndim, dims);
    float *d = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = vals ? vals[i] : amp * rndf();
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_f32(ndim, dims, d);
    free(d);
}

static void add_ints(slim_graph *g, const char *name, int n, const int64_t *vals)
{
    int v = slim_graph_value(g, name);
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_i64(1, (int64_t[]){n}, vals);
}

static slim_node *node(slim_graph *g, const char *op, int n_in, const char *const *in,
                       const char *out)
{
    char name[64];
    snprintf(name, sizeof(name), "%s_%d", op, g->n_nodes);
    int id = slim_graph_add_node(g, name, op, "", n_in, in, 1, (const char *[]){out});
    ck_assert_int_ge(id, 0);
    g->nodes[id].opset = 17;
    return &g->nodes[id];
}

static void perm(slim_node *n, int64_t a, int64_t b, int64_t c, int64_t d)
{
    tu_attr_ints(n, "perm", 4, (int64_t[]){a, b, c, d});
}

static void declare(slim_graph *g, const char *name, slim_dtype dt, int ndim,
                    const int64_t *dims)
{
    int v = slim_graph_value(g, name);
    ck_assert_int_eq(slim_graph_add_input(g, v), SLIM_OK);
    g->values[v].info.dtype = dt;
    g->values[v].info.ndim = ndim;
    memcpy(g->values[v].info.dims, dims, sizeof(int64_t) * (size_t)ndim);
}

/* x[B,S,E] (and mask m[B,S] int64) -> LAYERS x (Q/K/V projections,
 * attention, output projection + residual) -> y. */
static slim_graph *encoder(const variant *vr)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 5;
    declare(g, "x", SLIM_F32, 3, (int64_t[]){-1, -1, E});
    add_ints(g, "split", 4, (int64_t[]){0, vr->minus_one ? -1 : 0, H, DH});
    add_ints(g, "merge", 3, (int64_t[]){0, vr->minus_one ? -1 : 0, E});
    add_init(g, "c", 0, NULL, (float[]){vr->scale == SC_DIV ? 2.0f : 0.5f}, 0);
    const char *mask = NULL;
    if (vr->mask == MASK_KEYS || vr->mask == MASK_QUERIES || vr->mask == MASK_RANK5) {
        declare(g, "m", SLIM_I64, 2, (int64_t[]){-1, -1});
        add_ints(g, "axes", vr->mask == MASK_RANK5 ? 3 : 2,
                 vr->mask == MASK_KEYS      ? (int64_t[]){1, 2}
                 : vr->mask == MASK_QUERIES ? (int64_t[]){1, 3}
                                            : (int64_t[]){0, 2, 3});
        add_init(g, "one", 0, NULL, (float[]){1}, 0);
        add_init(g, "big", 0, NULL, (float[]){-10000}, 0);
        node(g, "Unsqueeze", 2, (const char *[]){"m", "axes"}, "m4");
        tu_attr_i(node(g, "Cast", 1, (const char *[]){"m4"}, "mf"), "to", 1);
        node(g, "Sub", 2, (const char *[]){"one", "mf"}, "inv");
        node(g, "Mul", 2, (const char *[]){"inv", "big"}, "bias");
        mask = "bias";
    } else if (vr->mask == MASK_HEADS2) {
        add_init(g, "bias", 4, (int64_t[]){1, 2, 1, 1}, NULL, 1.0f);
        mask = "bias";
    }
    char h[16] = "x";
    for (int l = 0; l < LAYERS; l++) {
        char nm[16][32];
#define N(i, fmt) (snprintf(nm[i], sizeof(nm[i]), fmt "%d", l), nm[i])
        const char *proj[3];
        for (int p = 0; p < 3; p++) {
            char w[32], b[32], mm[32], o[32];
            snprintf(w, sizeof(w), "w%d_%d", p, l);
            snprintf(b, sizeof(b), "b%d_%d", p, l);
            snprintf(mm, sizeof(mm), "mm%d_%d", p, l);
            snprintf(o, sizeof(o), "p%d_%d", p, l);
            add_init(g, w, 2, (int64_t[]){E, E}, NULL, 0.6f);
            add_init(g, b, 1, (int64_t[]){E}, NULL, 0.2f);
            node(g, "MatMul", 2, (const char *[]){h, w}, mm);
            node(g, "Add", 2, (const char *[]){mm, b}, o);
            proj[p] = g->values[slim_graph_find_value(g, o)].name;
        }
        node(g, "Reshape", 2, (const char *[]){proj[0], "split"}, N(0, "q4_"));
        perm(node(g, "Transpose", 1, (const char *[]){nm[0]}, N(1, "qt_")), 0, 2, 1, 3);
        const char *q = nm[1];
        if (vr->scale == SC_ON_Q) {
            node(g, "Mul", 2, (const char *[]){"c", q}, N(2, "qs_"));
            q = nm[2];
        }
        node(g, "Reshape", 2, (const char *[]){proj[1], "split"}, N(3, "k4_"));
        if (vr->k_two_transposes) {
            perm(node(g, "Transpose", 1, (const char *[]){nm[3]}, N(4, "kh_")), 0, 2, 1, 3);
            perm(node(g, "Transpose", 1, (const char *[]){nm[4]}, N(5, "kt_")), 0, 1, 3, 2);
        } else {
            perm(node(g, "Transpose", 1, (const char *[]){nm[3]}, N(5, "kt_")), 0, 2, 3, 1);
        }
        node(g, "Reshape", 2, (const char *[]){proj[2], "split"}, N(6, "v4_"));
        perm(node(g, "Transpose", 1, (const char *[]){nm[6]}, N(7, "vt_")), 0, 2, 1, 3);
        node(g, "MatMul", 2, (const char *[]){q, nm[5]}, N(8, "qk_"));
        const char *s = nm[8];
        if (vr->scale == SC_MUL || vr->scale == SC_DIV) {
            node(g, vr->scale == SC_MUL ? "Mul" : "Div", 2, (const char *[]){s, "c"},
                 N(9, "sc_"));
            s = nm[9];
        }
        if (mask) {
            node(g, "Add", 2, (const char *[]){mask, s}, N(10, "msk_"));
            s = nm[10];
        }
        slim_node *sm = node(g, "Softmax", 1, (const char *[]){s}, N(11, "p_"));
        sm->opset = vr->softmax_opset;
        tu_attr_i(sm, "axis", -1);
        node(g, "MatMul", 2, (const char *[]){nm[11], nm[7]}, N(12, "ctx_"));
        slim_node *t = node(g, "Transpose", 1, (const char *[]){nm[12]}, N(13, "ct_"));
        if (vr->out_perm_other)
            perm(t, 0, 1, 2, 3);
        else
            perm(t, 0, 2, 1, 3);
        node(g, "Reshape", 2, (const char *[]){nm[13], "merge"}, N(14, "o_"));
        char w[32];
        snprintf(w, sizeof(w), "wo_%d", l);
        add_init(g, w, 2, (int64_t[]){E, E}, NULL, 0.6f);
        node(g, "MatMul", 2, (const char *[]){nm[14], w}, N(15, "ao_"));
        char nh[16];
        snprintf(nh, sizeof(nh), "h%d", l + 1);
        node(g, "Add", 2, (const char *[]){h, nm[15]}, l == LAYERS - 1 ? "y" : nh);
        snprintf(h, sizeof(h), "%s", nh);
#undef N
    }
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

static int count_op(const slim_graph *g, const char *op)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        c += strcmp(g->nodes[i].op_type, op) == 0;
    return c;
}

static void run_pass(slim_graph *g, const char *name, int *changed)
{
    const slim_pass *p = NULL;
    slim_err err = {0};
    for (int i = 0; slim_pipeline_pass(i); i++)
        if (strcmp(slim_pipeline_pass(i)->name, name) == 0)
            p = slim_pipeline_pass(i);
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(p->run(g, changed, &err) == SLIM_OK, "%s", err.msg);
}

/* The encoder as a model, with the fuse_attention pass or without, and
 * with the projections merged first (then attention_qkv after it). */
static slim_model *load_merged(const variant *vr, bool fuse, bool merge, int *fused, int *merged)
{
    slim_graph *g = encoder(vr);
    slim_err err = {0};
    *fused = *merged = 0;
    if (merge)
        ck_assert_msg(slim_pass_merge_qkv(g, NULL, merged, &err) == SLIM_OK, "%s",
                      err.msg);
    if (fuse) {
        run_pass(g, "fuse_attention", fused);
        int packed = 0;
        run_pass(g, "attention_qkv", &packed);
        ck_assert_int_eq(packed, *merged);
    }
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

/* Merged, then undone as for a GPU: the Splits gone, three MatMul + Add
 * per layer again. */
static slim_model *load_unmerged(const variant *vr)
{
    slim_graph *g = encoder(vr);
    slim_err err = {0};
    int merged;
    ck_assert_msg(slim_pass_merge_qkv(g, NULL, &merged, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(merged, LAYERS);
    ck_assert_msg(slim_pass_unmerge_qkv(g, &err) == SLIM_OK, "%s", err.msg);
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

static slim_model *load(const variant *vr, bool fuse, int *fused)
{
    int merged;
    return load_merged(vr, fuse, false, fused, &merged);
}

static slim_tensor inputs_x(int64_t b, int64_t s)
{
    int64_t n = b * s * E;
    float *d = malloc(sizeof(float) * (size_t)n);
    rng_state = 99;
    for (int64_t i = 0; i < n; i++)
        d[i] = rndf();
    slim_tensor t = tu_f32(3, (int64_t[]){b, s, E}, d);
    free(d);
    return t;
}

/* Row r keeps its first s - r % 3 positions (at least one). */
static slim_tensor inputs_m(int64_t b, int64_t s)
{
    int64_t *d = malloc(sizeof(int64_t) * (size_t)(b * s));
    for (int64_t r = 0; r < b; r++)
        for (int64_t i = 0; i < s; i++)
            d[r * s + i] = i < (s - r % 3 > 0 ? s - r % 3 : 1);
    slim_tensor t = tu_i64(2, (int64_t[]){b, s}, d);
    free(d);
    return t;
}

static slim_status run(slim_model *m, const variant *vr, const slim_tensor *x,
                       const slim_tensor *mk, slim_tensor *y, slim_err *err)
{
    slim_tensor in[2] = {*x, mk ? *mk : (slim_tensor){0}};
    slim_tensor *out = NULL;
    int n_out = 0;
    bool with_mask = vr->mask == MASK_KEYS || vr->mask == MASK_QUERIES;
    slim_status st = slim_model_run(m, with_mask ? 2 : 1, (const char *[]){"x", "m"}, in, &out,
                                    &n_out, err);
    if (!st) {
        *y = out[0];
        free(out);
    }
    return st;
}

static void assert_close(const slim_tensor *a, const slim_tensor *ref, double rel)
{
    int64_t n = slim_tensor_numel(ref);
    ck_assert_int_eq(slim_tensor_numel(a), n);
    double mx = 0;
    for (int64_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(((const float *)ref->data)[i]));
    ck_assert(mx > 0.1);
    for (int64_t i = 0; i < n; i++) {
        float u = ((const float *)a->data)[i], v = ((const float *)ref->data)[i];
        ck_assert_msg(fabs(u - v) <= rel * mx, "element %lld: %g vs %g (max %g)", (long long)i, u,
                      v, mx);
    }
}

static const variant matching[] = {
    {SC_MUL, MASK_KEYS, false, false, 13, false},
    {SC_DIV, MASK_NONE, false, false, 13, false},
    {SC_ON_Q, MASK_KEYS, true, true, 11, false},
    {SC_NONE, MASK_QUERIES, false, true, 13, false},
    {SC_DIV, MASK_KEYS, true, false, 13, false},
};

/* Each matching variant at batch 1 and 3 with S odd (5, 67), and 2 x 17:
 * 67 runs through BLAS in blocks of 16 rows and one of 3, 5 and 17 through
 * the short-sequence products. The pass fused both layers and the outputs
 * agree, on the AVX-512 path and the portable one. */
START_TEST(fused_matches_unfused)
{
    const variant *vr = &matching[_i];
    int fused;
    slim_model *ref = load(vr, false, &fused), *opt = load(vr, true, &fused);
    ck_assert_int_eq(fused, LAYERS);
    ck_assert_int_eq(count_op(opt->graph, "FusedAttention"), LAYERS);
    ck_assert_int_eq(count_op(opt->graph, "Softmax"), 0);
    ck_assert_int_eq(count_op(opt->graph, "Transpose"), 0);
    ck_assert_int_eq(count_op(opt->graph, "Reshape"), 0);
    const int64_t shapes[5][2] = {{1, 5}, {3, 5}, {1, 67}, {3, 67}, {2, 17}};
    slim__attn_set_block(16 * 67);
    for (int portable = 0; portable < 2; portable++) {
        slim__attn_force_portable(portable);
        for (int c = 0; c < 5; c++) {
            slim_tensor x = inputs_x(shapes[c][0], shapes[c][1]);
            slim_tensor mk = inputs_m(shapes[c][0], shapes[c][1]);
            slim_tensor a, b;
            slim_err err = {0};
            ck_assert_msg(run(ref, vr, &x, &mk, &a, &err) == SLIM_OK, "%s", err.msg);
            ck_assert_msg(run(opt, vr, &x, &mk, &b, &err) == SLIM_OK, "%s", err.msg);
            tu_assert_shape(&b, 3, (int64_t[]){shapes[c][0], shapes[c][1], E});
            assert_close(&b, &a, 2e-5);
            slim_tensor_release(&a);
            slim_tensor_release(&b);
            slim_tensor_release(&x);
            slim_tensor_release(&mk);
        }
    }
    slim__attn_force_portable(false);
    slim__attn_set_block(0);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* Blocks the fused node could not reproduce stay as they are. */
START_TEST(non_matching_left_alone)
{
    const variant others[] = {
        {SC_MUL, MASK_RANK5, false, false, 13, false},
        {SC_MUL, MASK_HEADS2, false, false, 13, false},
        {SC_MUL, MASK_KEYS, false, true, 13, true},
    };
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        int fused;
        slim_model *m = load(&others[i], true, &fused);
        ck_assert_msg(fused == 0, "variant %zu fused %d blocks", i, fused);
        ck_assert_int_eq(count_op(m->graph, "FusedAttention"), 0);
        ck_assert_int_eq(count_op(m->graph, "Softmax"), LAYERS);
        slim_model_free(m);
    }
    /* Softmax over the queries' axis. */
    variant v = matching[0];
    slim_graph *g = encoder(&v);
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "Softmax") == 0)
            ck_assert_int_eq(slim_pass_set_int(&g->nodes[i], "axis", 2, NULL), SLIM_OK);
    slim_err err = {0};
    int fused = 0;
    for (int i = 0; slim_pipeline_pass(i); i++)
        if (strcmp(slim_pipeline_pass(i)->name, "fuse_attention") == 0)
            ck_assert_int_eq(slim_pipeline_pass(i)->run(g, &fused, &err), SLIM_OK);
    ck_assert_int_eq(fused, 0);
    ck_assert_int_eq(count_op(g, "Softmax"), LAYERS);
    slim_graph_free(g);
    /* For a model placed on a GPU the pass runs only when the graph goes
     * half after it (FusedAttention's GPU kernel takes half operands) and
     * SLIM_CUDA_FUSED_ATTENTION=1 asks for it. */
    g = encoder(&matching[0]);
    ck_assert_int_eq(slim_passes_run_for(g, false, &err), SLIM_OK);
    ck_assert_int_eq(count_op(g, "FusedAttention"), 0);
    ck_assert_int_eq(count_op(g, "Softmax"), LAYERS);
    slim_graph_free(g);
    unsetenv("SLIM_CUDA_FUSED_ATTENTION");
    g = encoder(&matching[0]);
    ck_assert_int_eq(slim_passes_run_gpu(g, true, &err), SLIM_OK);
    ck_assert_int_eq(count_op(g, "FusedAttention"), 0);
    slim_graph_free(g);
    setenv("SLIM_CUDA_FUSED_ATTENTION", "1", 1);
    g = encoder(&matching[0]);
    ck_assert_int_eq(slim_passes_run_gpu(g, false, &err), SLIM_OK);
    ck_assert_int_eq(count_op(g, "FusedAttention"), 0);
    slim_graph_free(g);
    g = encoder(&matching[0]);
    ck_assert_int_eq(slim_passes_run_gpu(g, true, &err), SLIM_OK);
    unsetenv("SLIM_CUDA_FUSED_ATTENTION");
    ck_assert_int_eq(count_op(g, "FusedAttention"), LAYERS);
    ck_assert_int_eq(count_op(g, "Softmax"), 0);
    slim_graph_free(g);
    g = encoder(&matching[0]);
    ck_assert_int_eq(slim_passes_run_for(g, true, &err), SLIM_OK);
    ck_assert_int_eq(count_op(g, "FusedAttention"), LAYERS);
    slim_graph_free(g);
}
END_TEST

/* A sequence's output is bitwise the same alone as in a batch of 3: 67
 * tokens (BLAS products, several blocks per head) and 17 (the short-
 * sequence products, a partial vector of keys). */
START_TEST(fused_batch_invariant)
{
    const variant *vr = &matching[0];
    int fused;
    slim_model *opt = load(vr, true, &fused);
    slim_model_set_batch_invariant(opt, true);
    slim__attn_set_block(16 * 67); /* several blocks per head */
    const int64_t S = _i == 0 ? 67 : 17;
    slim_tensor x = inputs_x(3, S), mk = inputs_m(3, S), all;
    slim_err err = {0};
    ck_assert_msg(run(opt, vr, &x, &mk, &all, &err) == SLIM_OK, "%s", err.msg);
    for (int64_t r = 0; r < 3; r++) {
        slim_tensor x1 = tu_f32(3, (int64_t[]){1, S, E}, (const float *)x.data + r * S * E);
        slim_tensor m1 = tu_i64(2, (int64_t[]){1, S}, (const int64_t *)mk.data + r * S);
        slim_tensor y;
        ck_assert_msg(run(opt, vr, &x1, &m1, &y, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_int_eq(memcmp(y.data, (const float *)all.data + r * S * E,
                                sizeof(float) * (size_t)(S * E)), 0);
        slim_tensor_release(&y);
        slim_tensor_release(&x1);
        slim_tensor_release(&m1);
    }
    /* A mask of another batch than x's would grow the unfused block's
     * scores; the fused node says so instead. */
    slim_tensor x1 = inputs_x(1, S), y;
    ck_assert_int_eq(run(opt, vr, &x1, &mk, &y, &err), SLIM_ESHAPE);
    ck_assert_msg(strstr(err.msg, "mask") != NULL, "%s", err.msg);
    slim__attn_set_block(0);
    slim_tensor_release(&x1);
    slim_tensor_release(&all);
    slim_tensor_release(&x);
    slim_tensor_release(&mk);
    slim_model_free(opt);
}
END_TEST

/* Merged projections: one MatMul and one Add per layer, no Split left (the
 * FusedAttention reads the packed rows), outputs as the unmerged model's
 * on the AVX-512 and portable paths; merged but not fused, the Splits
 * stay and compute the same. */
START_TEST(merged_matches_unmerged)
{
    const variant *vr = &matching[_i];
    int fused, merged;
    slim_model *ref = load(vr, true, &fused);
    slim_model *opt = load_merged(vr, true, true, &fused, &merged);
    slim_model *split = load_merged(vr, false, true, &fused, &merged);
    slim_model *undone = load_unmerged(vr);
    ck_assert_int_eq(count_op(undone->graph, "Split"), 0);
    ck_assert_int_eq(count_op(undone->graph, "MatMul"), 4 * LAYERS + 2 * LAYERS);
    ck_assert_int_eq(merged, LAYERS);
    ck_assert_int_eq(count_op(opt->graph, "FusedAttention"), LAYERS);
    ck_assert_int_eq(count_op(opt->graph, "Split"), 0);
    ck_assert_int_eq(count_op(opt->graph, "MatMul"), 2 * LAYERS); /* QKV and the output */
    ck_assert_int_eq(count_op(split->graph, "Split"), LAYERS);
    for (int i = 0; i < opt->graph->n_nodes; i++)
        if (strcmp(opt->graph->nodes[i].op_type, "FusedAttention") == 0)
            ck_assert_int_eq(slim_attr_ints(&opt->graph->nodes[i], "qkv_sizes",
                                            (int64_t[3]){0}, 3), 3);
    for (int portable = 0; portable < 2; portable++) {
        slim__attn_force_portable(portable);
        const int64_t shapes[3][2] = {{1, 5}, {3, 67}, {2, 17}};
        for (int c = 0; c < 3; c++) {
            slim_tensor x = inputs_x(shapes[c][0], shapes[c][1]);
            slim_tensor mk = inputs_m(shapes[c][0], shapes[c][1]);
            slim_tensor a, b, d;
            slim_err err = {0};
            ck_assert_msg(run(ref, vr, &x, &mk, &a, &err) == SLIM_OK, "%s", err.msg);
            ck_assert_msg(run(opt, vr, &x, &mk, &b, &err) == SLIM_OK, "%s", err.msg);
            ck_assert_msg(run(split, vr, &x, &mk, &d, &err) == SLIM_OK, "%s", err.msg);
            assert_close(&b, &a, 2e-5);
            assert_close(&d, &a, 2e-5);
            slim_tensor_release(&d);
            ck_assert_msg(run(undone, vr, &x, &mk, &d, &err) == SLIM_OK, "%s", err.msg);
            assert_close(&d, &a, 2e-5);
            slim_tensor_release(&a);
            slim_tensor_release(&b);
            slim_tensor_release(&d);
            slim_tensor_release(&x);
            slim_tensor_release(&mk);
        }
    }
    slim__attn_force_portable(false);
    slim_model_free(ref);
    slim_model_free(opt);
    slim_model_free(split);
    slim_model_free(undone);
}
END_TEST

static slim_node *writer(slim_graph *g, const char *value)
{
    int v = slim_graph_find_value(g, value);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].n_out > 0 && g->nodes[i].out[0] == v)
            return &g->nodes[i];
    ck_abort_msg("no node writes %s", value);
    return NULL;
}

static bool refuse_wide(const slim_tensor *const *w, int n, void *user)
{
    (void)user;
    ck_assert_int_eq(n, 3);
    for (int i = 0; i < n; i++)
        ck_assert(w[i]->ndim == 2 && w[i]->dims[0] == E && w[i]->dims[1] == E);
    return false;
}

static bool skip_named(const slim_node *n, void *user)
{
    return strcmp(n->name, (const char *)user) == 0;
}

/* Not merged: a projection excluded by name (the int8 and half passes'
 * lists), a bias on two projections of three, a fourth sibling MatMul of
 * the same input. */
START_TEST(merge_near_misses)
{
    slim_err err = {0};
    int merged;
    slim_graph *g = encoder(&matching[0]);
    /* Exclude layer 0's K projection (node names are "Op_index"). */
    slim_merge_hooks skip_k = {.skip = skip_named, .user = writer(g, "mm1_0")->name};
    ck_assert_int_eq(slim_pass_merge_qkv(g, &skip_k, &merged, &err), SLIM_OK);
    ck_assert_int_eq(merged, LAYERS - 1);
    slim_graph_free(g);

    /* A group the caller refuses (int8: outliers in different rows). */
    g = encoder(&matching[0]);
    slim_merge_hooks refuse = {.group_ok = refuse_wide, .user = NULL};
    ck_assert_int_eq(slim_pass_merge_qkv(g, &refuse, &merged, &err), SLIM_OK);
    ck_assert_int_eq(merged, 0);
    slim_graph_free(g);

    g = encoder(&matching[0]);
    slim_node *vb = writer(g, "p2_0"); /* V's bias Add, layer 0: a Relu instead */
    free(vb->op_type);
    vb->op_type = strdup("Relu");
    vb->n_in = 1;
    ck_assert_int_eq(slim_pass_merge_qkv(g, NULL, &merged, &err), SLIM_OK);
    ck_assert_int_eq(merged, LAYERS - 1);
    slim_graph_free(g);

    g = encoder(&matching[0]);
    add_init(g, "w_extra", 2, (int64_t[]){E, E}, NULL, 0.5f);
    node(g, "MatMul", 2, (const char *[]){"x", "w_extra"}, "extra");
    node(g, "Reshape", 2, (const char *[]){"extra", "split"}, "extra4");
    slim_graph_add_output(g, slim_graph_find_value(g, "extra4"));
    ck_assert_int_eq(slim_pass_merge_qkv(g, NULL, &merged, &err), SLIM_OK);
    ck_assert_int_eq(merged, LAYERS - 1); /* layer 0 reads x four times */
    slim_graph_free(g);
}
END_TEST

/* A FusedAttention node as a .slim file could carry it: two heads of 3. */
static slim_graph *fused_node(int n_in, int n_out_shape)
{
    slim_graph *g = tu_graph("FusedAttention", 1, n_in, (const char *[]){"q", "k", "v", "m"}, 1);
    slim_node *n = tu_node0(g);
    free(n->domain);
    n->domain = strdup("com.slimserve");
    tu_attr_i(n, "num_heads", 2);
    tu_attr_i(n, "head_size", 3);
    tu_attr_i(n, "v_head_size", 3);
    tu_attr_f(n, "scale", 0.5f);
    tu_attr_ints(n, "q_shape", 2, (int64_t[]){0, 0});
    tu_attr_ints(n, "k_shape", 2, (int64_t[]){0, -1});
    tu_attr_ints(n, "v_shape", 2, (int64_t[]){0, 0});
    tu_attr_ints(n, "out_shape", n_out_shape, (int64_t[]){0, 0, 6, 1, 1, 1, 1, 1, 1});
    return g;
}

static void expect_error(slim_graph *g, slim_tensor *in, int n, slim_status want,
                         const char *words)
{
    slim_tensor *out = NULL;
    int n_out = 0;
    slim_err err = {0};
    ck_assert_int_eq(tu_run(g, in, n, &out, &n_out, &err), want);
    ck_assert_msg(strstr(err.msg, words) != NULL, "message \"%s\" lacks \"%s\"", err.msg, words);
    tu_free_inputs(in, n);
}

/* Shapes the unfused block would have refused are refused, by name. */
START_TEST(fused_node_refuses_bad_shapes)
{
    /* V's hidden size 5 is not 2 heads of 3: its Reshape would fail. */
    slim_tensor a[3] = {tu_f32(3, (int64_t[]){1, 2, 6}, NULL),
                        tu_f32(3, (int64_t[]){1, 2, 6}, NULL),
                        tu_f32(3, (int64_t[]){1, 2, 5}, NULL)};
    expect_error(fused_node(3, 3), a, 3, SLIM_ESHAPE, "V [1,2,5] cannot be reshaped");
    /* K has 3 positions, V 2: P V would not multiply. */
    slim_tensor b[3] = {tu_f32(3, (int64_t[]){1, 2, 6}, NULL),
                        tu_f32(3, (int64_t[]){1, 3, 6}, NULL),
                        tu_f32(3, (int64_t[]){1, 2, 6}, NULL)};
    expect_error(fused_node(3, 3), b, 3, SLIM_ESHAPE, "disagree");
    /* A mask over 3 keys for 2. */
    slim_tensor c[4] = {tu_f32(3, (int64_t[]){1, 2, 6}, NULL),
                        tu_f32(3, (int64_t[]){1, 2, 6}, NULL),
                        tu_f32(3, (int64_t[]){1, 2, 6}, NULL),
                        tu_f32(4, (int64_t[]){1, 1, 1, 3}, NULL)};
    expect_error(fused_node(4, 3), c, 4, SLIM_ESHAPE, "mask");
    /* An output shape of 9 dims is no shape at all. */
    slim_tensor d[3] = {tu_f32(3, (int64_t[]){1, 2, 6}, NULL),
                        tu_f32(3, (int64_t[]){1, 2, 6}, NULL),
                        tu_f32(3, (int64_t[]){1, 2, 6}, NULL)};
    expect_error(fused_node(3, 9), d, 3, SLIM_EINVAL, "out_shape");
}
END_TEST

/* The packed form (qkv_sizes, K and V absent) reads input 0's rows as
 * [Q | K | V]: bitwise what the three inputs give; a row of another width,
 * or sizes other than the heads', are refused by name. */
static slim_graph *packed_node(int64_t v_size)
{
    slim_graph *g = fused_node(3, 3);
    slim_node *n = tu_node0(g);
    n->in[1] = n->in[2] = -1;
    tu_attr_ints(n, "qkv_sizes", 3, (int64_t[]){6, 6, v_size});
    return g;
}

START_TEST(packed_node_reads_rows)
{
    enum { B = 2, S = 5, W = 18 };
    float x[B * S * W], q[B * S * 6], k[B * S * 6], v[B * S * 6];
    rng_state = 7;
    for (int i = 0; i < B * S * W; i++)
        x[i] = rndf();
    for (int r = 0; r < B * S; r++)
        for (int c = 0; c < 6; c++) {
            q[r * 6 + c] = x[r * W + c];
            k[r * 6 + c] = x[r * W + 6 + c];
            v[r * 6 + c] = x[r * W + 12 + c];
        }
    slim_tensor sep[3] = {tu_f32(3, (int64_t[]){B, S, 6}, q), tu_f32(3, (int64_t[]){B, S, 6}, k),
                          tu_f32(3, (int64_t[]){B, S, 6}, v)};
    slim_tensor pk[3] = {tu_f32(3, (int64_t[]){B, S, W}, x), tu_f32(1, (int64_t[]){1}, NULL),
                         tu_f32(1, (int64_t[]){1}, NULL)};
    slim_tensor *ya = NULL, *yb = NULL;
    int na = 0, nb = 0;
    slim_err err = {0};
    slim_graph *ga = fused_node(3, 3), *gb = packed_node(6);
    ck_assert_msg(tu_run(ga, sep, 3, &ya, &na, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_msg(tu_run(gb, pk, 3, &yb, &nb, &err) == SLIM_OK, "%s", err.msg);
    tu_assert_shape(&yb[0], 3, (int64_t[]){B, S, 6});
    ck_assert_int_eq(memcmp(ya[0].data, yb[0].data, sizeof(float) * B * S * 6), 0);
    slim_tensors_free(ya, na);
    slim_tensors_free(yb, nb);
    tu_free_inputs(sep, 3);
    tu_free_inputs(pk, 3);

    slim_tensor c[3] = {tu_f32(3, (int64_t[]){1, 2, 17}, NULL), tu_f32(1, (int64_t[]){1}, NULL),
                        tu_f32(1, (int64_t[]){1}, NULL)};
    expect_error(packed_node(6), c, 3, SLIM_ESHAPE, "qkv_sizes");
    slim_tensor d[3] = {tu_f32(3, (int64_t[]){1, 2, 17}, NULL), tu_f32(1, (int64_t[]){1}, NULL),
                        tu_f32(1, (int64_t[]){1}, NULL)};
    expect_error(packed_node(5), d, 3, SLIM_EINVAL, "qkv_sizes");
}
END_TEST

/* Both softmax paths against double precision: lengths around the 16-lane
 * width, masked (-inf) entries, large spreads; a fully masked row is NaN. */
START_TEST(softmax_rows_match_reference)
{
    rng_state = 3;
    float row[70], ref_in[70];
    for (int portable = 0; portable < 2; portable++) {
        slim__attn_force_portable(portable);
        for (int n = 1; n <= 70; n++) {
            for (int i = 0; i < n; i++)
                ref_in[i] = i % 7 == 3 ? -INFINITY : 30.0f * rndf();
            ref_in[0] = 1.0f; /* one unmasked entry at least */
            memcpy(row, ref_in, sizeof(float) * (size_t)n);
            slim__attn_softmax_row(row, n);
            double mx = -INFINITY, sum = 0;
            for (int i = 0; i < n; i++)
                mx = fmax(mx, ref_in[i]);
            for (int i = 0; i < n; i++)
                sum += exp((double)ref_in[i] - mx);
            for (int i = 0; i < n; i++) {
                double want = exp((double)ref_in[i] - mx) / sum;
                ck_assert_msg(fabs(row[i] - want) <= 2e-6 * want + 1e-30,
                              "n %d, element %d: %g vs %g (%s)", n, i, row[i], want,
                              portable ? "portable" : "simd");
            }
        }
        for (int i = 0; i < 19; i++)
            row[i] = -INFINITY;
        slim__attn_softmax_row(row, 19);
        for (int i = 0; i < 19; i++)
            ck_assert(isnan(row[i]));
    }
    slim__attn_force_portable(false);
}
END_TEST

/* Short rows softmaxed in groups are bitwise the rows one at a time: every
 * length to 16 (and 17, one at a time), 37 rows (two groups and a part),
 * masked (-inf) entries and a fully masked row among them. */
START_TEST(softmax_rows_grouped_match_single)
{
    for (int64_t n = 1; n <= 17; n++) {
        enum { R = 37 };
        float *a = malloc(sizeof(float) * (size_t)(R * n)), *b = malloc(sizeof(float) * (size_t)(R * n));
        rng_state = (uint32_t)(100 + n);
        for (int64_t i = 0; i < R * n; i++)
            a[i] = 8.0f * rndf();
        for (int64_t r = 0; r < R; r += 5)
            a[r * n + (r % n)] = -INFINITY;
        for (int64_t c = 0; c < n; c++)
            a[20 * n + c] = -INFINITY;
        memcpy(b, a, sizeof(float) * (size_t)(R * n));
        slim__attn_softmax_rows(a, R, n);
        for (int64_t r = 0; r < R; r++)
            slim__attn_softmax_row(b + r * n, n);
        for (int64_t i = 0; i < R * n; i++)
            ck_assert_msg(memcmp(&a[i], &b[i], sizeof(float)) == 0 || (isnan(a[i]) && isnan(b[i])),
                          "n %lld element %lld: %g vs %g", (long long)n, (long long)i, a[i], b[i]);
        free(a);
        free(b);
    }
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("pass_attention");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, fused_matches_unfused, 0,
                        (int)(sizeof(matching) / sizeof(matching[0])));
    tcase_add_test(tc, non_matching_left_alone);
    tcase_add_loop_test(tc, fused_batch_invariant, 0, 2);
    tcase_add_loop_test(tc, merged_matches_unmerged, 0,
                        (int)(sizeof(matching) / sizeof(matching[0])));
    tcase_add_test(tc, merge_near_misses);
    tcase_add_test(tc, fused_node_refuses_bad_shapes);
    tcase_add_test(tc, packed_node_reads_rows);
    tcase_add_test(tc, softmax_rows_match_reference);
    tcase_add_test(tc, softmax_rows_grouped_match_single);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
