/*
 * text.c - TfIdfVectorizer over integer token ids or string tokens.
 *
 * The pool lists the n-grams to count: ngram_counts[k] is where the
 * (k+1)-grams start in pool_int64s, each (k+1) ids long, and ngram_indexes
 * gives each pool n-gram its output column. A row's n-grams are taken with
 * every skip in [0, max_skip_count] (items skip + 1 apart); unigrams are
 * counted once whatever the skip. Pool n-grams are sorted once at prepare
 * so that each candidate is a binary search.
 *
 * String tokens (pool_strings) become ids first: each distinct pool string
 * gets one, kept sorted for a binary search; an input token not in the
 * pool gets -1, which no pool n-gram holds. The counting is then the
 * integer one.
 */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

enum { TF_TF, TF_IDF, TF_TFIDF };

typedef struct {
    int64_t n;        /* gram length */
    const int64_t *ids;
    int64_t col;      /* output column */
    float weight;
} tf_gram;

typedef struct {
    int mode;
    int64_t min_n, max_n, max_skip, n_cols;
    int n_grams;
    tf_gram *grams;   /* sorted by (n, ids) */
    int64_t *pool;    /* owned copy the grams point into */
    float *col_w;     /* [n_cols]: the weight of the n-gram owning each column */
    int n_words;      /* pool_strings: the distinct strings, sorted, and their ids */
    const char **words;
    int64_t *word_ids;
} tf_state;

static int tf_word_cmp(const char *a, size_t an, const char *b)
{
    size_t bn = strlen(b);
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : an < bn ? -1 : an > bn;
}

/* The id of the pool string equal to s (n bytes), or -1: a binary search
 * over the distinct pool strings, sorted by their bytes. */
