/*
 * plan.c - the activation arena planner (see plan.h) and the per-model
 * cache of plans.
 *
 * Building a plan is four passes over the sorted graph:
 *
 *   1. shapes: slim_model_infer_shapes gives every value's byte size for
 *      this input signature; a size it cannot see leaves the value out.
 *   2. views: an SLIM_OP_ALIAS0 output joins its source's group, so a
 *      chain of Reshapes is one group; a group is planned unless its root
 *      is borrowed (input, weight), its size is unknown or zero, or one of
 *      its values is a graph output (it outlives the run).
 *   3. in place: an SLIM_OP_INPLACE0 node's output 0 joins input 0's group
 *      (SLIM_OP_INPLACE3: input 3's) when that group is read for the last
 *      time at this node, has the output's byte size and is not also read
 *      through another input.
 *      Groups only merge forward, so one pass in step order suffices.
 *   4. offsets: each planned group is one buffer alive from its root's step
 *      to its last reader's step. Placement is the offset problem of
 *      Pisarchyk & Lee 2020 ("Efficient Memory Management for Deep Neural
 *      Net Inference"): take buffers in some order and put each in the
 *      tightest gap left by already placed buffers whose lifetimes overlap
 *      its own (best fit), or past them. Several orders are tried -- by
 *      size (the paper's greedy by size), and by breadth, the steps with
 *      the most live bytes first (their greedy by breadth) -- and the
 *      smallest arena is kept. Placement is O(n^2) in buffers and runs
 *      once per input signature (plans are cached per model).
 */
#include "plan.h"

#include "op.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static size_t align_up(size_t n)
{
    return (n + SLIM_PLAN_ALIGN - 1) & ~(size_t)(SLIM_PLAN_ALIGN - 1);
}

/* Byte size of a known shape; false when unknown or past SIZE_MAX/4 (such
 * a value cannot be allocated anyway, and the arena sums must not wrap). */
static bool shape_bytes(const slim_tensor *t, size_t *out)
{
    if (t->ndim < 0 || t->ndim > SLIM_MAX_DIMS || t->dtype == SLIM_DTYPE_UNDEFINED)
        return false;
    /* A string value's bytes are sized by its kernel, not its shape: it
     * gets a buffer of its own that holds slots and bytes (string_tensor.h). */
    if (t->dtype == SLIM_STRING)
        return false;
    size_t n = slim_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] < 0 || __builtin_mul_overflow(n, (size_t)t->dims[d], &n))
            return false;
    }
    if (n > SIZE_MAX / 4)
        return false;
    *out = n;
    return true;
}

/* ---- grouping ---------------------------------------------------------- */

typedef struct group {
    int parent;         /* union-find over view roots (in-place merges) */
    size_t size;
    bool planned;
    int first, last;
    int n_values;
} group;

static int group_find(group *gr, int r)
{
    while (gr[r].parent != r) {
        gr[r].parent = gr[gr[r].parent].parent;
        r = gr[r].parent;
    }
    return r;
}

typedef struct planner {
    const slim_graph *g;
    slim_tensor *shapes;    /* [n_values] */
    int *step_of;           /* [n_values]: producing node, -1 if none */
    int *last_read;         /* [n_values]: last node reading it, -1 if none */
    int *view_root;         /* [n_values]: root value of its view group */
    group *groups;          /* indexed by root value */
    int n_inplace;
    const struct slim_device *device; /* the arena's: the model's device, NULL for the CPU */
} planner;

static bool is_view(const slim_node *n)
{
    return (n->op->flags & SLIM_OP_ALIAS0) && n->n_in > 0 && n->in[0] >= 0 && n->n_out > 0 &&
           n->out[0] >= 0;
}

