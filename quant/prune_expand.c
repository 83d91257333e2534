/*
 * prune_expand.c - at load, on the host: a SparseConv stored 2:4 becomes a
 * dense Conv again (+ its fused residual Add and Relu / Clip as nodes),
 * which the optimization passes after it fuse and pack as for any conv;
 * a float32 or int8 SparseMatMul stored 2:4 becomes a Gemm (X 2-D) or a
 * MatMul + Add of its bias.
 *
 * Why: no 2:4 conv kernel here beats the dense (oneDNN) conv; the 2:4
 * kernel measured 1.4-2.4x its time (docs/prune.md), and the 2:4 MatMul
 * kernel 0.98-1.51x the dense product (1.2-1.3x on ResNet-50's 2048 x 1000
 * head at 1 and 8 rows: 6.7% of MobileNetV2's 2:4 time went to it). 2:4 is
 * asked for for its bytes, so the file keeps them (0.53x) and the load
 * trades memory (the weight as float32, N x K x 4 bytes) for the dense
 * speed: "2:4 no slower than dense". A layer pruned with storage "sparse"
 * (attribute storage = "sparse") stays 2:4, as does one whose encoding
 * does not check out (its node refuses it when run) and a half-precision
 * SparseMatMul (its dense form would be another kernel's). csr layers stay
 * sparse: the pruning pass kept them sparse only under their break-even
 * density. int8 codes are expanded to code x scale.
 *
 * The expanded weight holds exactly the stored values at their positions,
 * so the dense conv or product computes the pruned model; only the
 * summation order differs from the 2:4 kernel.
 */
#include "kernel.h"
#include "pass.h"
#include "sparse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_op(const slim_node *n, const char *op)
{
    return strcmp(n->domain, "com.slimserve") == 0 && strcmp(n->op_type, op) == 0;
}

/* Node n's constant operands: inputs 1 .. last - 1 but skip (SparseConv's
 * residual) initializers or absent. */
static bool constant_operands(const slim_graph *g, const slim_node *n, int last, int skip)
{
    for (int i = 1; i < n->n_in && i < last; i++)
        if (i != skip && n->in[i] >= 0 && g->values[n->in[i]].kind != SLIM_VALUE_INITIALIZER)
            return false;
    return n->in[1] >= 0 && n->in[2] >= 0;
}

static bool expandable(const slim_graph *g, const slim_node *n)
{
    bool conv = is_op(n, "SparseConv");
    if ((!conv && !is_op(n, "SparseMatMul")) ||
        strcmp(slim_attr_str(n, "encoding", ""), "2:4") != 0 ||
        strcmp(slim_attr_str(n, "storage", ""), "sparse") == 0 || n->n_in < 3)
        return false;
    if (conv)
        return constant_operands(g, n, 7, 5);
    /* SparseMatMul(X, values, indices, rowptr, bias, scale): float32
     * values and bias, or int8 codes and their scale. */
    if (!constant_operands(g, n, 6, -1) || (n->n_in > 3 && n->in[3] >= 0))
        return false;
    const slim_tensor *v = &g->values[n->in[1]].init;
    int b = n->n_in > 4 ? n->in[4] : -1;
    return (v->dtype == SLIM_F32 || v->dtype == SLIM_I8) &&
           (b < 0 || g->values[b].init.dtype == SLIM_F32);
}

/* The dense weight of node n's 2:4 encoding (values input 1, indices 2,
 * int8 scales input si), into *t: [M, K / khw, kh, kw] for a conv (ks
 * non-NULL), [N, K] for a product; *ok false (t untouched) when the
 * operands do not check out. */
