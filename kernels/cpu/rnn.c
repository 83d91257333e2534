/*
 * kernels/cpu/rnn.c - the recurrent layers: RNN, GRU, LSTM (opsets 7-22).
 *
 * All three share one driver. Per direction:
 *
 *   1. one GEMM projects the inputs of every time step at once:
 *      XW[T*B, G*H] = X[T*B, I] * W^T (G gates of H units each);
 *   2. per time step, one GEMM multiplies the previous hidden state by the
 *      recurrent weights, HR[B, G*H] = H_prev[B, H] * R^T, and an elementwise
 *      pass per batch row turns XW + HR + biases into the new state.
 *
 * Layout 1 stores X as [B, T, I]; the projection GEMM does not care about
 * row order, so only the row index of (t, b) changes, and no transpose is
 * made. With sequence_lens, batch row b runs only lens[b] steps: a reverse
 * direction reads its time steps from lens[b]-1 down, and Y past lens[b]
 * stays zero while that row's state is frozen. Rows that are done still ride
 * along in the step GEMM; their results are ignored, which is cheaper than
 * compacting the batch.
 *
 * GRU with linear_before_reset=0 needs r before it can form (r . H_prev) * Rh^T,
 * so its step runs in two phases with two GEMMs.
 */
#include "kernel.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { CELL_RNN, CELL_GRU, CELL_LSTM } cell_kind;

#define ACTIVATION_MAP(X)                                \
    X(SIGMOID, "Sigmoid", 0, 0, 0, 0)                    \
    X(TANH, "Tanh", 0, 0, 0, 0)                          \
    X(RELU, "Relu", 0, 0, 0, 0)                          \
    X(AFFINE, "Affine", 1, 0, 1, 0)                      \
    X(LEAKY_RELU, "LeakyRelu", 1, 0.01f, 0, 0)           \
    X(THRESHOLDED_RELU, "ThresholdedRelu", 1, 0, 0, 0)   \
    X(SCALED_TANH, "ScaledTanh", 1, 0, 1, 0)             \
    X(HARD_SIGMOID, "HardSigmoid", 1, 0.2f, 1, 0.5f)     \
    X(ELU, "Elu", 1, 1.0f, 0, 0)                         \
    X(SOFTSIGN, "Softsign", 0, 0, 0, 0)                  \
    X(SOFTPLUS, "Softplus", 0, 0, 0, 0)

typedef enum {
#define ACT_ENUM(e, name, ha, da, hb, db) ACT_##e,
    ACTIVATION_MAP(ACT_ENUM)
#undef ACT_ENUM
    ACT_COUNT
} act_kind;

static const struct {
    const char *name;
    bool has_alpha, has_beta;
    /* Defaults when activation_alpha/beta run out. The spec says "those of
     * the same-named operators"; these are onnxruntime's, which models are
     * validated against: LeakyRelu, HardSigmoid and Elu get their
     * operators' defaults, the rest 0. */
    float alpha, beta;
} act_info[ACT_COUNT] = {
#define ACT_INFO(e, name, ha, da, hb, db) {name, ha, hb, da, db},
    ACTIVATION_MAP(ACT_INFO)
#undef ACT_INFO
};

typedef struct activation {
    act_kind kind;
    float alpha, beta;
} activation;

#define MAX_ACTS 3 /* f, g, h */

typedef struct rnn_state {
    cell_kind cell;
    int n_gates;        /* G: 1 (RNN), 3 (GRU: z r h), 4 (LSTM: i o f c) */
    int64_t hidden;     /* 0: take it from R */
    int n_dirs;
    bool reverse;       /* the single direction runs backwards */
    int layout;
    float clip;         /* FLT_MAX when absent */
    bool input_forget;
    bool linear_before_reset;
    int n_acts;         /* per direction */
    activation acts[2][MAX_ACTS];
} rnn_state;

/* ---- activations --------------------------------------------------------- */

