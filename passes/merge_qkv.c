/*
 * merge_qkv.c - the query, key and value projections of an attention block
 * as one product, and FusedAttention reading its three parts in place.
 *
 * slim_pass_merge_qkv (the pipeline's compress stage, before the int8 and half passes, so
 * that they quantize or narrow the merged weight): three MatMuls of one
 * input X by constant float32 weights [K, N_i], each with a constant bias
 * Add [N_i] or none (all alike), whose results each go on to one Reshape,
 * Mul or Div (the head split of an attention block, or its scale), become
 *
 *     Split(Add(MatMul(X, [Wq | Wk | Wv]), [bq | bk | bv]), axis -1, [Nq, Nk, Nv])
 *
 * writing the same three values. Each output column is still the dot
 * product of a row of X with one weight column; int8's integer sums are
 * exact, so the int8 model's outputs are bitwise the unmerged ones, and
 * float32 ones differ only where a kernel blocks K differently for a wider
 * N. What changes is the number of calls: one quantization of X instead of
 * three (int8), one wake of the threads, one packed panel set. The example
 * transformer's int8 projections took 3 x 5.5 us at batch 8; merged, 10 us.
 *
 * The caller may refuse a group (slim_merge_hooks): an int8 load merges
 * only projections whose outlier input channels (quant/int8.c) are the
 * same, since a merged weight splits off at most K / 16 rows where three
 * weights would each split off their own (BERT-sized encoder, outliers in
 * different rows: cosine to fp32 0.994 -> 0.992 merged).
 *
 * Only weights in the process's own memory are merged (an .onnx file's, or
 * `slim convert`'s, which stores the merged weight): one mapped from a
 * .slim file would be copied out of the page cache that replicas share.
 * SLIM_MERGE_QKV=0 turns the merge off (comparisons), as SLIM_PASSES=0 does.
 *
 * attention_qkv (a graph pass after fuse_attention): a FusedAttention whose
 * Q, K and V are the three outputs, in order, of one Split along the last
 * axis (what the merge makes, and what GPT-2-style exports have) reads them
 * from the Split's input with its row stride (attribute qkv_sizes, inputs
 * 1 and 2 absent), and the Split, a copy of every projection, goes.
 */
#include "pass.h"
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_op(const slim_node *n, const char *op)
{
    return n && !n->domain[0] && strcmp(n->op_type, op) == 0;
}

/* One projection: its MatMul, its bias Add (or NULL), W [K, N] and b [N]. */
typedef struct {
    slim_node *mm, *add;
    const slim_tensor *w, *b;
    int out;                      /* the value the Split will write */
} qkv_proj;

/* The constant float32 vector of n values that is add's other operand. */
static const slim_tensor *bias_of(const slim_graph *g, const slim_node *add, int x)
{
    if (add->n_in != 2 || add->n_out != 1)
        return NULL;
    int other = add->in[0] == x ? add->in[1] : add->in[1] == x ? add->in[0] : -1;
    if (other < 0 || add->in[0] == add->in[1])
        return NULL;
    const slim_tensor *b = slim_pass_const_f32(g, other);
    return b && b->ndim == 1 ? b : NULL;
}

static bool in_heap(const slim_tensor *t)
{
    int fd;
    int64_t off;
    return !slim_file_map_lookup(t->data, slim_tensor_nbytes(t), &fd, &off);
}

/* mm as a projection of x: W a heap float32 [K, N], the result read once,
 * through its bias Add or directly, by a Reshape, Mul or Div. */
static bool projection(slim_graph *g, const slim_pass_uses *u, slim_node *mm, int x,
                       bool (*skip)(const slim_node *, void *), void *user, qkv_proj *p)
{
    if (!is_op(mm, "MatMul") || mm->n_in != 2 || mm->n_out != 1 || mm->in[0] != x ||
        mm->out[0] < 0 || (skip && skip(mm, user)))
        return false;
    const slim_tensor *w = slim_pass_const_f32(g, mm->in[1]);
    if (!w || w->ndim != 2 || w->dims[0] < 1 || w->dims[1] < 1 || !in_heap(w))
        return false;
    memset(p, 0, sizeof(*p));
    p->mm = mm;
    p->w = w;
    p->out = mm->out[0];
    slim_node *add = slim_pass_sole_reader(g, u, p->out, "Add");
    if (add && !(skip && skip(add, user))) {
        const slim_tensor *b = bias_of(g, add, p->out);
        if (b && b->dims[0] == w->dims[1] && add->out[0] >= 0) {
            p->add = add;
            p->b = b;
            p->out = add->out[0];
        }
    }
    return slim_pass_sole_reader(g, u, p->out, "Reshape") ||
           slim_pass_sole_reader(g, u, p->out, "Mul") || slim_pass_sole_reader(g, u, p->out, "Div");
}