static slim_status decode(const slim_graph *g, const slim_node *n, int si, const int64_t *ks,
                          slim_tensor *t, bool *ok, slim_err *err)
{
    *ok = false;
    const slim_tensor *v = &g->values[n->in[1]].init, *ix = &g->values[n->in[2]].init;
    const slim_tensor *sc = n->n_in > si && n->in[si] >= 0 ? &g->values[n->in[si]].init : NULL;
    int64_t k = slim_attr_int(n, "K", 0), khw = ks ? ks[0] * ks[1] : 1;
    if ((ks && (ks[0] < 1 || ks[1] < 1)) || k < 1 || k % khw || v->ndim != 2 ||
        (v->dtype != SLIM_F32 && v->dtype != SLIM_I8) ||
        (v->dtype == SLIM_I8) != (sc != NULL) ||
        v->dims[1] != 2 * slim_sparse_24_groups(k) || ix->dtype != SLIM_U8 || ix->ndim != 2 ||
        ix->dims[0] != v->dims[0] || ix->dims[1] != slim_sparse_24_idx_bytes(k) ||
        (sc && (sc->dtype != SLIM_F32 || sc->ndim != 1 || sc->dims[0] != v->dims[0])))
        return SLIM_OK;
    slim_sparse_w w = {.enc = SLIM_SPARSE_24, .n = v->dims[0], .k = k, .vdtype = v->dtype,
                       .values = v->data, .idx = ix->data, .idtype = SLIM_U8,
                       .scale = sc ? sc->data : NULL};
    slim_err e2;
    if (slim_sparse_check(&w, w.n * 2 * slim_sparse_24_groups(k), &e2))
        return SLIM_OK;
    int64_t dims[4] = {w.n, ks ? k / khw : k, ks ? ks[0] : 0, ks ? ks[1] : 0};
    memset(t, 0, sizeof(*t));
    slim_tensor_set_shape(t, SLIM_F32, ks ? 4 : 2, dims);
    slim_status st = slim_tensor_alloc(t, err);
    if (st)
        return st;
    float *d = t->data;
    memset(d, 0, sizeof(float) * (size_t)(w.n * k));
    int64_t groups = slim_sparse_24_groups(k), ib = slim_sparse_24_idx_bytes(k);
    for (int64_t j = 0; j < w.n; j++) {
        const uint8_t *nib = (const uint8_t *)ix->data + j * ib;
        for (int64_t gr = 0; gr < groups; gr++) {
            int code = nib[gr >> 1] >> (4 * (gr & 1));
            for (int h = 0; h < 2; h++) {
                int64_t q = j * 2 * groups + 2 * gr + h;
                float val = w.scale ? (float)((const int8_t *)v->data)[q] * w.scale[j]
                                    : ((const float *)v->data)[q];
                /* a group with under 2 nonzeros stores 0 values: adding keeps its one */
                d[j * k + 4 * gr + ((code >> (2 * h)) & 3)] += val;
            }
        }
    }
    *ok = true;
    return SLIM_OK;
}

/* [N, K] into its transpose [K, N], in place of t (a MatMul's B). */
static slim_status transpose(slim_tensor *t, slim_err *err)
{
    int64_t n = t->dims[0], k = t->dims[1], dims[2] = {k, n};
    slim_tensor u = {0};
    slim_tensor_set_shape(&u, SLIM_F32, 2, dims);
    slim_status st = slim_tensor_alloc(&u, err);
    if (st)
        return st;
    const float *a = t->data;
    float *b = u.data;
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < k; i++)
            b[i * n + j] = a[j * k + i];
    slim_tensor_release(t);
    *t = u;
    return SLIM_OK;
}

/* A new intermediate value named after node name + suffix. */
static const char *fresh(slim_graph *g, const char *base, const char *suffix, char *buf,
                         size_t cap)
{
    for (int i = 0;; i++) {
        if (i)
            snprintf(buf, cap, "%s%s_%d", base, suffix, i);
        else
            snprintf(buf, cap, "%s%s", base, suffix);
        if (slim_graph_find_value(g, buf) < 0)
            return buf;
    }
}

static slim_status oom(slim_err *err)
{
    return slim_errf(err, SLIM_ENOMEM, "out of memory expanding 2:4 layers");
}

/* Node id as Conv [+ Add] [+ Relu | Clip], weight wname; the new nodes
 * write what it wrote. */