static void act_apply(const activation *a, float *v, int64_t n)
{
    float al = a->alpha, be = a->beta;
    switch (a->kind) {
    case ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            v[i] = 1.0f / (1.0f + expf(-v[i]));
        break;
    case ACT_TANH:
        for (int64_t i = 0; i < n; i++)
            v[i] = tanhf(v[i]);
        break;
    case ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] > 0 ? v[i] : 0;
        break;
    case ACT_AFFINE:
        for (int64_t i = 0; i < n; i++)
            v[i] = al * v[i] + be;
        break;
    case ACT_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] >= 0 ? v[i] : al * v[i];
        break;
    case ACT_THRESHOLDED_RELU:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] > al ? v[i] : 0;
        break;
    case ACT_SCALED_TANH:
        for (int64_t i = 0; i < n; i++)
            v[i] = al * tanhf(be * v[i]);
        break;
    case ACT_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            v[i] = fmaxf(0.0f, fminf(1.0f, al * v[i] + be));
        break;
    case ACT_ELU:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] >= 0 ? v[i] : al * (expf(v[i]) - 1.0f);
        break;
    case ACT_SOFTSIGN:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] / (1.0f + fabsf(v[i]));
        break;
    case ACT_SOFTPLUS:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] > 20.0f ? v[i] : log1pf(expf(v[i]));
        break;
    case ACT_COUNT:
        break;
    }
}

static void clip_span(float *v, int64_t n, float clip)
{
    if (clip == FLT_MAX)
        return;
    for (int64_t i = 0; i < n; i++)
        v[i] = v[i] < -clip ? -clip : v[i] > clip ? clip : v[i];
}

/* ---- attributes ---------------------------------------------------------- */

static slim_status parse_activations(const slim_node *node, rnn_state *st, slim_err *err)
{
    static const act_kind defaults[3][MAX_ACTS] = {
        [CELL_RNN] = {ACT_TANH},
        [CELL_GRU] = {ACT_SIGMOID, ACT_TANH},
        [CELL_LSTM] = {ACT_SIGMOID, ACT_TANH, ACT_TANH},
    };
    const slim_attr *names = slim_node_attr(node, "activations");
    const slim_attr *alphas = slim_node_attr(node, "activation_alpha");
    const slim_attr *betas = slim_node_attr(node, "activation_beta");
    int per_dir = st->n_acts;
    if (!names) {
        for (int d = 0; d < 2; d++)
            for (int k = 0; k < per_dir; k++) {
                act_kind kd = defaults[st->cell][k];
                st->acts[d][k] = (activation){kd, act_info[kd].alpha, act_info[kd].beta};
            }
        return SLIM_OK;
    }
    if (names->type != SLIM_ATTR_STRINGS ||
        (names->n != per_dir * st->n_dirs && names->n != per_dir))
        return slim_errf(err, SLIM_EINVAL, "activations must list %d functions, got %d",
                         per_dir * st->n_dirs, names->type == SLIM_ATTR_STRINGS ? names->n : 0);
    /* alpha and beta values are consumed in order by the functions that
     * take them; missing ones fall back to the operator defaults. */
    int next_alpha = 0, next_beta = 0;
    for (int i = 0; i < names->n; i++) {
        act_kind kind = ACT_COUNT;
        for (int k = 0; k < ACT_COUNT; k++)
            if (strcasecmp(names->strings[i], act_info[k].name) == 0)
                kind = (act_kind)k;
        if (kind == ACT_COUNT)
            return slim_errf(err, SLIM_EINVAL, "unknown activation function \"%s\"",
                             names->strings[i]);
        activation a = {kind, act_info[kind].alpha, act_info[kind].beta};
        if (act_info[kind].has_alpha && alphas && next_alpha < alphas->n)
            a.alpha = alphas->floats[next_alpha++];
        if (act_info[kind].has_beta && betas && next_beta < betas->n)
            a.beta = betas->floats[next_beta++];
        st->acts[i / per_dir][i % per_dir] = a;
    }
    if (names->n == per_dir)
        memcpy(st->acts[1], st->acts[0], sizeof(st->acts[0]));
    return SLIM_OK;
}