/* A value name not yet in g: base + suffix, then _1, _2... */
static int new_value(slim_graph *g, const char *base, const char *suffix)
{
    char name[512];
    snprintf(name, sizeof(name), "%s%s", base, suffix);
    for (int i = 1; slim_graph_find_value(g, name) >= 0 && i < 1000; i++)
        snprintf(name, sizeof(name), "%s%s_%d", base, suffix, i);
    if (slim_graph_find_value(g, name) >= 0)
        return -1;
    return slim_graph_value(g, name);
}

static int add_node(slim_graph *g, const char *name, const char *op, int n_in, const int *in,
                    int n_out, const int *out)
{
    const char *ins[3], *outs[3];
    for (int i = 0; i < n_in; i++)
        ins[i] = g->values[in[i]].name;
    for (int i = 0; i < n_out; i++)
        outs[i] = g->values[out[i]].name;
    int id = slim_graph_add_node(g, name, op, "", n_in, ins, n_out, outs);
    if (id >= 0)
        g->nodes[id].opset = g->opset;
    return id;
}

/* Replaces the three projections by MatMul [+ Add] + Split, appended; the
 * caller marks the old nodes dead. Everything read from p (weights, names)
 * is read before the appends, which may move g's arrays. */
static slim_status merge(slim_graph *g, const qkv_proj *p, slim_err *err)
{
    int64_t k = p[0].w->dims[0], n = 0, sizes[3];
    for (int i = 0; i < 3; i++)
        n += sizes[i] = p[i].w->dims[1];
    bool has_bias = p[0].b != NULL;
    slim_tensor w = {.dtype = SLIM_F32, .ndim = 2, .dims = {k, n}};
    slim_tensor b = {.dtype = SLIM_F32, .ndim = 1, .dims = {n}};
    slim_tensor s = {.dtype = SLIM_I64, .ndim = 1, .dims = {3}};
    slim_status st;
    if ((st = slim_tensor_alloc(&w, err)) || (has_bias && (st = slim_tensor_alloc(&b, err))) ||
        (st = slim_tensor_alloc(&s, err))) {
        slim_tensor_release(&w);
        slim_tensor_release(&b);
        return st;
    }
    float *wd = w.data, *bd = b.data;
    for (int64_t r = 0; r < k; r++) {
        int64_t c = 0;
        for (int i = 0; i < 3; c += sizes[i], i++)
            memcpy(wd + r * n + c, (const float *)p[i].w->data + r * sizes[i],
                   sizeof(float) * (size_t)sizes[i]);
    }
    int64_t c = 0;
    for (int i = 0; has_bias && i < 3; c += sizes[i], i++)
        memcpy(bd + c, p[i].b->data, sizeof(float) * (size_t)sizes[i]);
    memcpy(s.data, sizes, sizeof(sizes));
    char base[400], wname[400];
    snprintf(base, sizeof(base), "%s", p[0].mm->name);
    snprintf(wname, sizeof(wname), "%s", g->values[p[0].mm->in[1]].name);
    int x = p[0].mm->in[0], outs[3] = {p[0].out, p[1].out, p[2].out};
    int wv = slim_graph_add_initializer(g, wname, "_qkv", &w, err);
    int bv = has_bias ? slim_graph_add_initializer(g, wname, "_qkv_bias", &b, err) : -1;
    int sv = slim_graph_add_initializer(g, base, "_qkv_sizes", &s, err);
    int prod = new_value(g, base, "_qkv_out");
    int sum = has_bias ? new_value(g, base, "_qkv_bias_out") : prod;
    slim_tensor_release(&w); /* taken (cleared) unless adding failed */
    slim_tensor_release(&b);
    slim_tensor_release(&s);
    if (wv < 0 || (has_bias && bv < 0) || sv < 0 || prod < 0 || sum < 0)
        return slim_errf(err, SLIM_ENOMEM, "out of memory merging the projections of %s", base);
    char name[512];
    snprintf(name, sizeof(name), "%s_qkv", base);
    int ok = add_node(g, name, "MatMul", 2, (int[]){x, wv}, 1, &prod) >= 0;
    snprintf(name, sizeof(name), "%s_qkv_bias", base);
    ok = ok && (!has_bias || add_node(g, name, "Add", 2, (int[]){prod, bv}, 1, &sum) >= 0);
    snprintf(name, sizeof(name), "%s_qkv_split", base);
    int d = ok ? add_node(g, name, "Split", 2, (int[]){sum, sv}, 3, outs) : -1;
    if (d < 0)
        return slim_errf(err, SLIM_ENOMEM, "out of memory merging the projections of %s", base);
    return slim_pass_set_int(&g->nodes[d], "axis", -1, err);
}

