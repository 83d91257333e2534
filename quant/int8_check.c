/*
 * int8_check.c - the sample activations behind the int8 pass's per-layer
 * error check (int8.h: "max_error").
 *
 * The check needs, for each layer the pass may quantize, the float32 input
 * that layer sees. Those come from one float32 run of the model on sample
 * inputs, with every candidate layer's input added as a graph output. The
 * run uses its own copy of the model, read from the same file by the load
 * pipeline (pipeline/compress.c), handed over here and freed before the
 * real load starts: the pass then measures each layer with its
 * float weights still at hand and drops them as before, so the load's peak
 * stays the float model plus one layer (plus the activations, which for a
 * sample of a few rows are small next to the weights).
 *
 * Sample inputs are the caller's (slim run's own inputs) or drawn from the
 * input specs: floats from N(0, 1), integer inputs that index a constant
 * table (token ids) uniform over its rows, other integers 1 (masks),
 * unknown dims 1 for the first (batch) and 16 for the rest (a short
 * sequence). The draw is seeded, so a load quantizes the same layers each
 * time.
 */
#include "int8.h"

#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLE_DIM_FIRST 1
#define SAMPLE_DIM_OTHER 16

static bool is_const_f32_2d(const slim_graph *g, int v)
{
    return v >= 0 && g->values[v].kind == SLIM_VALUE_INITIALIZER &&
           g->values[v].init.dtype == SLIM_F32 && g->values[v].init.ndim == 2;
}

/* The value whose float32 contents the pass's check reads for node n: the
 * X of a MatMul, Gemm or Conv with a constant weight, the indices of a Gather
 * from a constant table; -1 for other nodes. Mirrors int8.c's candidates. */
static int checked_input(const slim_graph *g, const slim_node *n)
{
    if (n->domain[0] || n->n_in < 2)
        return -1;
    if ((!strcmp(n->op_type, "MatMul") || !strcmp(n->op_type, "Gemm")) &&
        is_const_f32_2d(g, n->in[1]))
        return n->in[0];
    if (!strcmp(n->op_type, "Conv") && n->in[1] >= 0 &&
        g->values[n->in[1]].kind == SLIM_VALUE_INITIALIZER &&
        g->values[n->in[1]].init.dtype == SLIM_F32 && g->values[n->in[1]].init.ndim == 4)
        return n->in[0];
    if (!strcmp(n->op_type, "Gather") && is_const_f32_2d(g, n->in[0]))
        return n->in[1];
    return -1;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Rows of the smallest constant table that input v indexes, or 0. */
static int64_t index_range(const slim_graph *g, int v)
{
    int64_t rows = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        if (!strcmp(n->op_type, "Gather") && n->n_in == 2 && n->in[1] == v &&
            n->in[0] >= 0 && g->values[n->in[0]].kind == SLIM_VALUE_INITIALIZER) {
            int64_t r = g->values[n->in[0]].init.dims[0];
            rows = rows == 0 || r < rows ? r : rows;
        }
    }
    return rows;
}

static slim_status draw_input(const slim_graph *g, int v, uint64_t *seed, slim_tensor *t,
                              slim_err *err)
{
    const slim_value *val = &g->values[v];
    memset(t, 0, sizeof(*t));
    if (val->info.ndim < 0 || val->info.dtype == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "input \"%s\" has no declared type and shape to draw "
                         "a sample from", val->name);
    t->dtype = val->info.dtype;
    t->ndim = val->info.ndim;
    for (int d = 0; d < t->ndim; d++)
        t->dims[d] = val->info.dims[d] >= 0 ? val->info.dims[d]
                                             : d == 0 ? SAMPLE_DIM_FIRST : SAMPLE_DIM_OTHER;
    slim_status st = slim_tensor_alloc(t, err);
    if (st)
        return st;
    int64_t n = slim_tensor_numel(t), rows = index_range(g, v);
    for (int64_t i = 0; i < n; i++) {
        if (slim_dtype_is_float(t->dtype)) {
            /* Box-Muller: N(0, 1). */
            double u = uniform01(seed), w = uniform01(seed);
            slim_store_f64(t->dtype, t->data, i,
                           sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(6.283185307179586 * w));
        } else {
            int64_t k = rows > 0 ? (int64_t)(uniform01(seed) * (double)rows) : 1;
            slim_store_i64(t->dtype, t->data, i, k < rows || rows == 0 ? k : rows - 1);
        }
    }
    return SLIM_OK;
}

