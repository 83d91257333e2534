/*
 * einsum.c - Einsum on the CPU, contracted a pair of operands at a time.
 *
 * A single loop nest over every label costs the product of all label sizes:
 * "a,b,c,d,e,f,g,h->" over eight inputs of 64 is 2.8e14 steps, days of one
 * core, for what is the product of eight sums. Instead (as numpy's
 * einsum_path and opt_einsum do, greedily):
 *
 *   1. each input is made a dense operand over its distinct labels, taking
 *      diagonals for repeated labels, dropping broadcast dims, and summing
 *      out at once every label that no other input and not the output has;
 *   2. while more than one operand is left, the pair whose result would be
 *      smallest is contracted: labels of both that nothing else needs are
 *      summed out by a batched matrix product (batch: labels both have and
 *      something later needs; rows and columns: labels of one side only),
 *      each side first permuted into [batch, rows, k] / [batch, k, cols];
 *   3. the last operand is laid out (and broadcast) as the output.
 *
 * Work is then a sum of matrix products, each bounded by its operands and
 * result; every intermediate is scratch charged to the run's account
 * (slim_scratch_alloc), so --memory-limit bounds it. Floats are computed
 * in float64 (through cblas_dgemm), integers in int64 wrapping as two's
 * complement, as the single loop did. Long steps poll for cancellation.
 */
#include "kernel.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- the equation -------------------------------------------------------- */

/* Labels: 'A'-'Z' are 0-25 and 'a'-'z' 26-51 (so ascending ids are ASCII
 * order, which the implicit output uses), and the dims an ellipsis covers
 * are 52 + position, right-aligned across inputs as in broadcasting. */
#define EIN_LETTERS 52
#define EIN_LABELS (EIN_LETTERS + SLIM_MAX_DIMS)
#define EIN_MAX_IN 16

typedef struct {
    int n_in;
    int rank[EIN_MAX_IN];
    int label[EIN_MAX_IN][SLIM_MAX_DIMS];
    int out_rank;
    int out_label[SLIM_MAX_DIMS];
    int64_t size[EIN_LABELS]; /* -1 for labels not used */
} ein_plan;

/* Parses one term ("ij", "...ii", "b...") into labels for a tensor of
 * `rank` dims, given n_ell ellipsis dims overall (-1: just count them). */