static slim_status prepare_cell(slim_node *node, cell_kind cell, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    rnn_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status s = SLIM_OK;
    st->cell = cell;
    st->n_gates = cell == CELL_RNN ? 1 : cell == CELL_GRU ? 3 : 4;
    st->n_acts = cell == CELL_RNN ? 1 : cell == CELL_GRU ? 2 : 3;
    st->hidden = slim_attr_int(node, "hidden_size", 0);
    st->layout = (int)slim_attr_int(node, "layout", 0);
    st->input_forget = slim_attr_int(node, "input_forget", 0) != 0;
    st->linear_before_reset = slim_attr_int(node, "linear_before_reset", 0) != 0;
    const slim_attr *clip = slim_node_attr(node, "clip");
    st->clip = clip ? clip->f : FLT_MAX;
    const char *dir = slim_attr_str(node, "direction", "forward");
    if (strcmp(dir, "forward") == 0) {
        st->n_dirs = 1;
    } else if (strcmp(dir, "reverse") == 0) {
        st->n_dirs = 1;
        st->reverse = true;
    } else if (strcmp(dir, "bidirectional") == 0) {
        st->n_dirs = 2;
    } else {
        s = slim_errf(err, SLIM_EINVAL, "unknown direction \"%s\"", dir);
        goto fail;
    }
    /* Bounded so that gates * hidden and the weight sizes stay in int64. */
    if (st->hidden < 0 || st->hidden > INT32_MAX) {
        s = slim_errf(err, SLIM_EINVAL, "hidden_size must be from 1 to %d, got %lld", INT32_MAX,
                      (long long)st->hidden);
        goto fail;
    }
    if (st->layout != 0 && st->layout != 1) {
        s = slim_errf(err, SLIM_EINVAL, "layout must be 0 or 1, got %d", st->layout);
        goto fail;
    }
    if (clip && !(clip->f > 0)) {
        s = slim_errf(err, SLIM_EINVAL, "clip must be positive, got %g", clip->f);
        goto fail;
    }
    if ((s = parse_activations(node, st, err)))
        goto fail;
    *state = st;
    return SLIM_OK;
fail:
    free(st);
    return s;
}

static slim_status prepare_rnn(slim_node *n, void **st, slim_err *err)
{
    return prepare_cell(n, CELL_RNN, st, err);
}

static slim_status prepare_gru(slim_node *n, void **st, slim_err *err)
{
    return prepare_cell(n, CELL_GRU, st, err);
}

static slim_status prepare_lstm(slim_node *n, void **st, slim_err *err)
{
    return prepare_cell(n, CELL_LSTM, st, err);
}

static void release_state(void *st)
{
    free(st);
}

/* ---- shapes -------------------------------------------------------------- */

enum { IN_X, IN_W, IN_R, IN_B, IN_LENS, IN_H0, IN_C0, IN_P };

typedef struct rnn_dims {
    int64_t seq, batch, input, hidden, dirs, gates;
} rnn_dims;

static slim_status expect_shape(const slim_tensor *t, const char *what, int ndim,
                                const int64_t *dims, slim_err *err)
{
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->dims[i] == dims[i];
    if (ok)
        return SLIM_OK;
    char got[128], want[128];
    return slim_errf(err, SLIM_ESHAPE, "%s has shape %s, expected %s", what,
                     slim_shape_str(t->ndim, t->dims, got, sizeof(got)),
                     slim_shape_str(ndim, dims, want, sizeof(want)));
}

