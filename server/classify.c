/*
 * classify.c - Triton's classification extension: an output asked for
 * with a class count answers its top-k as BYTES strings
 * "value:index[:label]" (codec.h says the rules), and the label files
 * that config's "label_filename" names.
 *
 * The class strings are made after the run, from the output the model
 * gave, as a string tensor of the CPU allocator (charged like any output),
 * so both protocols encode them as they encode any BYTES output.
 */
#include "codec.h"
#include "config.h"
#include "repository.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A label file is config, not data: bounded like one. */
#define LABELS_MAX_BYTES ((size_t)16 << 20)
#define LABEL_MAX_BYTES 4096

/* ---- label files ---------------------------------------------------------- */

void slim_server_io_free(slim_server_io *io)
{
    free(io->name);
    free(io->label_filename);
    free(io->label_text);
    free(io->labels);
    io->name = io->label_filename = io->label_text = NULL;
    io->labels = NULL;
    io->n_labels = 0;
}

/* Cuts text (n bytes, NUL after them) into lines: labels[i] is line i
 * without its "\n" or "\r\n". Triton reads the file the same way. */
static slim_status split_lines(slim_server_io *io, size_t n, const char *path, slim_err *err)
{
    char *text = io->label_text;
    int64_t lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += text[i] == '\n';
    lines += n && text[n - 1] != '\n';
    if (!(io->labels = calloc((size_t)(lines ? lines : 1), sizeof(*io->labels))))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    char *p = text, *end = text + n;
    for (int64_t i = 0; i < lines; i++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        if (len && p[len - 1] == '\r')
            len--;
        if (len > LABEL_MAX_BYTES || strnlen(p, len) < len) /* a NUL inside */
            return slim_errf(err, SLIM_EINVAL, "output '%s': label file %s: line %lld is %s",
                             io->name, path, (long long)i + 1,
                             len > LABEL_MAX_BYTES ? "over 4096 bytes" : "holding a NUL byte");
        p[len] = '\0';
        io->labels[i] = p;
        p = nl ? nl + 1 : end;
    }
    io->n_labels = lines;
    return SLIM_OK;
}

static slim_status load_one(slim_server_io *io, const char *root, const char *model,
                            slim_err *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s/%s", root, model, io->label_filename);
    FILE *f = fopen(path, "rb");
    if (!f)
        return slim_errf(err, SLIM_ENOTFOUND, "output '%s': cannot read its label_filename %s: %s",
                         io->name, path, strerror(errno));
    slim_status s = SLIM_OK;
    size_t n = 0;
    if (!(io->label_text = malloc(LABELS_MAX_BYTES + 1))) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory");
    } else {
        n = fread(io->label_text, 1, LABELS_MAX_BYTES + 1, f);
        if (ferror(f))
            s = slim_errf(err, SLIM_EIO, "output '%s': reading %s failed", io->name, path);
        else if (n > LABELS_MAX_BYTES)
            s = slim_errf(err, SLIM_EINVAL, "output '%s': label file %s is over %zu bytes",
                          io->name, path, LABELS_MAX_BYTES);
    }
    fclose(f);
    if (s != SLIM_OK)
        return s;
    char *shrunk = realloc(io->label_text, n + 1);
    if (shrunk)
        io->label_text = shrunk;
    io->label_text[n] = '\0';
    return split_lines(io, n, path, err);
}

slim_status slim_server_config_load_labels(slim_server_config *cfg, const char *root,
                                           const char *model, slim_err *err)
{
    for (int i = 0; i < cfg->n_outputs; i++) {
        slim_server_io *io = &cfg->outputs[i];
        if (!io->label_filename || io->labels)
            continue;
        slim_status s = load_one(io, root, model, err);
        if (s != SLIM_OK)
            return s;
    }
    return SLIM_OK;
}

/* ---- top-k ---------------------------------------------------------------- */

slim_status slim_server_classify_check(const slim_server_model *m, int idx, int64_t k,
                                       slim_err *err)
{
    const slim_server_io *io = &m->cfg.outputs[idx];
    if (k < 1)
        return slim_errf(err, SLIM_EINVAL, "output '%s': \"classification\" must be a whole "
                         "number of classes, 1 or more", io->name);
    if (io->dtype == SLIM_STRING || io->dtype == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "output '%s': classification needs a numeric output; "
                         "this one is %s", io->name, io->dtype == SLIM_STRING ? "BYTES" : "untyped");
    return SLIM_OK;
}