static slim_status ein_term(const char *t, size_t len, int rank, int n_ell, int *labels,
                            int *n_labels, int *term_ell, slim_err *err)
{
    int letters = 0, ell_at = -1;
    for (size_t i = 0; i < len; i++) {
        if (t[i] == '.') {
            if (ell_at >= 0 || i + 2 >= len || t[i + 1] != '.' || t[i + 2] != '.')
                return slim_errf(err, SLIM_EINVAL, "equation: malformed ellipsis in \"%.*s\"",
                                 (int)len, t);
            ell_at = letters;
            i += 2;
        } else if ((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z')) {
            letters++;
        } else {
            return slim_errf(err, SLIM_EINVAL, "equation: unexpected character '%c'", t[i]);
        }
    }
    int ell = rank < 0 ? 0 : rank - letters;
    if (rank >= 0 && (ell < 0 || (ell > 0 && ell_at < 0)))
        return slim_errf(err, SLIM_ESHAPE, "equation term \"%.*s\" does not fit an input of rank %d",
                         (int)len, t, rank);
    if (rank < 0 && ell_at >= 0)
        ell = n_ell; /* the output term: every ellipsis dim */
    if (letters + ell > SLIM_MAX_DIMS)
        return slim_errf(err, SLIM_EUNSUPPORTED, "equation term \"%.*s\" has more than %d dims",
                         (int)len, t, SLIM_MAX_DIMS);
    *term_ell = ell;
    if (n_ell < 0)
        return SLIM_OK;
    int n = 0;
    for (size_t i = 0; i < len; i++) {
        if (t[i] == '.') {
            for (int e = 0; e < ell; e++)
                labels[n++] = EIN_LETTERS + n_ell - ell + e;
            i += 2;
        } else {
            labels[n++] = t[i] <= 'Z' ? t[i] - 'A' : 26 + t[i] - 'a';
        }
    }
    *n_labels = n;
    return SLIM_OK;
}

static slim_status ein_parse(const slim_op_ctx *ctx, ein_plan *p)
{
    const char *raw = slim_attr_str(ctx->node, "equation", NULL);
    if (!raw)
        return slim_errf(ctx->err, SLIM_EINVAL, "attribute equation is missing");
    char eq[512];
    size_t len = 0;
    for (const char *c = raw; *c; c++)
        if (*c != ' ' && len + 1 < sizeof(eq))
            eq[len++] = *c;
    eq[len] = 0;
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : len;
    p->n_in = ctx->n_in;
    if (p->n_in < 1)
        return slim_errf(ctx->err, SLIM_EINVAL, "Einsum needs at least one input");
    if (p->n_in > EIN_MAX_IN)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "more than %d inputs", EIN_MAX_IN);
    /* Pass 0 counts ellipsis dims, pass 1 assigns labels. */
    int n_ell = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *t = eq;
        for (int i = 0; i < p->n_in; i++) {
            const char *end = memchr(t, ',', lhs_len - (size_t)(t - eq));
            size_t tl = end ? (size_t)(end - t) : lhs_len - (size_t)(t - eq);
            if (!ctx->in[i])
                return slim_errf(ctx->err, SLIM_EINVAL, "input %d is missing", i);
            if ((i < p->n_in - 1) != (end != NULL))
                return slim_errf(ctx->err, SLIM_EINVAL,
                                 "equation \"%s\" does not have %d input terms", raw, p->n_in);
            int ell, n;
            slim_status s = ein_term(t, tl, ctx->in[i]->ndim, pass ? n_ell : -1, p->label[i], &n,
                                     &ell, ctx->err);
            if (s)
                return s;
            n_ell = pass || ell < n_ell ? n_ell : ell;
            p->rank[i] = ctx->in[i]->ndim;
            t += tl + 1;
        }
    }
    int count[EIN_LABELS] = {0};
    for (int l = 0; l < EIN_LABELS; l++)
        p->size[l] = -1;
    for (int i = 0; i < p->n_in; i++)
        for (int d = 0; d < p->rank[i]; d++) {
            int l = p->label[i][d];
            int64_t sz = ctx->in[i]->dims[d];
            count[l]++;
            if (p->size[l] < 0 || p->size[l] == 1)
                p->size[l] = sz;
            else if (sz != p->size[l] && sz != 1)
                return slim_errf(ctx->err, SLIM_ESHAPE,
                                 "equation \"%s\": a label has sizes %lld and %lld", raw,
                                 (long long)p->size[l], (long long)sz);
        }
    if (arrow) {
        int ell;
        slim_status s = ein_term(arrow + 2, strlen(arrow + 2), -1, n_ell, p->out_label,
                                 &p->out_rank, &ell, ctx->err);
        if (s)
            return s;
        bool seen[EIN_LABELS] = {false};
        for (int d = 0; d < p->out_rank; d++) {
            int l = p->out_label[d];
            if (seen[l] || (l < EIN_LETTERS && count[l] == 0))
                return slim_errf(ctx->err, SLIM_EINVAL,
                                 "equation \"%s\": output label repeated or not in any input", raw);
            seen[l] = true;
        }
    } else {
        /* Implicit output: ellipsis dims, then letters used exactly once. */
        p->out_rank = 0;
        for (int e = 0; e < n_ell; e++)
            p->out_label[p->out_rank++] = EIN_LETTERS + e;
        for (int l = 0; l < EIN_LETTERS; l++)
            if (count[l] == 1) {
                if (p->out_rank == SLIM_MAX_DIMS)
                    return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "output has too many dims");
                p->out_label[p->out_rank++] = l;
            }
    }
    return SLIM_OK;
}