static int64_t tf_word_find(const tf_state *st, const char *s, size_t n)
{
    int lo = 0, hi = st->n_words;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        int c = tf_word_cmp(s, n, st->words[mid]);
        if (!c)
            return st->word_ids[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

typedef struct {
    const char *w;
    int at;
} tf_word;

static int tf_word_sort(const void *a, const void *b)
{
    const tf_word *x = a, *y = b;
    int c = tf_word_cmp(x->w, strlen(x->w), y->w);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

/* pool_strings -> ids in st->pool: equal strings share one id (the
 * distinct strings' rank in sorted order). */
static slim_status tf_words(tf_state *st, const slim_attr *ps, slim_err *err)
{
    size_t n = (size_t)(ps->n ? ps->n : 1);
    /* raw (these): load time: sized by the node's attributes */
    st->words = malloc(sizeof(char *) * n);
    st->word_ids = malloc(sizeof(int64_t) * n);
    st->pool = malloc(sizeof(int64_t) * n);
    tf_word *sorted = malloc(sizeof(tf_word) * n);
    if (!st->words || !st->word_ids || !st->pool || !sorted) {
        free(sorted);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    for (int i = 0; i < ps->n; i++)
        sorted[i] = (tf_word){ps->strings[i], i};
    qsort(sorted, (size_t)ps->n, sizeof(tf_word), tf_word_sort);
    for (int i = 0; i < ps->n; i++) {
        if (!st->n_words || strcmp(st->words[st->n_words - 1], sorted[i].w) != 0) {
            st->words[st->n_words] = sorted[i].w;
            st->word_ids[st->n_words] = st->n_words;
            st->n_words++;
        }
        st->pool[sorted[i].at] = st->n_words - 1;
    }
    free(sorted);
    return SLIM_OK;
}

static int tf_cmp_key(int64_t n, const int64_t *ids, const tf_gram *g)
{
    if (n != g->n)
        return n < g->n ? -1 : 1;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] != g->ids[i])
            return ids[i] < g->ids[i] ? -1 : 1;
    return 0;
}

static int tf_cmp(const void *a, const void *b)
{
    const tf_gram *x = a;
    return tf_cmp_key(x->n, x->ids, b);
}

static void tf_release(void *p)
{
    tf_state *st = p;
    if (!st)
        return;
    free(st->grams);
    free(st->pool);
    free(st->col_w);
    free(st->words);
    free(st->word_ids);
    free(st);
}

static slim_status tf_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_attr *pool = slim_node_attr(node, "pool_int64s");
    const slim_attr *strs = slim_node_attr(node, "pool_strings");
    const slim_attr *counts = slim_node_attr(node, "ngram_counts");
    const slim_attr *idx = slim_node_attr(node, "ngram_indexes");
    const slim_attr *w = slim_node_attr(node, "weights");
    const char *mode = slim_attr_str(node, "mode", "");
    if ((pool && strs) || (strs && strs->type != SLIM_ATTR_STRINGS))
        return slim_errf(err, SLIM_EINVAL, "pool_int64s or pool_strings (STRINGS), not both");
    if (strs)
        pool = strs; /* its strings become ids below; n is the same */
    if (!pool || (pool->type != SLIM_ATTR_INTS && !strs) || !counts ||
        counts->type != SLIM_ATTR_INTS || !idx || idx->type != SLIM_ATTR_INTS)
        return slim_errf(err, SLIM_EINVAL, "pool_int64s (or pool_strings), ngram_counts and "
                         "ngram_indexes (INTS) are required");
    /* raw: fixed-size load-time state, freed with the model */
    tf_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->mode = strcmp(mode, "TF") == 0 ? TF_TF : strcmp(mode, "IDF") == 0 ? TF_IDF
               : strcmp(mode, "TFIDF") == 0 ? TF_TFIDF : -1;
    st->min_n = slim_attr_int(node, "min_gram_length", 0);
    st->max_n = slim_attr_int(node, "max_gram_length", 0);
    st->max_skip = slim_attr_int(node, "max_skip_count", 0);
    slim_status s = SLIM_OK;
    if (st->mode < 0)
        s = slim_errf(err, SLIM_EINVAL, "mode \"%s\" is not TF, IDF or TFIDF", mode);
    else if (st->min_n < 1 || st->max_n < st->min_n || st->max_n > counts->n || st->max_skip < 0 ||
             st->max_skip > (1 << 20))
        s = slim_errf(err, SLIM_EINVAL, "min_gram_length %lld, max_gram_length %lld (at most "
                      "%d, the ngram_counts) and max_skip_count %lld are inconsistent",
                      (long long)st->min_n, (long long)st->max_n, counts->n,
                      (long long)st->max_skip);
    else if (w && (w->type != SLIM_ATTR_FLOATS || w->n != idx->n))
        s = slim_errf(err, SLIM_EINVAL, "weights must be %d floats, one per ngram", idx->n);
    if (s)
        goto fail;
    /* raw (these): load time: sized by the node's attributes */
    if (strs)
        s = tf_words(st, strs, err);
    else if ((st->pool = malloc(sizeof(int64_t) * (size_t)(pool->n ? pool->n : 1))))
        memcpy(st->pool, pool->ints, sizeof(int64_t) * (size_t)pool->n);
    st->grams = calloc((size_t)(idx->n ? idx->n : 1), sizeof(tf_gram));
    if (!s && (!st->pool || !st->grams))
        s = slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (s)
        goto fail;
    for (int k = 0; k < counts->n && !s; k++) {
        int64_t start = counts->ints[k], end = k + 1 < counts->n ? counts->ints[k + 1] : pool->n;
        int64_t n = k + 1;
        if (start < 0 || end < start || end > pool->n || (end - start) % n)
            s = slim_errf(err, SLIM_EINVAL, "ngram_counts[%d] = %lld does not split pool_int64s "
                          "(%d ids) into %lld-grams", k, (long long)start, pool->n, (long long)n);
        for (int64_t at = start; !s && at < end; at += n) {
            if (st->n_grams >= idx->n) {
                s = slim_errf(err, SLIM_EINVAL, "the pool holds more n-grams than the %d "
                              "ngram_indexes", idx->n);
                break;
            }
            tf_gram *g = &st->grams[st->n_grams];
            g->n = n;
            g->ids = st->pool + at;
            g->col = idx->ints[st->n_grams];
            g->weight = w ? w->floats[st->n_grams] : 1.0f;
            if (g->col < 0 || g->col > (1 << 24)) {
                s = slim_errf(err, SLIM_EINVAL, "ngram_indexes holds %lld", (long long)g->col);
                break;
            }
            if (g->col + 1 > st->n_cols)
                st->n_cols = g->col + 1;
            st->n_grams++;
        }
    }
    if (s)
        goto fail;
    /* raw: load time: sized by the node's attributes */
    if (!(st->col_w = calloc((size_t)(st->n_cols ? st->n_cols : 1), sizeof(float)))) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory");
        goto fail;
    }
    for (int g = 0; g < st->n_grams; g++)
        st->col_w[st->grams[g].col] = st->grams[g].weight;
    qsort(st->grams, (size_t)st->n_grams, sizeof(tf_gram), tf_cmp);
    *state = st;
    return SLIM_OK;
fail:
    tf_release(st);
    return s;
}