/* Rows and classes a row of y holds: the batch rows of a batching model,
 * else one row of everything. */
static void rows_of(const slim_server_model *m, const slim_tensor *y, int64_t *rows,
                    int64_t *classes)
{
    int64_t numel = slim_shape_numel(y->ndim, y->dims);
    *rows = m->cfg.max_batch_size > 0 && y->ndim >= 1 ? y->dims[0] : 1;
    *classes = *rows > 0 ? numel / *rows : 0;
}

void slim_server_classify_shape(const slim_server_model *m, const slim_server_out_req *out,
                                const slim_tensor *y, slim_tensor *shape)
{
    int64_t rows, classes;
    rows_of(m, y, &rows, &classes);
    *shape = (slim_tensor){.dtype = SLIM_STRING};
    if (m->cfg.max_batch_size > 0)
        shape->dims[shape->ndim++] = rows;
    shape->dims[shape->ndim++] = out->class_count < classes ? out->class_count : classes;
}

/* "-3.402823e+38" is not what %f writes: it writes every digit, 47
 * characters for FLT_MAX and 317 for DBL_MAX; 20 for an index. */
size_t slim_server_classify_elem_bytes(const slim_server_model *m, int idx)
{
    const slim_server_io *io = &m->cfg.outputs[idx];
    size_t longest = 0;
    for (int64_t i = 0; i < io->n_labels; i++) {
        size_t n = strlen(io->labels[i]);
        longest = n > longest ? n : longest;
    }
    return 4 + 320 + 1 + 20 + (io->n_labels ? 1 + longest : 0);
}

typedef struct class_sort {
    const slim_tensor *y;
    int64_t base;
} class_sort;

static double value_at(const slim_tensor *y, int64_t i)
{
    if (y->dtype == SLIM_U64)
        return (double)((const uint64_t *)y->data)[i];
    if (y->dtype == SLIM_I64)
        return (double)((const int64_t *)y->data)[i];
    return slim_load_f64(y->dtype, y->data, i);
}

/* Larger first; equal ones in index order; NaN last. 64-bit integers are
 * compared as they are (a double would round them together). */
static int compare(const class_sort *c, int64_t a, int64_t b)
{
    const slim_tensor *y = c->y;
    int64_t ia = c->base + a, ib = c->base + b;
    int r = 0;
    if (y->dtype == SLIM_I64) {
        int64_t x = ((const int64_t *)y->data)[ia], z = ((const int64_t *)y->data)[ib];
        r = x > z ? -1 : x < z;
    } else if (y->dtype == SLIM_U64) {
        uint64_t x = ((const uint64_t *)y->data)[ia], z = ((const uint64_t *)y->data)[ib];
        r = x > z ? -1 : x < z;
    } else {
        double x = value_at(y, ia), z = value_at(y, ib);
        if (isnan(x) || isnan(z))
            r = isnan(x) - isnan(z);
        else
            r = x > z ? -1 : x < z;
    }
    return r ? r : (a > b) - (a < b);
}

/* The k best of idx[0..n) to its front, in order: a partial selection
 * (k passes of the rest) when k is small, else a merge sort; both keep
 * compare's total order, so the result does not depend on which ran. */
static void top_k(const class_sort *c, int64_t *idx, int64_t *tmp, int64_t n, int64_t k)
{
    if (k <= 16) {
        for (int64_t i = 0; i < k; i++) {
            int64_t best = i;
            for (int64_t j = i + 1; j < n; j++)
                if (compare(c, idx[j], idx[best]) < 0)
                    best = j;
            int64_t t = idx[i];
            idx[i] = idx[best];
            idx[best] = t;
        }
        return;
    }
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t a = lo, b = mid, o = lo;
            while (a < mid || b < hi)
                tmp[o++] = b >= hi || (a < mid && compare(c, idx[a], idx[b]) <= 0) ? idx[a++]
                                                                                   : idx[b++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof(*idx));
    }
}