/* slim_pass_walk_finish for a walk over the first n0 nodes of a graph that
 * has grown since (its flags cover those alone): sweeps the dead nodes
 * when anything changed and st is SLIM_OK, frees the walk, returns st. */
static slim_status finish_grown(slim_graph *g, slim_pass_walk *w, int n0, slim_status st,
                                bool changed, slim_err *err)
{
    if (!st && changed) {
        bool *dead = calloc((size_t)g->n_nodes, sizeof(bool));
        if (!dead) {
            st = slim_errf(err, SLIM_ENOMEM, "out of memory rewriting attention projections");
        } else {
            memcpy(dead, w->dead, sizeof(bool) * (size_t)n0);
            slim_pass_sweep(g, dead);
            free(dead);
        }
    }
    slim_pass_uses_free(&w->uses);
    free(w->dead);
    return st;
}

slim_status slim_pass_merge_qkv(slim_graph *g, const slim_merge_hooks *hooks, int *merged,
                                slim_err *err)
{
    bool (*skip)(const slim_node *, void *) = hooks ? hooks->skip : NULL;
    void *user = hooks ? hooks->user : NULL;
    *merged = 0;
    const char *env = getenv("SLIM_MERGE_QKV"), *all = getenv("SLIM_PASSES");
    /* The Split takes its sizes as an input from opset 13. */
    if ((env && strcmp(env, "0") == 0) || (all && strcmp(all, "0") == 0) || g->opset < 13)
        return SLIM_OK;
    slim_pass_walk wk;
    slim_status st = slim_pass_walk_init(&wk, g, err);
    if (st)
        return st;
    int n0 = g->n_nodes;
    for (int i = 0; i < n0 && !st; i++) {
        slim_node *first = &g->nodes[i];
        if (wk.dead[i] || !is_op(first, "MatMul") || first->n_in != 2 || first->in[0] < 0 ||
            g->values[first->in[0]].kind == SLIM_VALUE_INITIALIZER)
            continue;
        int x = first->in[0];
        qkv_proj p[3];
        int np = 0;
        bool more = false;
        for (int j = i; j < n0; j++) {
            if (wk.dead[j] || g->nodes[j].n_in < 1 || g->nodes[j].in[0] != x)
                continue;
            qkv_proj q;
            if (!projection(g, &wk.uses, &g->nodes[j], x, skip, user, &q))
                continue;
            if (np == 3)
                more = true;
            else
                p[np++] = q;
        }
        if (np != 3 || more || p[0].mm != first)
            continue;
        bool alike = true;
        for (int j = 1; j < 3; j++)
            alike = alike && p[j].w->dims[0] == p[0].w->dims[0] && !p[j].add == !p[0].add;
        const slim_tensor *ws[3] = {p[0].w, p[1].w, p[2].w};
        if (!alike || (hooks && hooks->group_ok && !hooks->group_ok(ws, 3, user)))
            continue;
        for (int j = 0; j < 3; j++) {
            wk.dead[p[j].mm - g->nodes] = true;
            if (p[j].add)
                wk.dead[p[j].add - g->nodes] = true;
        }
        st = merge(g, p, err);
        *merged += !st;
    }
    return finish_grown(g, &wk, n0, st, *merged > 0, err);
}