static slim_status emit(slim_graph *g, int id, const char *wname, slim_err *err)
{
    char name[256], cur[320], nxt[320], lo_n[320], hi_n[320];
    const slim_node *n = &g->nodes[id];
    snprintf(name, sizeof(name), "%s", n->name);
    int act = (int)slim_attr_int(n, "activation", 0), res = n->n_in > 5 ? n->in[5] : -1;
    int bias = n->n_in > 4 ? n->in[4] : -1;
    int64_t ks[2], s[2] = {1, 1}, d[2] = {1, 1}, p[4] = {0, 0, 0, 0};
    int64_t group = slim_attr_int(n, "group", 1);
    float lo = slim_attr_float(n, "alpha", 0), hi = slim_attr_float(n, "beta", 0);
    slim_attr_ints(n, "kernel_shape", ks, 2);
    slim_attr_ints(n, "strides", s, 2);
    slim_attr_ints(n, "dilations", d, 2);
    slim_attr_ints(n, "pads", p, 4);
    char out[320], x[320], b[320], r[320];
    snprintf(out, sizeof(out), "%s", g->values[n->out[0]].name);
    snprintf(x, sizeof(x), "%s", g->values[n->in[0]].name);
    snprintf(b, sizeof(b), "%s", bias >= 0 ? g->values[bias].name : "");
    snprintf(r, sizeof(r), "%s", res >= 0 ? g->values[res].name : "");
    /* The conv writes out itself when nothing follows it. */
    snprintf(cur, sizeof(cur), "%s", res >= 0 || act ? fresh(g, name, ".conv", nxt, sizeof(nxt))
                                                      : out);
    int c = slim_graph_add_node(g, name, "Conv", "", bias >= 0 ? 3 : 2,
                                (const char *[]){x, wname, b}, 1, (const char *[]){cur});
    if (c < 0)
        return oom(err);
    slim_node *cn = &g->nodes[c];
    slim_status st;
    if ((st = slim_pass_set_ints(cn, "kernel_shape", ks, 2, err)) ||
        (st = slim_pass_set_ints(cn, "strides", s, 2, err)) ||
        (st = slim_pass_set_ints(cn, "dilations", d, 2, err)) ||
        (st = slim_pass_set_ints(cn, "pads", p, 4, err)) ||
        (st = slim_pass_set_int(cn, "group", group, err)))
        return st;
    if (res >= 0) {
        const char *to = act ? fresh(g, name, ".res", nxt, sizeof(nxt)) : out;
        char tob[320];
        snprintf(tob, sizeof(tob), "%s", to);
        if (slim_graph_add_node(g, "", "Add", "", 2, (const char *[]){cur, r}, 1,
                                (const char *[]){tob}) < 0)
            return oom(err);
        snprintf(cur, sizeof(cur), "%s", tob);
    }
    if (act == 1 &&
        slim_graph_add_node(g, "", "Relu", "", 1, (const char *[]){cur}, 1,
                            (const char *[]){out}) < 0)
        return oom(err);
    if (act == 2) { /* bounds as inputs: Clip from opset 11 (the file's, see slim_graph) */
        slim_tensor tl = {0}, th = {0};
        slim_tensor_set_shape(&tl, SLIM_F32, 0, NULL);
        slim_tensor_set_shape(&th, SLIM_F32, 0, NULL);
        if (slim_tensor_alloc(&tl, err) || slim_tensor_alloc(&th, err)) {
            slim_tensor_release(&tl);
            return oom(err);
        }
        *(float *)tl.data = lo;
        *(float *)th.data = hi;
        int lv = slim_graph_add_initializer(g, name, ".clip_min", &tl, err);
        int hv = lv < 0 ? -1 : slim_graph_add_initializer(g, name, ".clip_max", &th, err);
        if (hv < 0) {
            slim_tensor_release(&th);
            return oom(err);
        }
        snprintf(lo_n, sizeof(lo_n), "%s", g->values[lv].name);
        snprintf(hi_n, sizeof(hi_n), "%s", g->values[hv].name);
        int cl = slim_graph_add_node(g, "", "Clip", "", 3, (const char *[]){cur, lo_n, hi_n}, 1,
                                     (const char *[]){out});
        if (cl < 0)
            return oom(err);
        if (g->nodes[cl].opset < 11)
            g->nodes[cl].opset = 11;
    }
    return SLIM_OK;
}

/* Whether value x is 2-D: declared so, or Flatten's output (a ResNet's or
 * MobileNetV2's head). */
static bool two_d(const slim_graph *g, int x)
{
    if (g->values[x].info.ndim == 2)
        return true;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].n_out > 0 && g->nodes[i].out[0] == x)
            return strcmp(g->nodes[i].op_type, "Flatten") == 0 && !g->nodes[i].domain[0];
    return false;
}

/* SparseMatMul id as Gemm(X, W, bias, transB = 1) with W its [N, K]
 * weight when X is 2-D (the node a dense model's head runs), else as
 * MatMul(X, W^T) [+ Add(bias)]; t is taken. */