static slim_status keep(slim_int8_samples *s, const char *name, const slim_tensor *t,
                        slim_err *err)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name))
            return SLIM_OK;
    char **nn = realloc(s->names, sizeof(char *) * (size_t)(s->n + 1));
    if (nn)
        s->names = nn;
    slim_tensor *nt = nn ? realloc(s->tensors, sizeof(slim_tensor) * (size_t)(s->n + 1)) : NULL;
    if (nt)
        s->tensors = nt;
    if (!nn || !nt)
        return slim_errf(err, SLIM_ENOMEM, "out of memory keeping int8 samples");
    slim_tensor *c = &s->tensors[s->n];
    memset(c, 0, sizeof(*c));
    c->dtype = t->dtype;
    c->ndim = t->ndim;
    memcpy(c->dims, t->dims, sizeof(c->dims));
    slim_status st = slim_tensor_alloc(c, err);
    if (st)
        return st;
    if (slim_tensor_nbytes(c))
        memcpy(c->data, t->data, slim_tensor_nbytes(c));
    if (!(s->names[s->n] = strdup(name))) {
        slim_tensor_release(c);
        return slim_errf(err, SLIM_ENOMEM, "out of memory keeping int8 samples");
    }
    s->n++;
    return SLIM_OK;
}

slim_status slim_int8_capture(slim_graph *g, int n_given, const char *const *given_names,
                              const slim_tensor *given, slim_int8_samples *out, slim_err *err)
{
    memset(out, 0, sizeof(*out));
    slim_status st = SLIM_OK;
    int n_in = g->n_inputs, first_added = g->n_outputs;
    const char **names = calloc((size_t)n_in + 1, sizeof(char *));
    slim_tensor *ins = calloc((size_t)n_in + 1, sizeof(slim_tensor));
    bool *drawn = calloc((size_t)n_in + 1, sizeof(bool));
    int *wanted = malloc(sizeof(int) * (size_t)(g->n_nodes + 1));
    int n_wanted = 0;
    slim_model *m = NULL;
    slim_tensor *outs = NULL;
    int n_outs = 0;
    if (!names || !ins || !drawn || !wanted) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory drawing int8 samples");
        goto done;
    }
    uint64_t seed = 0x5eed11;
    for (int i = 0; i < n_in; i++) {
        int v = g->inputs[i];
        names[i] = g->values[v].name;
        int k = 0;
        /* An unnamed sample is the input of a single-input model. */
        while (k < n_given && strcmp(given_names[k], names[i]) != 0 &&
               !(n_in == 1 && !given_names[k][0]))
            k++;
        if (k < n_given) {
            ins[i] = given[k];
            ins[i].buf = NULL; /* borrowed */
        } else if ((st = draw_input(g, v, &seed, &ins[i], err))) {
            goto done;
        } else {
            drawn[i] = true;
        }
    }
    /* Every candidate layer's input becomes an output (graph inputs are
     * kept from the feeds instead). No candidates (a graph quantized
     * before): nothing to run. */
    int candidates = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        int v = checked_input(g, &g->nodes[i]);
        candidates += v >= 0;
        if (v < 0 || g->values[v].kind != SLIM_VALUE_INTERMEDIATE)
            continue;
        bool seen = g->values[v].is_output;
        for (int j = 0; j < n_wanted && !seen; j++)
            seen = wanted[j] == v;
        if (!seen && !(st = slim_graph_add_output(g, v)))
            wanted[n_wanted++] = v;
        if (st) {
            st = slim_errf(err, st, "out of memory adding int8 sample outputs");
            goto done;
        }
    }
    if (!candidates)
        goto done;
    slim_graph *gg = g;
    g = NULL; /* the model owns it now, even on failure */
    if ((st = slim_model_from_graph(gg, &m, err)) ||
        (st = slim_model_run(m, n_in, names, ins, &outs, &n_outs, err))) {
        slim_err_prefix(err, "running the float32 model on int8 check samples: ");
        goto done;
    }
    for (int i = 0; i < n_in && !st; i++)
        st = keep(out, names[i], &ins[i], err);
    for (int o = first_added; o < m->graph->n_outputs && o < n_outs && !st; o++)
        st = keep(out, m->graph->values[m->graph->outputs[o]].name, &outs[o], err);
done:
    if (outs)
        slim_tensors_free(outs, n_outs);
    for (int i = 0; ins && i < n_in; i++)
        if (drawn && drawn[i])
            slim_tensor_release(&ins[i]);
    if (m)
        slim_model_free(m);
    if (g)
        slim_graph_free(g);
    free(names);
    free(ins);
    free(drawn);
    free(wanted);
    if (st)
        slim_int8_samples_free(out);
    return st;
}

const slim_tensor *slim_int8_sample(const slim_int8_samples *s, const char *name)
{
    for (int i = 0; s && i < s->n; i++)
        if (!strcmp(s->names[i], name))
            return &s->tensors[i];
    return NULL;
}

void slim_int8_samples_free(slim_int8_samples *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++) {
        free(s->names[i]);
        slim_tensor_release(&s->tensors[i]);
    }
    free(s->names);
    free(s->tensors);
    memset(s, 0, sizeof(*s));
}

double slim_int8_rel_error(const float *ref, const float *got, int64_t n)
{
    double e2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        e2 += d * d;
        r2 += (double)ref[i] * ref[i];
    }
    if (r2 > 0)
        return sqrt(e2 / r2);
    return e2 > 0 ? INFINITY : 0.0;
}