static slim_status einsum_infer(slim_op_ctx *ctx)
{
    if (ctx->n_in < 1 || !ctx->in[0])
        return slim_errf(ctx->err, SLIM_EINVAL, "Einsum needs at least one input");
    slim_status s = slim_check_dtype(ctx->in[0], "input 0", ctx->err, SLIM_F32, SLIM_F64,
                                     SLIM_F16, SLIM_BF16, SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    for (int i = 1; i < ctx->n_in; i++)
        if (ctx->in[i] && ctx->in[i]->dtype != ctx->in[0]->dtype)
            return slim_errf(ctx->err, SLIM_ETYPE, "input 0 is %s but input %d is %s",
                             slim_dtype_name(ctx->in[0]->dtype), i,
                             slim_dtype_name(ctx->in[i]->dtype));
    ein_plan p;
    if ((s = ein_parse(ctx, &p)))
        return s;
    int64_t dims[SLIM_MAX_DIMS];
    for (int d = 0; d < p.out_rank; d++)
        dims[d] = p.size[p.out_label[d]] < 0 ? 1 : p.size[p.out_label[d]];
    slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, p.out_rank, dims);
    return SLIM_OK;
}

/* ---- operands ------------------------------------------------------------ */

/* Floats are computed in float64, integers in int64; both 8 bytes. */
typedef enum { EIN_F64, EIN_I64 } ein_type;

/* A dense row-major operand over distinct labels; data is borrowed (an
 * input already in shape) or held in hold. */
typedef struct {
    int n;
    int label[EIN_LABELS];
    const void *data;
    slim_tensor hold;
    double numel;
} ein_operand;

/* One layout pass: dst[labels dst...] = sum over the labels sum... of
 * src[sum of index * stride]; strides are 0 for labels src lacks (a
 * broadcast). Transposes, diagonals, reductions and the final broadcast
 * into the output are all this. */
typedef struct {
    ein_type ty;
    const void *src;
    void *dst;
    int n_dst, n_sum;
    int64_t dst_size[EIN_LABELS], dst_stride[EIN_LABELS];
    int64_t sum_size[EIN_LABELS], sum_stride[EIN_LABELS];
} ein_layout;

static void layout_rows(int64_t begin, int64_t end, void *user)
{
    const ein_layout *j = user;
    int64_t idx[EIN_LABELS], off = 0, rest = begin;
    for (int d = j->n_dst - 1; d >= 0; d--) {
        idx[d] = rest % j->dst_size[d];
        rest /= j->dst_size[d];
        off += idx[d] * j->dst_stride[d];
    }
    for (int64_t e = begin; e < end; e++) {
        if (slim_cancel_poll())
            return; /* the caller reports it */
        int64_t sidx[EIN_LABELS], soff = off;
        for (int r = 0; r < j->n_sum; r++)
            sidx[r] = 0;
        double fsum = 0;
        uint64_t isum = 0; /* unsigned: overflow wraps, as int64 would on the hardware */
        for (;;) {
            if (j->n_sum && slim_cancel_poll())
                return; /* one element may sum a billion steps */
            if (j->ty == EIN_F64)
                fsum += ((const double *)j->src)[soff];
            else
                isum += (uint64_t)((const int64_t *)j->src)[soff];
            int r = j->n_sum - 1;
            for (; r >= 0; r--) {
                soff += j->sum_stride[r];
                if (++sidx[r] < j->sum_size[r])
                    break;
                soff -= j->sum_stride[r] * j->sum_size[r];
                sidx[r] = 0;
            }
            if (r < 0)
                break;
        }
        if (j->ty == EIN_F64)
            ((double *)j->dst)[e] = fsum;
        else
            ((int64_t *)j->dst)[e] = (int64_t)isum;
        for (int d = j->n_dst - 1; d >= 0; d--) {
            off += j->dst_stride[d];
            if (++idx[d] < j->dst_size[d])
                break;
            off -= j->dst_stride[d] * j->dst_size[d];
            idx[d] = 0;
        }
    }
}

static void layout_run(ein_layout *j, int64_t n)
{
    double sum = 1;
    for (int r = 0; r < j->n_sum; r++)
        sum *= (double)j->sum_size[r];
    slim_parallel_for(n, sum >= 4096 ? 1 : 1 + (int64_t)(4096 / sum), layout_rows, j);
}