static int format_value(const slim_tensor *y, int64_t i, char *buf, size_t cap)
{
    switch (y->dtype) {
    case SLIM_I64: return snprintf(buf, cap, "%lld", (long long)((const int64_t *)y->data)[i]);
    case SLIM_U64:
        return snprintf(buf, cap, "%llu", (unsigned long long)((const uint64_t *)y->data)[i]);
    case SLIM_BOOL: case SLIM_I8: case SLIM_U8: case SLIM_I16: case SLIM_U16:
    case SLIM_I32: case SLIM_U32:
        return snprintf(buf, cap, "%lld", (long long)slim_load_i64(y->dtype, y->data, i));
    default: return snprintf(buf, cap, "%f", slim_load_f64(y->dtype, y->data, i));
    }
}

static slim_status classify_one(const slim_server_model *m, const slim_server_out_req *out,
                                const slim_tensor *y, slim_tensor *dst, slim_err *err)
{
    const slim_server_io *io = &m->cfg.outputs[out->index];
    int64_t rows, classes;
    rows_of(m, y, &rows, &classes);
    slim_server_classify_shape(m, out, y, dst);
    int64_t k = dst->dims[dst->ndim - 1];
    slim_status s = slim_tensor_alloc(dst, err);
    if (s != SLIM_OK)
        return s;
    if (!k || !rows)
        return SLIM_OK;
    int64_t *idx = malloc((size_t)classes * 2 * sizeof(*idx));
    size_t cap = slim_server_classify_elem_bytes(m, out->index) + 1;
    char *text = malloc(cap);
    if (!idx || !text) {
        free(idx);
        free(text);
        slim_tensor_release(dst);
        return slim_errf(err, SLIM_ENOMEM, "out of memory while classifying output '%s'", io->name);
    }
    for (int64_t r = 0; r < rows && s == SLIM_OK; r++) {
        class_sort c = {y, r * classes};
        for (int64_t i = 0; i < classes; i++)
            idx[i] = i;
        top_k(&c, idx, idx + classes, classes, k);
        for (int64_t j = 0; j < k && s == SLIM_OK; j++) {
            int n = format_value(y, c.base + idx[j], text, cap);
            n += snprintf(text + n, cap - (size_t)n, ":%lld", (long long)idx[j]);
            if (idx[j] < io->n_labels)
                n += snprintf(text + n, cap - (size_t)n, ":%s", io->labels[idx[j]]);
            s = slim_tensor_string_set(dst, r * k + j, text, (size_t)n, err);
        }
    }
    free(idx);
    free(text);
    if (s != SLIM_OK)
        slim_tensor_release(dst);
    return s;
}

slim_status slim_server_classify_outputs(const slim_server_infer *rq, const slim_server_model *m,
                                         const slim_tensor *outs, int n_outs, slim_tensor *view,
                                         slim_err *err)
{
    memcpy(view, outs, (size_t)n_outs * sizeof(*view));
    for (int i = 0; i < rq->n_outputs; i++) {
        const slim_server_out_req *o = &rq->outputs[i];
        if (o->class_count <= 0 || o->index >= n_outs)
            continue;
        const slim_tensor *y = &outs[o->index];
        slim_status s = y->dtype == SLIM_STRING || (slim_tensor_numel(y) && !y->data)
                            ? slim_errf(err, SLIM_EINTERNAL, "output '%s' cannot be classified",
                                        m->cfg.outputs[o->index].name)
                            : classify_one(m, o, y, &view[o->index], err);
        if (s != SLIM_OK) {
            view[o->index] = outs[o->index]; /* not ours: not released below */
            slim_server_classify_outputs_free(rq, outs, view, n_outs);
            return s;
        }
    }
    return SLIM_OK;
}

void slim_server_classify_outputs_free(const slim_server_infer *rq, const slim_tensor *outs,
                                       slim_tensor *view, int n_outs)
{
    for (int i = 0; i < rq->n_outputs; i++) {
        int o = rq->outputs[i].index;
        /* a classified output is never a string tensor itself */
        if (rq->outputs[i].class_count > 0 && o < n_outs && view[o].dtype == SLIM_STRING &&
            outs[o].dtype != SLIM_STRING)
            slim_tensor_release(&view[o]);
        if (o < n_outs)
            view[o] = outs[o];
    }
}