static slim_status emit_mm(slim_graph *g, int id, slim_tensor *t, slim_err *err)
{
    char name[256], out[320], x[320], b[320], cur[320], wname[320];
    const slim_node *n = &g->nodes[id];
    int bias = n->n_in > 4 ? n->in[4] : -1;
    bool gemm = two_d(g, n->in[0]);
    slim_status st = gemm ? SLIM_OK : transpose(t, err);
    if (st) {
        slim_tensor_release(t);
        return st;
    }
    snprintf(name, sizeof(name), "%s", n->name);
    snprintf(out, sizeof(out), "%s", g->values[n->out[0]].name);
    snprintf(x, sizeof(x), "%s", g->values[n->in[0]].name);
    snprintf(b, sizeof(b), "%s", bias >= 0 ? g->values[bias].name : "");
    int wv = slim_graph_add_initializer(g, name, ".dense_weight", t, err);
    if (wv < 0)
        return oom(err);
    snprintf(wname, sizeof(wname), "%s", g->values[wv].name);
    if (gemm) {
        int m = slim_graph_add_node(g, name, "Gemm", "", bias >= 0 ? 3 : 2,
                                    (const char *[]){x, wname, b}, 1, (const char *[]){out});
        return m < 0 ? oom(err) : slim_pass_set_int(&g->nodes[m], "transB", 1, err);
    }
    char curb[320];
    snprintf(curb, sizeof(curb), "%s", bias >= 0 ? fresh(g, name, ".mm", cur, sizeof(cur)) : out);
    if (slim_graph_add_node(g, name, "MatMul", "", 2, (const char *[]){x, wname}, 1,
                            (const char *[]){curb}) < 0 ||
        (bias >= 0 && slim_graph_add_node(g, "", "Add", "", 2, (const char *[]){curb, b}, 1,
                                          (const char *[]){out}) < 0))
        return oom(err);
    return SLIM_OK;
}

static slim_status expand_run(slim_graph *g, int *changed, slim_err *err)
{
    int n_nodes = g->n_nodes;
    bool *old = calloc((size_t)n_nodes + 1, sizeof(bool));
    if (!old)
        return oom(err);
    slim_status st = SLIM_OK;
    for (int i = 0; i < n_nodes && !st; i++) {
        const slim_node *n = &g->nodes[i];
        if (!expandable(g, n))
            continue;
        bool conv = is_op(n, "SparseConv"), ok;
        int64_t ks[2] = {0, 0};
        if (conv && slim_attr_ints(n, "kernel_shape", ks, 2) != 2)
            continue; /* the node refuses it when run */
        slim_tensor t;
        if ((st = decode(g, n, conv ? 6 : 5, conv ? ks : NULL, &t, &ok, err)))
            break;
        if (!ok)
            continue; /* left as it is: the node refuses a bad encoding when run */
        /* The 2:4 operands are copied into t: their pages go now (a mapped
         * .slim range is handed back), or they would stay resident beside
         * the dense copy and a 2:4 model would peak above the dense one. */
        int si = conv ? 6 : 5;
        slim_pass_drop_replaced(g, n->in[1], n);
        slim_pass_drop_replaced(g, n->in[2], n);
        if (n->n_in > si && n->in[si] >= 0)
            slim_pass_drop_replaced(g, n->in[si], n);
        if (!conv) {
            st = emit_mm(g, i, &t, err);
        } else {
            char wname[320];
            int wv = slim_graph_add_initializer(g, n->name, ".dense_weight", &t, err);
            if (wv < 0) {
                st = oom(err);
                break;
            }
            snprintf(wname, sizeof(wname), "%s", g->values[wv].name);
            st = emit(g, i, wname, err);
        }
        if (st)
            break;
        old[i] = true;
        (*changed)++;
    }
    if (!st && *changed) {
        bool *dead = calloc((size_t)g->n_nodes, sizeof(bool));
        if (!dead)
            st = oom(err);
        else {
            memcpy(dead, old, sizeof(bool) * (size_t)n_nodes);
            slim_pass_sweep(g, dead);
            free(dead);
        }
    }
    free(old);
    return st;
}

const slim_pass slim__pass_prune_expand = {"prune_expand", expand_run};