static slim_status check_inputs(const slim_op_ctx *ctx, rnn_dims *dm)
{
    const rnn_state *st = ctx->state;
    slim_err *err = ctx->err;
    const slim_tensor *x = slim_opt_in(ctx, IN_X), *w = slim_opt_in(ctx, IN_W), *r = slim_opt_in(ctx, IN_R);
    if (!x || !w || !r)
        return slim_errf(err, SLIM_EINVAL, "inputs X, W and R are required");
    for (int i = 0; i < ctx->n_in && i <= IN_P; i++) {
        const slim_tensor *t = ctx->in[i];
        if (!t || i == IN_LENS)
            continue;
        static const char *const names[] = {"X", "W", "R", "B", "", "initial_h", "initial_c",
                                            "P"};
        slim_status s = slim_check_dtype(t, names[i], err, SLIM_F32, SLIM_DTYPE_UNDEFINED);
        if (s)
            return s;
    }
    if (x->ndim != 3)
        return slim_errf(err, SLIM_ESHAPE, "X must have 3 dimensions, got %d", x->ndim);
    if (r->ndim != 3)
        return slim_errf(err, SLIM_ESHAPE, "R must have 3 dimensions, got %d", r->ndim);
    dm->seq = x->dims[st->layout ? 1 : 0];
    dm->batch = x->dims[st->layout ? 0 : 1];
    dm->input = x->dims[2];
    dm->hidden = st->hidden ? st->hidden : r->dims[2];
    dm->dirs = st->n_dirs;
    dm->gates = st->n_gates;
    if (dm->hidden <= 0 || dm->hidden > INT32_MAX)
        return slim_errf(err, SLIM_EINVAL, "hidden size must be from 1 to %d", INT32_MAX);
    int64_t GH = dm->gates * dm->hidden;
    slim_status s;
    if ((s = expect_shape(w, "W", 3, (int64_t[]){dm->dirs, GH, dm->input}, err)) ||
        (s = expect_shape(r, "R", 3, (int64_t[]){dm->dirs, GH, dm->hidden}, err)))
        return s;
    const slim_tensor *b = slim_opt_in(ctx, IN_B), *lens = slim_opt_in(ctx, IN_LENS);
    if (b && (s = expect_shape(b, "B", 2, (int64_t[]){dm->dirs, 2 * GH}, err)))
        return s;
    if (lens) {
        if ((s = slim_check_dtype(lens, "sequence_lens", err, SLIM_I32, SLIM_I64,
                                  SLIM_DTYPE_UNDEFINED)) ||
            (s = expect_shape(lens, "sequence_lens", 1, (int64_t[]){dm->batch}, err)))
            return s;
    }
    int64_t state_dims[3] = {dm->dirs, dm->batch, dm->hidden};
    if (st->layout)
        state_dims[0] = dm->batch, state_dims[1] = dm->dirs;
    const slim_tensor *h0 = slim_opt_in(ctx, IN_H0), *c0 = slim_opt_in(ctx, IN_C0);
    if (h0 && (s = expect_shape(h0, "initial_h", 3, state_dims, err)))
        return s;
    if (st->cell == CELL_LSTM) {
        const slim_tensor *p = slim_opt_in(ctx, IN_P);
        if (c0 && (s = expect_shape(c0, "initial_c", 3, state_dims, err)))
            return s;
        if (p && (s = expect_shape(p, "P", 2, (int64_t[]){dm->dirs, 3 * dm->hidden}, err)))
            return s;
    }
    return SLIM_OK;
}

static slim_status rnn_infer(slim_op_ctx *ctx)
{
    const rnn_state *st = ctx->state;
    rnn_dims dm;
    slim_status s = check_inputs(ctx, &dm);
    if (s)
        return s;
    int64_t y[4] = {dm.seq, dm.dirs, dm.batch, dm.hidden};
    int64_t yh[3] = {dm.dirs, dm.batch, dm.hidden};
    if (st->layout) {
        y[0] = dm.batch, y[1] = dm.seq, y[2] = dm.dirs;
        yh[0] = dm.batch, yh[1] = dm.dirs;
    }
    for (int i = 0; i < ctx->n_out; i++)
        if (ctx->out[i]) {
            if (i == 0)
                slim_tensor_set_shape(ctx->out[0], SLIM_F32, 4, y);
            else if (i == 1 || (i == 2 && st->cell == CELL_LSTM))
                slim_tensor_set_shape(ctx->out[i], SLIM_F32, 3, yh);
            else
                return slim_errf(ctx->err, SLIM_EINVAL, "has %d outputs, at most %d expected",
                                 ctx->n_out, st->cell == CELL_LSTM ? 3 : 2);
        }
    return SLIM_OK;
}

/* ---- one direction ------------------------------------------------------- */

/* Everything one time step needs; shared by the per-row workers. */
typedef struct step_job {
    const rnn_state *st;
    const rnn_dims *dm;
    const activation *act;  /* this direction's f, g, h */
    const int64_t *lens;    /* valid steps per batch row */
    bool reverse;
    int dir;
    int64_t step;
    int phase;              /* GRU without linear_before_reset: 0 z,r; 1 the rest */
    const float *xw;        /* input projections, [T*B, G*H] */
    float *hr;              /* recurrent products, [B, G*H] */
    const float *bias;      /* Wb + Rb, [G*H]; GRU lbr=1: h part is Wbh only */
    const float *rbias_h;   /* GRU lbr=1: Rbh [H] */
    const float *peep;      /* LSTM P [3H] (i, o, f), or NULL */
    float *h, *c;           /* state [B, H] */
    float *rh;              /* GRU lbr=0: r . H_prev [B, H] */
    float *y;               /* output Y or NULL */
} step_job;