/* The three sizes of a Split of its input's last axis into three parts,
 * given explicitly (the 'split' input from opset 13, the attribute
 * before). */
static bool split_last3(const slim_graph *g, const slim_node *sp, int64_t *sizes)
{
    if (!is_op(sp, "Split") || sp->n_in < 1 || sp->n_out != 3 || sp->in[0] < 0)
        return false;
    int64_t axis = slim_attr_int(sp, "axis", 0);
    const slim_io_info *xi = &g->values[sp->in[0]].info;
    if (axis != -1 && !(xi->ndim > 0 && axis == xi->ndim - 1))
        return false;
    if (sp->opset >= 13) {
        int v = sp->n_in > 1 ? sp->in[1] : -1;
        if (v < 0 || g->values[v].kind != SLIM_VALUE_INITIALIZER)
            return false;
        const slim_tensor *t = &g->values[v].init;
        if (t->dtype != SLIM_I64 || t->device || !t->data || slim_tensor_numel(t) != 3)
            return false;
        memcpy(sizes, t->data, sizeof(int64_t) * 3);
    } else if (slim_attr_ints(sp, "split", sizes, 3) != 3) {
        return false;
    }
    for (int i = 0; i < 3; i++)
        if (sizes[i] < 1 || sizes[i] > ((int64_t)1 << 40))
            return false;
    return true;
}

static slim_status attention_qkv_run(slim_graph *g, int *changed, slim_err *err)
{
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *fa = &g->nodes[i];
        if (w.dead[i] || strcmp(fa->op_type, "FusedAttention") != 0 ||
            strcmp(fa->domain, "com.slimserve") != 0 || fa->n_in < 3 ||
            slim_node_attr(fa, "qkv_sizes"))
            continue;
        int q = fa->in[0], p = q >= 0 ? w.uses.producer[q] : -1;
        if (p < 0 || w.dead[p])
            continue;
        slim_node *sp = &g->nodes[p];
        int64_t sizes[3];
        bool ok = split_last3(g, sp, sizes);
        /* Its outputs in order, each read by this node alone. */
        for (int k = 0; ok && k < 3; k++)
            ok = sp->out[k] >= 0 && fa->in[k] == sp->out[k] && w.uses.readers[sp->out[k]] == 1 &&
                 !g->values[sp->out[k]].is_output;
        if (!ok)
            continue;
        fa->in[0] = sp->in[0];
        fa->in[1] = fa->in[2] = -1;
        if ((st = slim_pass_set_ints(fa, "qkv_sizes", sizes, 3, err)))
            break;
        w.dead[p] = true;
        (*changed)++;
    }
    return slim_pass_walk_finish(&w, g, st);
}

const slim_pass slim__pass_attention_qkv = {"attention_qkv", attention_qkv_run};

/* ---- undoing the merge, for a GPU --------------------------------------- */

/* A Split of Add(MatMul(X, W), b) or of MatMul(X, W) along the last axis
 * into three, each part read back as its own MatMul [+ Add] of W's (and
 * b's) columns: on a GPU, which runs MatMul and Add but would take the
 * Split back to the host with a copy each way. What a .slim file written
 * by `slim convert` for the CPU holds, loaded on a GPU. */