/* Passes 2 and 3 of the file comment. */
static void group_values(planner *pl)
{
    const slim_graph *g = pl->g;
    for (int v = 0; v < g->n_values; v++) {
        pl->view_root[v] = v;
        pl->groups[v] = (group){.parent = v, .first = pl->step_of[v], .last = -1};
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        if (is_view(n))
            pl->view_root[n->out[0]] = pl->view_root[n->in[0]];
    }
    for (int v = 0; v < g->n_values; v++) {
        group *r = &pl->groups[pl->view_root[v]];
        int last = pl->last_read[v] > pl->step_of[v] ? pl->last_read[v] : pl->step_of[v];
        if (last > r->last)
            r->last = last;
        r->n_values++;
    }
    for (int v = 0; v < g->n_values; v++) {
        const slim_value *val = &g->values[v];
        group *r = &pl->groups[v];
        if (pl->view_root[v] == v)
            r->planned = val->kind == SLIM_VALUE_INTERMEDIATE && pl->step_of[v] >= 0 &&
                         !val->is_output &&
                         /* one arena, on the model's device: values made
                          * on the other side are allocated on their own */
                         slim_node_out_device(&g->nodes[pl->step_of[v]]) == pl->device &&
                         shape_bytes(&pl->shapes[v], &r->size) && r->size > 0;
    }
    /* Any group holding a graph output outlives the run. */
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].is_output)
            pl->groups[pl->view_root[v]].planned = false;

    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        int k = n->op->flags & SLIM_OP_INPLACE0 ? 0 : n->op->flags & SLIM_OP_INPLACE3 ? 3 : -1;
        if (k < 0 || n->n_in <= k || n->in[k] < 0 || n->n_out < 1 || n->out[0] < 0 || is_view(n))
            continue;
        int gi = group_find(pl->groups, pl->view_root[n->in[k]]);
        int go = pl->view_root[n->out[0]];
        size_t in_bytes;
        group *a = &pl->groups[gi], *b = &pl->groups[go];
        if (go != n->out[0] || !a->planned || !b->planned || a->last != i ||
            a->size != b->size || !shape_bytes(&pl->shapes[n->in[k]], &in_bytes) ||
            in_bytes != a->size)
            continue;
        bool shared = false;
        for (int o = 0; o < n->n_in && !shared; o++)
            shared = o != k && n->in[o] >= 0 &&
                     group_find(pl->groups, pl->view_root[n->in[o]]) == gi;
        if (shared)
            continue;
        b->parent = gi;
        a->last = b->last > a->last ? b->last : a->last;
        a->n_values += b->n_values;
        pl->n_inplace++;
    }
}

/* ---- placement --------------------------------------------------------- */

typedef struct place_item {
    size_t size;        /* aligned */
    int first, last;
    size_t offset;
} place_item;