/* Time index that batch row b handles at this step, or -1 once it is done. */
static int64_t row_time(const step_job *j, int64_t b)
{
    if (j->step >= j->lens[b])
        return -1;
    return j->reverse ? j->lens[b] - 1 - j->step : j->step;
}

static int64_t x_row(const step_job *j, int64_t t, int64_t b)
{
    return j->st->layout ? b * j->dm->seq + t : t * j->dm->batch + b;
}

static float *y_row(const step_job *j, int64_t t, int64_t b)
{
    const rnn_dims *dm = j->dm;
    if (!j->y)
        return NULL;
    int64_t row = j->st->layout ? (b * dm->seq + t) * dm->dirs + j->dir
                                : (t * dm->dirs + j->dir) * dm->batch + b;
    return j->y + row * dm->hidden;
}

static void lstm_row(const step_job *j, int64_t b, const float *xw, float *g)
{
    const rnn_state *st = j->st;
    int64_t H = j->dm->hidden;
    float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
    float *c = j->c + b * H, *h = j->h + b * H;
    for (int64_t k = 0; k < 4 * H; k++)
        g[k] += xw[k] + j->bias[k];
    if (j->peep)
        for (int64_t k = 0; k < H; k++) {
            gi[k] += j->peep[k] * c[k];
            gf[k] += j->peep[2 * H + k] * c[k];
        }
    clip_span(gi, H, st->clip);
    clip_span(gf, H, st->clip);
    clip_span(gc, H, st->clip);
    act_apply(&j->act[0], gi, H);
    if (st->input_forget)
        for (int64_t k = 0; k < H; k++)
            gf[k] = 1.0f - gi[k];
    else
        act_apply(&j->act[0], gf, H);
    act_apply(&j->act[1], gc, H);
    for (int64_t k = 0; k < H; k++)
        c[k] = gf[k] * c[k] + gi[k] * gc[k];
    if (j->peep)
        for (int64_t k = 0; k < H; k++)
            go[k] += j->peep[H + k] * c[k];
    clip_span(go, H, st->clip);
    act_apply(&j->act[0], go, H);
    memcpy(gc, c, sizeof(float) * H);
    act_apply(&j->act[2], gc, H);
    for (int64_t k = 0; k < H; k++)
        h[k] = go[k] * gc[k];
}

static void gru_row(const step_job *j, int64_t b, const float *xw, float *g)
{
    const rnn_state *st = j->st;
    int64_t H = j->dm->hidden;
    float *gz = g, *gr = g + H, *gh = g + 2 * H, *h = j->h + b * H;
    if (j->phase == 0 || st->linear_before_reset) {
        for (int64_t k = 0; k < 2 * H; k++)
            g[k] += xw[k] + j->bias[k];
        clip_span(g, 2 * H, st->clip);
        act_apply(&j->act[0], g, 2 * H);
        if (!st->linear_before_reset) {
            float *rh = j->rh + b * H;
            for (int64_t k = 0; k < H; k++)
                rh[k] = gr[k] * h[k];
            return; /* the caller multiplies rh by Rh^T into gh */
        }
        for (int64_t k = 0; k < H; k++)
            gh[k] = xw[2 * H + k] + j->bias[2 * H + k] + gr[k] * (gh[k] + j->rbias_h[k]);
    } else {
        for (int64_t k = 0; k < H; k++)
            gh[k] += xw[2 * H + k] + j->bias[2 * H + k];
    }
    clip_span(gh, H, st->clip);
    act_apply(&j->act[1], gh, H);
    for (int64_t k = 0; k < H; k++)
        h[k] = (1.0f - gz[k]) * gh[k] + gz[k] * h[k];
}

static void rnn_row(const step_job *j, int64_t b, const float *xw, float *g)
{
    int64_t H = j->dm->hidden;
    for (int64_t k = 0; k < H; k++)
        g[k] += xw[k] + j->bias[k];
    clip_span(g, H, j->st->clip);
    act_apply(&j->act[0], g, H);
    memcpy(j->h + b * H, g, sizeof(float) * H);
}