static slim_status unmerge_one(slim_graph *g, slim_pass_walk *w, int si, int *done, slim_err *err)
{
    slim_node *sp = &g->nodes[si];
    int64_t sizes[3];
    if (!split_last3(g, sp, sizes))
        return SLIM_OK;
    int v = sp->in[0], p = w->uses.producer[v];
    if (p < 0 || w->dead[p] || w->uses.readers[v] != 1 || g->values[v].is_output)
        return SLIM_OK;
    slim_node *add = NULL, *mm = &g->nodes[p];
    const slim_tensor *b = NULL;
    if (is_op(mm, "Add")) {
        add = mm;
        int x = add->in[0], other = add->in[1];
        if (add->n_in != 2 || x < 0 || other < 0)
            return SLIM_OK;
        int px = w->uses.producer[x], po = w->uses.producer[other];
        if (px >= 0 && is_op(&g->nodes[px], "MatMul") && (b = slim_pass_const_f32(g, other))) {
            p = px;
        } else if (po >= 0 && is_op(&g->nodes[po], "MatMul") && (b = slim_pass_const_f32(g, x))) {
            p = po;
            x = other;
        } else {
            return SLIM_OK;
        }
        if (w->dead[p] || w->uses.readers[x] != 1 || g->values[x].is_output)
            return SLIM_OK;
        mm = &g->nodes[p];
    }
    const slim_tensor *wt = mm->n_in == 2 ? slim_pass_const_f32(g, mm->in[1]) : NULL;
    int64_t n = sizes[0] + sizes[1] + sizes[2];
    if (!is_op(mm, "MatMul") || mm->n_out != 1 || !wt || wt->ndim != 2 || wt->dims[1] != n ||
        (b && (b->ndim != 1 || b->dims[0] != n)))
        return SLIM_OK;
    int64_t k = wt->dims[0];
    slim_tensor parts[3] = {{0}}, biases[3] = {{0}};
    slim_status st = SLIM_OK;
    int64_t c = 0;
    for (int i = 0; i < 3 && !st; c += sizes[i], i++) {
        parts[i] = (slim_tensor){.dtype = SLIM_F32, .ndim = 2, .dims = {k, sizes[i]}};
        biases[i] = (slim_tensor){.dtype = SLIM_F32, .ndim = 1, .dims = {sizes[i]}};
        if ((st = slim_tensor_alloc(&parts[i], err)) || (b && (st = slim_tensor_alloc(&biases[i], err))))
            break;
        for (int64_t r = 0; r < k; r++)
            memcpy((float *)parts[i].data + r * sizes[i], (const float *)wt->data + r * n + c,
                   sizeof(float) * (size_t)sizes[i]);
        if (b)
            memcpy(biases[i].data, (const float *)b->data + c, sizeof(float) * (size_t)sizes[i]);
    }
    char base[400], wname[400];
    snprintf(base, sizeof(base), "%s", mm->name);
    snprintf(wname, sizeof(wname), "%s", g->values[mm->in[1]].name);
    int x = mm->in[0], outs[3] = {sp->out[0], sp->out[1], sp->out[2]};
    bool has_bias = b != NULL;
    w->dead[si] = w->dead[p] = true;
    if (add)
        w->dead[add - g->nodes] = true;
    for (int i = 0; i < 3 && !st; i++) {
        char suffix[32], name[512];
        snprintf(suffix, sizeof(suffix), "_part%d", i);
        int wv = slim_graph_add_initializer(g, wname, suffix, &parts[i], err);
        snprintf(suffix, sizeof(suffix), "_part%d_bias", i);
        int bv = has_bias ? slim_graph_add_initializer(g, wname, suffix, &biases[i], err) : -1;
        snprintf(suffix, sizeof(suffix), "_part%d_out", i);
        int prod = has_bias ? new_value(g, base, suffix) : outs[i];
        snprintf(name, sizeof(name), "%s_part%d", base, i);
        bool ok = wv >= 0 && (!has_bias || bv >= 0) && prod >= 0 &&
                  add_node(g, name, "MatMul", 2, (int[]){x, wv}, 1, &prod) >= 0;
        snprintf(name, sizeof(name), "%s_part%d_bias", base, i);
        ok = ok && (!has_bias || add_node(g, name, "Add", 2, (int[]){prod, bv}, 1, &outs[i]) >= 0);
        if (!ok)
            st = slim_errf(err, SLIM_ENOMEM, "out of memory splitting the projections of %s",
                           base);
    }
    for (int i = 0; i < 3; i++) {
        slim_tensor_release(&parts[i]);
        slim_tensor_release(&biases[i]);
    }
    *done += !st;
    return st;
}

slim_status slim_pass_unmerge_qkv(slim_graph *g, slim_err *err)
{
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    int n0 = g->n_nodes, done = 0;
    for (int i = 0; i < n0 && !st; i++)
        if (!w.dead[i] && is_op(&g->nodes[i], "Split"))
            st = unmerge_one(g, &w, i, &done, err);
    return finish_grown(g, &w, n0, st, done > 0, err);
}