typedef struct {
    const ein_plan *p;
    ein_type ty;
    int n_ops;
    ein_operand *ops;
    bool in_out[EIN_LABELS];
    const slim_tensor *const *ctx_in;
    slim_err *err;
} ein_state;

static int64_t label_size(const ein_plan *p, int l)
{
    return p->size[l] < 0 ? 1 : p->size[l];
}

static bool op_has(const ein_operand *o, int l)
{
    for (int d = 0; d < o->n; d++)
        if (o->label[d] == l)
            return true;
    return false;
}

/* Whether label l is needed beyond operands a and b (b -1: none). */
static bool needed(const ein_state *s, int l, int a, int b)
{
    if (s->in_out[l])
        return true;
    for (int i = 0; i < s->n_ops; i++)
        if (i != a && i != b && op_has(&s->ops[i], l))
            return true;
    return false;
}

/* A new operand over labels keep[0..n_keep) from src (per-label strides
 * given), summing the labels sum[0..n_sum). Borrows src when that is
 * already the layout. */
static slim_status make_operand(ein_state *s, const void *src, const int64_t *stride,
                                const int *keep, int n_keep, const int *sum, int n_sum,
                                ein_operand *out)
{
    const ein_plan *p = s->p;
    ein_layout j = {.ty = s->ty, .src = src, .n_dst = n_keep, .n_sum = n_sum};
    out->n = n_keep;
    out->numel = 1;
    memset(&out->hold, 0, sizeof(out->hold));
    int64_t numel = 1, want = 1;
    bool as_is = n_sum == 0;
    for (int d = n_keep - 1; d >= 0; d--) {
        out->label[d] = keep[d];
        j.dst_size[d] = label_size(p, keep[d]);
        j.dst_stride[d] = stride[keep[d]];
        as_is = as_is && stride[keep[d]] == want;
        want *= j.dst_size[d];
        numel *= j.dst_size[d];
    }
    out->numel = (double)numel;
    for (int r = 0; r < n_sum; r++) {
        j.sum_size[r] = label_size(p, sum[r]);
        j.sum_stride[r] = stride[sum[r]];
    }
    if (as_is) {
        out->data = src;
        return SLIM_OK;
    }
    void *dst = slim_scratch_alloc(&out->hold, numel, 8, false, s->err);
    if (!dst)
        return s->err->status;
    j.dst = dst;
    layout_run(&j, numel);
    out->data = dst;
    return slim_cancel_status(s->err);
}

/* Per-label strides of a dense operand (0 for labels it lacks). */
static void operand_strides(const ein_state *s, const ein_operand *o, int64_t *stride)
{
    memset(stride, 0, sizeof(int64_t) * EIN_LABELS);
    int64_t at = 1;
    for (int d = o->n - 1; d >= 0; d--) {
        stride[o->label[d]] = at;
        at *= label_size(s->p, o->label[d]);
    }
}

/* ---- one pairwise step --------------------------------------------------- */

/* C[b] = A[b] (m x k) @ B[b] (k x n) for each of `batch` blocks. */
typedef struct {
    ein_type ty;
    const void *a, *b;
    void *c;
    int64_t m, n, k;
} bmm_job;

static void bmm_blocks(int64_t begin, int64_t end, void *user)
{
    const bmm_job *j = user;
    const int64_t m = j->m, n = j->n, k = j->k;
    for (int64_t bi = begin; bi < end; bi++) {
        if (m * n * k >= 4096 ? slim_cancel_check() : slim_cancel_poll())
            return;
        if (j->ty == EIN_F64 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && m * n * k >= 512) {
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)n,
                        (blasint)k, 1.0, (const double *)j->a + bi * m * k, (blasint)k,
                        (const double *)j->b + bi * k * n, (blasint)n, 0.0,
                        (double *)j->c + bi * m * n, (blasint)n);
            continue;
        }
        for (int64_t i = 0; i < m; i++) {
            if (slim_cancel_check())
                return; /* a row is up to k x n steps: check each */
            if (j->ty == EIN_F64) {
                const double *a = (const double *)j->a + (bi * m + i) * k;
                const double *b = (const double *)j->b + bi * k * n;
                double *c = (double *)j->c + (bi * m + i) * n;
                for (int64_t x = 0; x < n; x++)
                    c[x] = 0;
                for (int64_t t = 0; t < k; t++)
                    for (int64_t x = 0; x < n; x++)
                        c[x] += a[t] * b[t * n + x];
            } else {
                const int64_t *a = (const int64_t *)j->a + (bi * m + i) * k;
                const int64_t *b = (const int64_t *)j->b + bi * k * n;
                uint64_t *c = (uint64_t *)j->c + (bi * m + i) * n;
                for (int64_t x = 0; x < n; x++)
                    c[x] = 0;
                for (int64_t t = 0; t < k; t++)
                    for (int64_t x = 0; x < n; x++)
                        c[x] += (uint64_t)a[t] * (uint64_t)b[t * n + x];
            }
        }
    }
}