static slim_status tf_infer(slim_op_ctx *ctx)
{
    const tf_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_status s = st->words ? slim_check_dtype(x, "X", ctx->err, SLIM_STRING,
                                                 SLIM_DTYPE_UNDEFINED)
                              : slim_check_dtype(x, "X", ctx->err, SLIM_I32, SLIM_I64,
                                                 SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (x->ndim == 1)
        slim_tensor_set_shape(ctx->out[0], SLIM_F32, 1, &st->n_cols);
    else if (x->ndim == 2)
        slim_tensor_set_shape(ctx->out[0], SLIM_F32, 2, (int64_t[]){x->dims[0], st->n_cols});
    else
        return slim_errf(ctx->err, SLIM_ESHAPE, "X has %d dims, expected [C] or [N, C]", x->ndim);
    return SLIM_OK;
}

static slim_status tf_count(const tf_state *st, const slim_tensor *x, float *y,
                            slim_err *err);

static slim_status tf_exec(slim_op_ctx *ctx)
{
    const tf_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    if (x->dtype != SLIM_STRING)
        return tf_count(st, x, ctx->out[0]->data, ctx->err);
    /* Tokens to ids, then the integer count over them. */
    slim_tensor holder = {0};
    int64_t n = slim_tensor_numel(x);
    int64_t *ids = slim_scratch_alloc(&holder, n, sizeof(int64_t), false, ctx->err);
    if (!ids)
        return ctx->err->status;
    for (int64_t i = 0; i < n; i++) {
        const slim_str *e = (const slim_str *)x->data + i;
        ids[i] = tf_word_find(st, e->ptr ? e->ptr : "", (size_t)e->len);
    }
    slim_tensor as_ids = *x;
    as_ids.dtype = SLIM_I64;
    as_ids.data = ids;
    slim_status s = tf_count(st, &as_ids, ctx->out[0]->data, ctx->err);
    slim_tensor_release(&holder);
    return s;
}

static slim_status tf_count(const tf_state *st, const slim_tensor *x, float *y, slim_err *err)
{
    const int64_t rows = x->ndim == 2 ? x->dims[0] : 1, C = x->dims[x->ndim - 1];
    int64_t gram[64];
    if (st->max_n > 64)
        return slim_errf(err, SLIM_EUNSUPPORTED, "n-grams longer than 64 ids");
    memset(y, 0, sizeof(float) * (size_t)(rows * st->n_cols));
    for (int64_t r = 0; r < rows; r++) {
        float *out = y + r * st->n_cols;
        for (int64_t n = st->min_n; n <= st->max_n; n++)
            for (int64_t skip = 0; skip <= (n == 1 ? 0 : st->max_skip); skip++)
                for (int64_t i = 0; i + (n - 1) * (skip + 1) < C; i++) {
                    for (int64_t k = 0; k < n; k++)
                        gram[k] = slim_load_i64(x->dtype, x->data, r * C + i + k * (skip + 1));
                    tf_gram key = {n, gram, 0, 0};
                    const tf_gram *hit = bsearch(&key, st->grams, (size_t)st->n_grams,
                                                 sizeof(tf_gram), tf_cmp);
                    if (hit)
                        out[hit->col] += 1;
                }
        /* Counts become the mode's values; a column's weight is that of
         * the pool n-gram that owns it. */
        for (int64_t c = 0; c < st->n_cols; c++) {
            if (st->mode == TF_IDF)
                out[c] = out[c] > 0 ? st->col_w[c] : 0;
            else if (st->mode == TF_TFIDF)
                out[c] *= st->col_w[c];
        }
    }
    return SLIM_OK;
}

const slim_op_def slim__ops_text[] = {
    {"TfIdfVectorizer", 9, tf_prepare, tf_release, tf_infer, tf_exec, SLIM_OP_STRINGS},
    {0},
};