static bool overlaps(const place_item *a, const place_item *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* Places items in the given order, each at the best-fitting gap among the
 * placed items alive at the same time; returns the arena size. placed[] is
 * scratch of n ints, kept sorted by offset. */
static size_t place_in_order(place_item *it, const int *order, int n, int *placed)
{
    int n_placed = 0;
    size_t arena = 0;
    for (int o = 0; o < n; o++) {
        place_item *b = &it[order[o]];
        size_t prev_end = 0, best_gap = SIZE_MAX, best = SIZE_MAX;
        for (int p = 0; p < n_placed; p++) {
            const place_item *x = &it[placed[p]];
            if (!overlaps(x, b))
                continue;
            if (x->offset >= prev_end) {
                size_t gap = x->offset - prev_end;
                if (gap >= b->size && gap < best_gap) {
                    best_gap = gap;
                    best = prev_end;
                }
            }
            if (x->offset + x->size > prev_end)
                prev_end = x->offset + x->size;
        }
        b->offset = best != SIZE_MAX ? best : prev_end;
        if (b->offset + b->size > arena)
            arena = b->offset + b->size;
        int at = n_placed;
        while (at > 0 && it[placed[at - 1]].offset > b->offset) {
            placed[at] = placed[at - 1];
            at--;
        }
        placed[at] = order[o];
        n_placed++;
    }
    return arena;
}

/* qsort has no user pointer: the comparators read these. Planning runs
 * under no lock, so they are thread-local. */
static _Thread_local const place_item *sort_items;
static _Thread_local const size_t *sort_keys;

/* Larger first; ties: longer lifetime, then earlier start, then index. */
static int by_size(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    const place_item *x = &sort_items[a], *y = &sort_items[b];
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    int lx = x->last - x->first, ly = y->last - y->first;
    if (lx != ly)
        return lx > ly ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Larger key first, then by_size. */
static int by_key(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    if (sort_keys[a] != sort_keys[b])
        return sort_keys[a] > sort_keys[b] ? -1 : 1;
    return by_size(pa, pb);
}

/* Greedy by breadth: visit steps from the most live bytes down and place
 * the unplaced buffers alive there, largest first. The order is the
 * concatenation; the placement itself is shared with greedy by size. */
static void breadth_order(const place_item *it, int n, const size_t *live, int n_steps,
                          int *order, int *steps, bool *taken, int *tmp)
{
    /* Insertion sort by live bytes, largest first: stable, and the step
     * count is the node count, which the O(n^2) placement dwarfs anyway. */
    for (int s = 0; s < n_steps; s++) {
        int j = s;
        while (j > 0 && live[steps[j - 1]] < live[s]) {
            steps[j] = steps[j - 1];
            j--;
        }
        steps[j] = s;
    }
    memset(taken, 0, sizeof(bool) * (size_t)n);
    int n_order = 0;
    for (int si = 0; si < n_steps; si++) {
        int s = steps[si], m = 0;
        for (int b = 0; b < n; b++)
            if (!taken[b] && it[b].first <= s && s <= it[b].last)
                tmp[m++] = b;
        qsort(tmp, (size_t)m, sizeof(int), by_size);
        for (int k = 0; k < m; k++) {
            taken[tmp[k]] = true;
            order[n_order++] = tmp[k];
        }
    }
    for (int b = 0; b < n; b++) /* alive at no step: cannot happen, but stay total */
        if (!taken[b])
            order[n_order++] = b;
}

/* Fills offsets, arena_bytes, lower_bound_bytes and strategy. */
static slim_status assign_offsets(slim_plan *p, int n_steps, slim_err *err)
{
    int n = p->n_buffers;
    int ns = n_steps > 0 ? n_steps : 1;
    place_item *it = calloc((size_t)(n ? n : 1), sizeof(*it));
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *placed = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *tmp = malloc(sizeof(int) * (size_t)(n ? n : 1));
    bool *taken = malloc(sizeof(bool) * (size_t)(n ? n : 1));
    size_t *best_off = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    size_t *live = calloc((size_t)ns, sizeof(size_t));
    size_t *live_aligned = calloc((size_t)ns, sizeof(size_t));
    size_t *key = calloc((size_t)(n ? n : 1), sizeof(size_t));
    int *steps = malloc(sizeof(int) * (size_t)ns);
    slim_status st = SLIM_OK;
    if (!it || !order || !placed || !tmp || !taken || !best_off || !live || !live_aligned ||
        !key || !steps) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory planning the activation arena");
        goto done;
    }
    /* Live bytes per step by a difference array. */
    for (int b = 0; b < n; b++) {
        const slim_plan_buffer *pb = &p->buffers[b];
        it[b] = (place_item){.size = align_up(pb->size), .first = pb->first, .last = pb->last};
        for (int s = pb->first; s <= pb->last && s < ns; s++) {
            live[s] += pb->size;
            live_aligned[s] += it[b].size;
        }
    }
    p->lower_bound_bytes = 0;
    for (int s = 0; s < ns; s++)
        if (live[s] > p->lower_bound_bytes)
            p->lower_bound_bytes = live[s];

    sort_items = it;
    size_t best = SIZE_MAX;
    for (int strategy = 0; strategy < 3; strategy++) {
        const char *name = "greedy-by-size";
        for (int b = 0; b < n; b++)
            order[b] = b;
        if (strategy == 0) {
            qsort(order, (size_t)n, sizeof(int), by_size);
        } else if (strategy == 1) {
            /* By size, but a buffer weighs as much as the busiest step it
             * lives through: the crowded part of the graph is packed first. */
            for (int b = 0; b < n; b++) {
                key[b] = 0;
                for (int s = it[b].first; s <= it[b].last && s < ns; s++)
                    if (live_aligned[s] > key[b])
                        key[b] = live_aligned[s];
            }
            sort_keys = key;
            qsort(order, (size_t)n, sizeof(int), by_key);
        } else {
            name = "greedy-by-breadth";
            breadth_order(it, n, live_aligned, ns, order, steps, taken, tmp);
        }
        size_t arena = place_in_order(it, order, n, placed);
        if (arena < best) {
            best = arena;
            p->strategy = name;
            for (int b = 0; b < n; b++)
                best_off[b] = it[b].offset;
        }
    }
    p->arena_bytes = n ? best : 0;
    for (int b = 0; b < n; b++)
        p->buffers[b].offset = best_off[b];
done:
    free(it);
    free(order);
    free(placed);
    free(tmp);
    free(taken);
    free(best_off);
    free(live);
    free(live_aligned);
    free(key);
    free(steps);
    return st;
}

/* ---- building ---------------------------------------------------------- */

void slim_plan_free(slim_plan *p)
{
    if (!p)
        return;
    free(p->inputs);
    free(p->buffers);
    free(p->buffer_of_value);
    free(p->value_bytes);
    free(p);
}

slim_status slim_plan_build(const slim_model *m, const slim_tensor *input_shapes,
                            slim_plan **out, slim_err *err)
{
    const slim_graph *g = m->graph;
    int nv = g->n_values ? g->n_values : 1;
    *out = NULL;
    planner pl = {.g = g, .device = m->device};
    slim_plan *p = calloc(1, sizeof(*p));
    int *buf_of_root = NULL;
    pl.shapes = calloc((size_t)nv, sizeof(slim_tensor));
    pl.step_of = malloc(sizeof(int) * (size_t)nv);
    pl.last_read = malloc(sizeof(int) * (size_t)nv);
    pl.view_root = malloc(sizeof(int) * (size_t)nv);
    pl.groups = calloc((size_t)nv, sizeof(group));
    buf_of_root = malloc(sizeof(int) * (size_t)nv);
    slim_status st;
    if (!p || !pl.shapes || !pl.step_of || !pl.last_read || !pl.view_root || !pl.groups ||
        !buf_of_root)
        goto oom;
    p->n_values = g->n_values;
    p->n_inputs = g->n_inputs;
    p->inputs = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof(slim_tensor));
    p->buffer_of_value = malloc(sizeof(int) * (size_t)nv);
    p->value_bytes = calloc((size_t)nv, sizeof(size_t));
    if (!p->inputs || !p->buffer_of_value || !p->value_bytes)
        goto oom;
    for (int i = 0; i < g->n_inputs; i++) {
        p->inputs[i] = input_shapes[i];
        p->inputs[i].data = NULL;
        p->inputs[i].buf = NULL;
    }
    p->batch = g->n_inputs > 0 && p->inputs[0].ndim > 0 ? p->inputs[0].dims[0] : -1;
    if ((st = slim_model_infer_shapes(m, input_shapes, pl.shapes, err)))
        goto fail;

    for (int v = 0; v < g->n_values; v++)
        pl.step_of[v] = pl.last_read[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0)
                pl.last_read[n->in[k]] = i;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0)
                pl.step_of[n->out[k]] = i;
    }
    group_values(&pl);

    /* The naive footprint and a guard against sums that would wrap. */
    size_t naive = 0;
    bool wraps = false;
    for (int v = 0; v < g->n_values; v++) {
        int r = group_find(pl.groups, pl.view_root[v]);
        if (pl.groups[r].planned)
            wraps |= __builtin_add_overflow(naive, align_up(pl.groups[r].size), &naive);
    }
    p->naive_bytes = wraps ? 0 : naive;

    int n_buffers = 0;
    for (int v = 0; v < g->n_values; v++) {
        buf_of_root[v] = -1;
        if (!wraps && pl.view_root[v] == v && pl.groups[v].parent == v && pl.groups[v].planned)
            buf_of_root[v] = n_buffers++;
    }
    p->buffers = calloc((size_t)(n_buffers ? n_buffers : 1), sizeof(slim_plan_buffer));
    if (!p->buffers)
        goto oom;
    p->n_buffers = n_buffers;
    for (int v = 0; v < g->n_values; v++) {
        int b = buf_of_root[v];
        if (b < 0)
            continue;
        const group *gr = &pl.groups[v];
        p->buffers[b] = (slim_plan_buffer){.root = v, .size = gr->size, .first = gr->first,
                                           .last = gr->last, .n_values = gr->n_values};
    }
    for (int v = 0; v < g->n_values; v++) {
        int r = group_find(pl.groups, pl.view_root[v]);
        p->buffer_of_value[v] = buf_of_root[r];
        p->value_bytes[v] = buf_of_root[r] >= 0 ? pl.groups[r].size : 0;
    }
    p->n_inplace = wraps ? 0 : pl.n_inplace;
    p->strategy = "greedy-by-size";
    if ((st = assign_offsets(p, g->n_nodes, err)))
        goto fail;
    *out = p;
    p = NULL;
    st = SLIM_OK;
    goto done;