/* The labels of a pair's result, and what each side sums or shares. */
typedef struct {
    int batch[EIN_LABELS], nb, rows[EIN_LABELS], nr, cols[EIN_LABELS], nc;
    int k[EIN_LABELS], nk, suma[EIN_LABELS], nsa, sumb[EIN_LABELS], nsb;
    double size; /* result elements */
} pair_plan;

static void plan_pair(const ein_state *s, int ia, int ib, pair_plan *pp)
{
    const ein_operand *a = &s->ops[ia], *b = &s->ops[ib];
    memset(pp, 0, sizeof(*pp));
    pp->size = 1;
    for (int d = 0; d < a->n; d++) {
        int l = a->label[d];
        bool need = needed(s, l, ia, ib);
        if (op_has(b, l))
            need ? (pp->batch[pp->nb++] = l) : (pp->k[pp->nk++] = l);
        else
            need ? (pp->rows[pp->nr++] = l) : (pp->suma[pp->nsa++] = l);
        if (need)
            pp->size *= (double)label_size(s->p, l);
    }
    for (int d = 0; d < b->n; d++) {
        int l = b->label[d];
        if (op_has(a, l))
            continue;
        bool need = needed(s, l, ia, ib);
        need ? (pp->cols[pp->nc++] = l) : (pp->sumb[pp->nsb++] = l);
        if (need)
            pp->size *= (double)label_size(s->p, l);
    }
}

static int64_t prod_sizes(const ein_plan *p, const int *labels, int n)
{
    int64_t v = 1;
    for (int i = 0; i < n; i++)
        v *= label_size(p, labels[i]);
    return v;
}