static void step_rows(int64_t begin, int64_t end, void *user)
{
    const step_job *j = user;
    int64_t H = j->dm->hidden, GH = j->dm->gates * H;
    for (int64_t b = begin; b < end; b++) {
        int64_t t = row_time(j, b);
        if (t < 0)
            continue;
        const float *xw = j->xw + x_row(j, t, b) * GH;
        float *g = j->hr + b * GH;
        switch (j->st->cell) {
        case CELL_RNN: rnn_row(j, b, xw, g); break;
        case CELL_GRU: gru_row(j, b, xw, g); break;
        case CELL_LSTM: lstm_row(j, b, xw, g); break;
        }
        bool step_done = !(j->st->cell == CELL_GRU && !j->st->linear_before_reset &&
                           j->phase == 0);
        float *y = step_done ? y_row(j, t, b) : NULL;
        if (y)
            memcpy(y, j->h + b * H, sizeof(float) * H);
    }
}

static void run_rows(step_job *j)
{
    int64_t per_row = j->dm->gates * j->dm->hidden * 8;
    slim_parallel_for(j->dm->batch, per_row >= 8192 ? 1 : 8192 / per_row, step_rows, j);
}

/* Scratch for one direction, all through the tensor allocator. */
typedef struct dir_scratch {
    slim_tensor xw, hr, h, c, rh, bias;
} dir_scratch;

static slim_status scratch(slim_tensor *t, int64_t numel, slim_err *err)
{
    memset(t, 0, sizeof(*t));
    t->dtype = SLIM_F32;
    t->ndim = 1;
    t->dims[0] = numel > 0 ? numel : 1;
    return slim_tensor_alloc(t, err);
}

static void scratch_free(dir_scratch *s)
{
    slim_tensor *all[] = {&s->xw, &s->hr, &s->h, &s->c, &s->rh, &s->bias};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        slim_tensor_release(all[i]);
}

/* Copies a [D, B, H] (layout 0) or [B, D, H] (layout 1) state slice of
 * direction d into or out of a [B, H] buffer. */
static void state_copy(const rnn_state *st, const rnn_dims *dm, int d, float *packed,
                       float *full, bool to_full)
{
    for (int64_t b = 0; b < dm->batch; b++) {
        float *f = full + (st->layout ? b * dm->dirs + d : d * dm->batch + b) * dm->hidden;
        float *p = packed + b * dm->hidden;
        memcpy(to_full ? f : p, to_full ? p : f, sizeof(float) * dm->hidden);
    }
}