oom:
    st = slim_errf(err, SLIM_ENOMEM, "out of memory planning the activation arena");
fail:
    slim_plan_free(p);
done:
    free(pl.shapes);
    free(pl.step_of);
    free(pl.last_read);
    free(pl.view_root);
    free(pl.groups);
    free(buf_of_root);
    return st;
}

/* ---- printing ---------------------------------------------------------- */

void slim_plan_print(const slim_model *m, const slim_plan *p, FILE *f)
{
    const slim_graph *g = m->graph;
    char shape[160];
    fprintf(f, "activation plan for");
    for (int i = 0; i < p->n_inputs; i++)
        fprintf(f, "%s %s %s%s", i ? "," : "", g->values[g->inputs[i]].name,
                slim_dtype_name(p->inputs[i].dtype),
                slim_shape_str(p->inputs[i].ndim, p->inputs[i].dims, shape, sizeof(shape)));
    fprintf(f, "\n");
    /* One sweep collects each buffer's values: the list heads are the
     * buffers, next[] chains values in id order. */
    int *head = malloc(sizeof(int) * (size_t)(p->n_buffers ? p->n_buffers : 1));
    int *next = malloc(sizeof(int) * (size_t)(p->n_values ? p->n_values : 1));
    if (head && next) {
        for (int b = 0; b < p->n_buffers; b++)
            head[b] = -1;
        for (int v = p->n_values - 1; v >= 0; v--) {
            int b = p->buffer_of_value[v];
            if (b >= 0) {
                next[v] = head[b];
                head[b] = v;
            }
        }
        fprintf(f, "%6s %12s %12s %11s  %s\n", "buffer", "offset", "bytes", "steps", "values");
        for (int b = 0; b < p->n_buffers; b++) {
            const slim_plan_buffer *pb = &p->buffers[b];
            char steps[32];
            snprintf(steps, sizeof(steps), "%d-%d", pb->first, pb->last);
            fprintf(f, "%6d %12zu %12zu %11s  ", b, pb->offset, pb->size, steps);
            for (int v = head[b]; v >= 0; v = next[v])
                fprintf(f, "%s%s", v == head[b] ? "" : ", ", g->values[v].name);
            fprintf(f, "\n");
        }
    }
    free(head);
    free(next);
    int unplanned = 0;
    for (int v = 0; v < p->n_values; v++)
        if (p->buffer_of_value[v] < 0 && g->values[v].kind == SLIM_VALUE_INTERMEDIATE &&
            g->values[v].producer >= 0)
            unplanned++;
    fprintf(f, "arena_bytes: %zu\n", p->arena_bytes);
    fprintf(f, "lower_bound_bytes: %zu\n", p->lower_bound_bytes);
    fprintf(f, "naive_bytes: %zu\n", p->naive_bytes);
    fprintf(f, "buffers: %d\n", p->n_buffers);
    fprintf(f, "inplace: %d\n", p->n_inplace);
    fprintf(f, "unplanned_values: %d\n", unplanned);
    fprintf(f, "strategy: %s\n", p->strategy);
}