/* Contracts operands ia < ib into ia and removes ib. */
static slim_status contract_pair(ein_state *s, int ia, int ib)
{
    pair_plan pp;
    plan_pair(s, ia, ib, &pp);
    if (pp.size > (double)INT64_MAX)
        return slim_errf(s->err, SLIM_EOOM, "an intermediate of %.3g elements is too large",
                         pp.size);
    int keep[EIN_LABELS];
    int64_t stride[EIN_LABELS];
    ein_operand a2, b2, c;
    memset(&a2.hold, 0, sizeof(a2.hold));
    memset(&b2.hold, 0, sizeof(b2.hold));
    memset(&c.hold, 0, sizeof(c.hold));
    /* A as [batch, rows, k], B as [batch, k, cols]. */
    memcpy(keep, pp.batch, sizeof(int) * pp.nb);
    memcpy(keep + pp.nb, pp.rows, sizeof(int) * pp.nr);
    memcpy(keep + pp.nb + pp.nr, pp.k, sizeof(int) * pp.nk);
    operand_strides(s, &s->ops[ia], stride);
    slim_status st = make_operand(s, s->ops[ia].data, stride, keep, pp.nb + pp.nr + pp.nk,
                                  pp.suma, pp.nsa, &a2);
    if (st)
        goto done;
    memcpy(keep + pp.nb, pp.k, sizeof(int) * pp.nk);
    memcpy(keep + pp.nb + pp.nk, pp.cols, sizeof(int) * pp.nc);
    operand_strides(s, &s->ops[ib], stride);
    if ((st = make_operand(s, s->ops[ib].data, stride, keep, pp.nb + pp.nk + pp.nc, pp.sumb,
                           pp.nsb, &b2)))
        goto done;
    bmm_job j = {s->ty, a2.data, b2.data, NULL, prod_sizes(s->p, pp.rows, pp.nr),
                 prod_sizes(s->p, pp.cols, pp.nc), prod_sizes(s->p, pp.k, pp.nk)};
    int64_t batch = prod_sizes(s->p, pp.batch, pp.nb);
    if (!(j.c = slim_scratch_alloc(&c.hold, (int64_t)pp.size, 8, false, s->err))) {
        st = s->err->status;
        goto done;
    }
    double block = (double)j.m * (double)j.n * (double)j.k;
    slim_parallel_for(batch, block >= 16384 ? 1 : 1 + (int64_t)(16384 / (block + 1)), bmm_blocks,
                      &j);
    if ((st = slim_cancel_status(s->err)))
        goto done;
    c.data = j.c;
    c.numel = pp.size;
    memcpy(c.label, pp.batch, sizeof(int) * pp.nb);
    memcpy(c.label + pp.nb, pp.rows, sizeof(int) * pp.nr);
    memcpy(c.label + pp.nb + pp.nr, pp.cols, sizeof(int) * pp.nc);
    c.n = pp.nb + pp.nr + pp.nc;
    slim_tensor_release(&s->ops[ia].hold);
    slim_tensor_release(&s->ops[ib].hold);
    s->ops[ia] = c;
    memset(&c.hold, 0, sizeof(c.hold));
    memmove(&s->ops[ib], &s->ops[ib + 1], sizeof(ein_operand) * (size_t)(s->n_ops - ib - 1));
    s->n_ops--;
done:
    slim_tensor_release(&a2.hold);
    slim_tensor_release(&b2.hold);
    slim_tensor_release(&c.hold);
    return st;
}

/* The pair whose result is smallest; ties go to the smaller inputs. */
static void pick_pair(const ein_state *s, int *ia, int *ib)
{
    double best = -1, best_in = 0;
    for (int a = 0; a < s->n_ops; a++)
        for (int b = a + 1; b < s->n_ops; b++) {
            pair_plan pp;
            plan_pair(s, a, b, &pp);
            double in = s->ops[a].numel + s->ops[b].numel;
            if (best < 0 || pp.size < best || (pp.size == best && in < best_in)) {
                best = pp.size;
                best_in = in;
                *ia = a;
                *ib = b;
            }
        }
}

/* ---- the kernel ---------------------------------------------------------- */

/* Input i in the calc type: its own data, or a converted copy in *hold. */
static const void *calc_input(const slim_tensor *t, ein_type ty, slim_tensor *hold, slim_err *err)
{
    memset(hold, 0, sizeof(*hold));
    if (t->dtype == (ty == EIN_F64 ? SLIM_F64 : SLIM_I64))
        return t->data;
    int64_t n = slim_tensor_numel(t);
    void *p = slim_scratch_alloc(hold, n, 8, false, err);
    for (int64_t i = 0; p && i < n; i++) {
        if (ty == EIN_F64)
            ((double *)p)[i] = slim_load_f64(t->dtype, t->data, i);
        else
            ((int64_t *)p)[i] = slim_load_i64(t->dtype, t->data, i);
    }
    return p;
}

/* Step 1 for input i: its labels that vary (size-1 dims broadcast), the
 * ones something else needs kept, the rest summed. */
static slim_status input_operand(ein_state *s, const slim_tensor *t, int i, const void *data)
{
    const ein_plan *p = s->p;
    int64_t st[SLIM_MAX_DIMS], stride[EIN_LABELS] = {0};
    slim_contiguous_strides(t->ndim, t->dims, st);
    int keep[EIN_LABELS], sum[EIN_LABELS], nk = 0, ns = 0;
    for (int d = 0; d < t->ndim; d++) {
        int l = p->label[i][d];
        if (t->dims[d] == 1)
            continue;
        if (!stride[l]) {
            bool need = s->in_out[l];
            for (int o = 0; o < p->n_in && !need; o++)
                for (int e = 0; o != i && e < p->rank[o] && !need; e++)
                    need = p->label[o][e] == l && s->ctx_in[o]->dims[e] != 1;
            need ? (keep[nk++] = l) : (sum[ns++] = l);
        }
        stride[l] += st[d]; /* a repeated label: the diagonal */
    }
    return make_operand(s, data, stride, keep, nk, sum, ns, &s->ops[i]);
}