static slim_status run_direction(slim_op_ctx *ctx, const rnn_dims *dm, int d,
                                 const int64_t *lens, dir_scratch *s)
{
    const rnn_state *st = ctx->state;
    int64_t H = dm->hidden, GH = dm->gates * H, In = dm->input, B = dm->batch, T = dm->seq;
    const float *x = ctx->in[IN_X]->data;
    const float *w = (const float *)ctx->in[IN_W]->data + d * GH * In;
    const float *r = (const float *)ctx->in[IN_R]->data + d * GH * H;
    const slim_tensor *bt = slim_opt_in(ctx, IN_B), *h0 = slim_opt_in(ctx, IN_H0);
    const slim_tensor *c0 = slim_opt_in(ctx, IN_C0), *pt = slim_opt_in(ctx, IN_P);
    bool lbr = st->cell == CELL_GRU && st->linear_before_reset;

    float *bias = s->bias.data, *rbias_h = bias + GH;
    memset(bias, 0, sizeof(float) * (GH + H));
    if (bt) {
        const float *wb = (const float *)bt->data + d * 2 * GH, *rb = wb + GH;
        for (int64_t k = 0; k < GH; k++)
            bias[k] = wb[k] + rb[k];
        if (lbr) /* Rbh sits inside r . (...) there, so it stays apart */
            for (int64_t k = 0; k < H; k++) {
                bias[2 * H + k] = wb[2 * H + k];
                rbias_h[k] = rb[2 * H + k];
            }
    }
    float *h = s->h.data, *c = s->c.data;
    if (h0)
        state_copy(st, dm, d, h, h0->data, false);
    else
        memset(h, 0, sizeof(float) * B * H);
    if (st->cell == CELL_LSTM) {
        if (c0)
            state_copy(st, dm, d, c, c0->data, false);
        else
            memset(c, 0, sizeof(float) * B * H);
    }

    if (In == 0)
        memset(s->xw.data, 0, sizeof(float) * T * B * GH);
    else if (T * B > 0)
        slim_sgemm_rows(false, true, T * B, GH, In, 1.0f, x, In, w, In, 0.0f, s->xw.data, GH);

    slim_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    step_job job = {
        .st = st, .dm = dm, .act = st->acts[d], .lens = lens,
        .reverse = st->reverse || d == 1, .dir = d,
        .xw = s->xw.data, .hr = s->hr.data, .bias = bias, .rbias_h = rbias_h,
        .peep = pt ? (const float *)pt->data + d * 3 * H : NULL,
        .h = h, .c = c, .rh = s->rh.data, .y = y ? y->data : NULL,
    };
    bool two_phase = st->cell == CELL_GRU && !lbr;
    float *hr = s->hr.data;
    for (int64_t step = 0; step < T; step++) {
        job.step = step;
        job.phase = 0;
        /* GRU without linear_before_reset: only z and r see H_prev directly. */
        int64_t n_direct = two_phase ? 2 * H : GH;
        slim_sgemm_rows(false, true, B, n_direct, H, 1.0f, h, H, r, H, 0.0f, hr, GH);
        run_rows(&job);
        if (two_phase) {
            slim_sgemm_rows(false, true, B, H, H, 1.0f, s->rh.data, H, r + 2 * H * H, H, 0.0f,
                       hr + 2 * H, GH);
            job.phase = 1;
            run_rows(&job);
        }
    }

    if (ctx->n_out > 1 && ctx->out[1])
        state_copy(st, dm, d, h, ctx->out[1]->data, true);
    if (st->cell == CELL_LSTM && ctx->n_out > 2 && ctx->out[2])
        state_copy(st, dm, d, c, ctx->out[2]->data, true);
    return SLIM_OK;
}

static slim_status rnn_exec(slim_op_ctx *ctx)
{
    rnn_dims dm;
    slim_status s = check_inputs(ctx, &dm);
    if (s)
        return s;
    if (dm.batch == 0)
        return SLIM_OK;

    int64_t *lens = slim_scratch_malloc(sizeof(int64_t) * dm.batch);
    if (!lens)
        return slim_scratch_oom(ctx->err);
    const slim_tensor *lt = slim_opt_in(ctx, IN_LENS);
    bool ragged = false;
    for (int64_t b = 0; b < dm.batch; b++) {
        lens[b] = lt ? slim_load_i64(lt->dtype, lt->data, b) : dm.seq;
        if (lens[b] < 0 || lens[b] > dm.seq) {
            s = slim_errf(ctx->err, SLIM_EINVAL,
                          "sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)b,
                          (long long)lens[b], (long long)dm.seq);
            slim_scratch_free(lens);
            return s;
        }
        ragged |= lens[b] < dm.seq;
    }
    slim_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (y && ragged)
        memset(y->data, 0, slim_tensor_nbytes(y));

    int64_t H = dm.hidden, GH = dm.gates * H;
    dir_scratch sc;
    memset(&sc, 0, sizeof(sc));
    if ((s = scratch(&sc.xw, dm.seq * dm.batch * GH, ctx->err)) ||
        (s = scratch(&sc.hr, dm.batch * GH, ctx->err)) ||
        (s = scratch(&sc.h, dm.batch * H, ctx->err)) ||
        (s = scratch(&sc.c, dm.batch * H, ctx->err)) ||
        (s = scratch(&sc.rh, dm.batch * H, ctx->err)) ||
        (s = scratch(&sc.bias, GH + H, ctx->err)))
        goto done;
    for (int d = 0; d < dm.dirs && !s; d++)
        s = run_direction(ctx, &dm, d, lens, &sc);
done:
    scratch_free(&sc);
    slim_scratch_free(lens);
    return s;
}

const slim_op_def slim__ops_rnn[] = {
    {"RNN", 7, prepare_rnn, release_state, rnn_infer, rnn_exec, 0},
    {"GRU", 7, prepare_gru, release_state, rnn_infer, rnn_exec, 0},
    {"LSTM", 7, prepare_lstm, release_state, rnn_infer, rnn_exec, 0},
    {0},
};