/* ---- the per-model cache ----------------------------------------------- */

struct slim_plan_cache {
    pthread_mutex_t lock;
    int n;
    slim_plan *plans[SLIM_PLAN_CACHE_MAX];
};

struct slim_plan_cache *slim__plan_cache_new(void)
{
    struct slim_plan_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

void slim__plan_cache_free(struct slim_plan_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        slim_plan_free(c->plans[i]);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static bool same_signature(const slim_plan *p, int n, const slim_tensor *shapes)
{
    if (p->n_inputs != n)
        return false;
    for (int i = 0; i < n; i++) {
        const slim_tensor *a = &p->inputs[i], *b = &shapes[i];
        /* A container (an untyped input given a sequence) plans apart. */
        if (a->dtype != b->dtype || a->ndim != b->ndim || a->kind != b->kind)
            return false;
        for (int d = 0; d < a->ndim && d < SLIM_MAX_DIMS; d++)
            if (a->dims[d] != b->dims[d])
                return false;
    }
    return true;
}

static slim_plan *cache_lookup(struct slim_plan_cache *c, int n, const slim_tensor *shapes)
{
    for (int i = 0; i < c->n; i++)
        if (same_signature(c->plans[i], n, shapes))
            return c->plans[i];
    return NULL;
}

slim_status slim_model_plan(const slim_model *m, const slim_tensor *input_shapes,
                            const slim_plan **out, bool *owned, slim_err *err)
{
    struct slim_plan_cache *c = m->plans;
    int n = m->graph->n_inputs;
    *out = NULL;
    *owned = false;
    if (c) {
        pthread_mutex_lock(&c->lock);
        slim_plan *hit = cache_lookup(c, n, input_shapes);
        pthread_mutex_unlock(&c->lock);
        if (hit) {
            *out = hit;
            return SLIM_OK;
        }
    }
    /* Built outside the lock: a new signature must not stall runs of known
     * ones. Two threads may build the same plan; the second one to finish
     * takes the first's and drops its own. */
    slim_plan *p;
    slim_status st = slim_plan_build(m, input_shapes, &p, err);
    if (st)
        return st;
    if (!c) {
        *out = p;
        *owned = true;
        return SLIM_OK;
    }
    pthread_mutex_lock(&c->lock);
    slim_plan *hit = cache_lookup(c, n, input_shapes);
    if (hit) {
        *out = hit;
    } else if (c->n < SLIM_PLAN_CACHE_MAX) {
        c->plans[c->n++] = p;
        *out = p;
        p = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (p && *out) {
        slim_plan_free(p);
    } else if (p) {
        *out = p;
        *owned = true;
    }
    return SLIM_OK;
}

int slim_model_plan_sizes(const slim_model *m, int64_t *batch, size_t *arena_bytes, int cap)
{
    struct slim_plan_cache *c = m->plans;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    int n = c->n < cap ? c->n : cap;
    for (int i = 0; i < n; i++) {
        batch[i] = c->plans[i]->batch;
        arena_bytes[i] = c->plans[i]->arena_bytes;
    }
    pthread_mutex_unlock(&c->lock);
    return n;
}