static slim_status ein_contract(ein_state *s, slim_tensor *y, void *yc)
{
    const ein_plan *p = s->p;
    slim_status st = SLIM_OK;
    slim_tensor views[EIN_MAX_IN];
    memset(views, 0, sizeof(views));
    for (int i = 0; i < p->n_in; i++)
        memset(&s->ops[i].hold, 0, sizeof(s->ops[i].hold));
    s->n_ops = 0;
    for (int i = 0; i < p->n_in; i++) {
        const void *data = calc_input(s->ctx_in[i], s->ty, &views[i], s->err);
        if (!data) {
            st = s->err->status;
            goto done;
        }
        s->n_ops = i + 1;
        if ((st = input_operand(s, s->ctx_in[i], i, data)))
            goto done;
    }
    while (s->n_ops > 1) {
        int a = 0, b = 1;
        pick_pair(s, &a, &b);
        if ((st = contract_pair(s, a, b)))
            goto done;
    }
    /* Step 3: the last operand's labels are all output labels. */
    int64_t stride[EIN_LABELS];
    operand_strides(s, &s->ops[0], stride);
    ein_layout j = {.ty = s->ty, .src = s->ops[0].data, .dst = yc, .n_dst = p->out_rank};
    for (int d = 0; d < p->out_rank; d++) {
        j.dst_size[d] = label_size(p, p->out_label[d]);
        j.dst_stride[d] = stride[p->out_label[d]];
    }
    layout_run(&j, slim_tensor_numel(y));
    st = slim_cancel_status(s->err);
done:
    for (int i = 0; i < s->n_ops; i++)
        slim_tensor_release(&s->ops[i].hold);
    for (int i = 0; i < p->n_in; i++)
        slim_tensor_release(&views[i]);
    return st;
}

static slim_status einsum_exec(slim_op_ctx *ctx)
{
    ein_plan p;
    slim_status st = ein_parse(ctx, &p);
    if (st)
        return st;
    slim_tensor *y = ctx->out[0];
    int64_t n = y ? slim_tensor_numel(y) : 0;
    if (n == 0)
        return SLIM_OK;
    ein_operand ops[EIN_MAX_IN];
    ein_state s = {.p = &p, .ops = ops, .err = ctx->err, .ctx_in = ctx->in,
                   .ty = slim_dtype_is_float(ctx->in[0]->dtype) ? EIN_F64 : EIN_I64};
    bool zero = false;
    for (int d = 0; d < p.out_rank; d++)
        s.in_out[p.out_label[d]] = true;
    for (int l = 0; l < EIN_LABELS; l++)
        zero = zero || (p.size[l] == 0 && !s.in_out[l]); /* a sum over nothing */
    slim_tensor yhold;
    void *yc = y->data;
    memset(&yhold, 0, sizeof(yhold));
    if (y->dtype != (s.ty == EIN_F64 ? SLIM_F64 : SLIM_I64) &&
        !(yc = slim_scratch_alloc(&yhold, n, 8, false, ctx->err)))
        return ctx->err->status;
    if (zero)
        memset(yc, 0, 8 * (size_t)n);
    else if ((st = ein_contract(&s, y, yc)))
        goto done;
    if (yc != y->data)
        for (int64_t i = 0; i < n; i++) {
            if (s.ty == EIN_F64)
                slim_store_f64(y->dtype, y->data, i, ((double *)yc)[i]);
            else
                slim_store_i64(y->dtype, y->data, i, ((int64_t *)yc)[i]);
        }
done:
    slim_tensor_release(&yhold);
    return st;
}

const slim_op_def slim__ops_einsum[] = {
    {"Einsum", 12, NULL, NULL, einsum_infer, einsum_exec, 0},
    {0},
};
