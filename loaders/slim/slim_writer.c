/*
 * slim_writer.c - graph IR -> .slim file (docs/format.md).
 *
 * The metadata is built in memory (it is small: names, shapes, attributes),
 * then the file is written in one pass: header, metadata, padding to the
 * data section, each tensor on its 64-byte boundary. Strings are written
 * once each (a name, domain or op type used by many nodes is one entry).
 */
#include "slim_format.h"
#include "device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} wbuf;

static void put(wbuf *b, const void *data, size_t k)
{
    if (b->oom)
        return;
    if (b->n + k > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + k)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, k);
    b->n += k;
}

#define PUT_FN(name, type)                      \
    static void name(wbuf *b, type v)           \
    {                                           \
        put(b, &v, sizeof(v));                  \
    }
PUT_FN(put_u8, uint8_t)
PUT_FN(put_u32, uint32_t)
PUT_FN(put_i32, int32_t)
PUT_FN(put_i64, int64_t)
PUT_FN(put_u64, uint64_t)
PUT_FN(put_f32, float)
#undef PUT_FN

/* ---- strings: an open-addressing set of the distinct ones ----------------- */

typedef struct strtab {
    const char **strs;       /* in id order */
    uint32_t n, cap;
    uint32_t *slots;         /* id + 1, 0 empty */
    uint32_t n_slots;
    bool oom;
} strtab;

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static uint32_t intern(strtab *t, const char *s)
{
    if (!s)
        return SLIM_FORMAT_NONE;
    if (t->oom)
        return 0;
    if ((t->n + 1) * 2 > t->n_slots) {
        uint32_t ns = t->n_slots ? t->n_slots * 2 : 256;
        uint32_t *slots = calloc(ns, sizeof(uint32_t));
        if (!slots) {
            t->oom = true;
            return 0;
        }
        for (uint32_t i = 0; i < t->n; i++) {
            uint32_t h = hash_str(t->strs[i]) & (ns - 1);
            while (slots[h])
                h = (h + 1) & (ns - 1);
            slots[h] = i + 1;
        }
        free(t->slots);
        t->slots = slots;
        t->n_slots = ns;
    }
    uint32_t h = hash_str(s) & (t->n_slots - 1);
    for (; t->slots[h]; h = (h + 1) & (t->n_slots - 1))
        if (strcmp(t->strs[t->slots[h] - 1], s) == 0)
            return t->slots[h] - 1;
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 256;
        const char **strs = realloc(t->strs, sizeof(char *) * cap);
        if (!strs) {
            t->oom = true;
            return 0;
        }
        t->strs = strs;
        t->cap = cap;
    }
    t->strs[t->n] = s;
    t->slots[h] = t->n + 1;
    return t->n++;
}

/* ---- tensors --------------------------------------------------------------- */

typedef struct wtensors {
    const slim_tensor **ts;
    uint64_t *offsets;
    uint32_t n, cap;
    uint64_t end;            /* bytes of the data section so far */
    bool oom;
} wtensors;

static uint32_t add_tensor(wtensors *w, const slim_tensor *t)
{
    if (w->n == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 64;
        const slim_tensor **ts = realloc(w->ts, sizeof(*ts) * cap);
        uint64_t *offs = ts ? realloc(w->offsets, sizeof(*offs) * cap) : NULL;
        if (ts)
            w->ts = ts;
        if (!ts || !offs) {
            w->oom = true;
            return 0;
        }
        w->offsets = offs;
        w->cap = cap;
    }
    uint64_t off = (w->end + SLIM_FORMAT_TENSOR_ALIGN - 1) / SLIM_FORMAT_TENSOR_ALIGN *
                   SLIM_FORMAT_TENSOR_ALIGN;
    w->ts[w->n] = t;
    w->offsets[w->n] = off;
    w->end = off + slim_format_stored_bytes(t);
    return w->n++;
}

/* ---- the graph --------------------------------------------------------------- */

/* Collects every tensor and interns nothing yet: a graph's initializers in
 * value order, then per node its TENSOR attributes and, recursively, its
 * subgraphs' tensors, in attribute order. write_graph walks the same
 * order, so the n-th tensor met is tensor n. Sets *nested when a subgraph
 * is met (the file is then version 2). */
static slim_status collect(const slim_graph *g, wtensors *wt, bool *nested, slim_err *err)
{
    for (int v = 0; v < g->n_values; v++) {
        const slim_value *val = &g->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER)
            continue;
        if (val->init.device)
            return slim_errf(err, SLIM_EINVAL, "weight \"%s\" is on %s: write the model before "
                             "placing it on a device", val->name, val->init.device->name);
        if (slim_tensor_numel(&val->init) && !val->init.data)
            return slim_errf(err, SLIM_EINVAL, "weight \"%s\" has no data", val->name);
        if (val->init.dtype == SLIM_STRING) {
            for (int64_t i = 0, n = slim_tensor_numel(&val->init); i < n; i++)
                if (((const slim_str *)val->init.data)[i].len > UINT32_MAX)
                    return slim_errf(err, SLIM_EINVAL, "weight \"%s\": a string of more than "
                                     "4 GiB", val->name);
        }
        add_tensor(wt, &val->init);
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attrs; a++) {
            const slim_attr *at = &g->nodes[i].attrs[a];
            if (at->type == SLIM_ATTR_TENSOR)
                add_tensor(wt, at->t);
            if (at->type == SLIM_ATTR_GRAPH && at->g) {
                *nested = true;
                slim_status s = collect(at->g, wt, nested, err);
                if (s)
                    return s;
            }
        }
    return wt->oom ? slim_errf(err, SLIM_ENOMEM, "out of memory writing the model") : SLIM_OK;
}

/* Whether g or a subgraph holds a string tensor (a weight, a value or an
 * attribute): the file is then version 5, which older readers refuse. */
static bool has_strings(const slim_graph *g)
{
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].info.dtype == SLIM_STRING ||
            (g->values[v].kind == SLIM_VALUE_INITIALIZER &&
             g->values[v].init.dtype == SLIM_STRING))
            return true;
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attrs; a++) {
            const slim_attr *at = &g->nodes[i].attrs[a];
            if ((at->type == SLIM_ATTR_TENSOR && at->t && at->t->dtype == SLIM_STRING) ||
                (at->type == SLIM_ATTR_GRAPH && at->g && has_strings(at->g)))
                return true;
        }
    return false;
}

/* The type byte of a value (format version 3; 0, a tensor, before). */
static uint8_t value_type_byte(const slim_io_info *info)
{
    return (uint8_t)(info->kind | (info->kind == SLIM_KIND_OPTIONAL &&
                                           info->elem_kind == SLIM_KIND_SEQUENCE
                                       ? SLIM_FORMAT_TYPE_SEQ_IN_OPTIONAL
                                       : 0));
}

/* Whether g or a subgraph of it has a sequence or optional value: the
 * file is then version 3, which older readers refuse instead of taking
 * those values for tensors. */
static bool has_containers(const slim_graph *g)
{
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].info.kind != SLIM_KIND_TENSOR)
            return true;
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attrs; a++)
            if (g->nodes[i].attrs[a].type == SLIM_ATTR_GRAPH && g->nodes[i].attrs[a].g &&
                has_containers(g->nodes[i].attrs[a].g))
                return true;
    return false;
}

/* Which values of g the file keeps, and their ids in it: map[v] is v's id
 * or -1. A pass that fuses nodes or replaces weights (the int8 and half
 * passes) leaves values nothing reads or writes any more; their names and
 * shapes were a third of a small int8 model's metadata. Weights, inputs,
 * outputs and whatever a node names (implicit inputs too) stay. Returns
 * how many are kept. */
static int live_values(const slim_graph *g, int *map)
{
    for (int v = 0; v < g->n_values; v++)
        map[v] = g->values[v].kind != SLIM_VALUE_INTERMEDIATE ? 0 : -1;
    for (int i = 0; i < g->n_inputs; i++)
        map[g->inputs[i]] = 0;
    for (int i = 0; i < g->n_outputs; i++)
        map[g->outputs[i]] = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0 && n->in[k] < g->n_values)
                map[n->in[k]] = 0;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0 && n->out[k] < g->n_values)
                map[n->out[k]] = 0;
    }
    int kept = 0;
    for (int v = 0; v < g->n_values; v++)
        if (map[v] == 0)
            map[v] = kept++;
    return kept;
}

static int32_t mapped(const int *map, int v)
{
    return v < 0 ? v : map[v];
}

/* Values, inputs, outputs and nodes of g. In a subgraph, its last
 * n_captured inputs are outer-scope values that the reader captures again
 * (slim_graph_capture_outer): they are written as plain computed values
 * and left out of the inputs, and so are the implicit inputs of nodes. */
static void write_graph(const slim_graph *g, int n_captured, strtab *st, uint32_t *next_tensor,
                        wbuf *b)
{
    const int formal = g->n_inputs - n_captured;
    int *map = malloc(sizeof(int) * (size_t)(g->n_values > 0 ? g->n_values : 1));
    if (!map) {
        b->oom = true;
        return;
    }
    put_u32(b, (uint32_t)live_values(g, map));
    for (int v = 0; v < g->n_values; v++) {
        const slim_value *val = &g->values[v];
        if (map[v] < 0)
            continue;
        bool captured = false;
        for (int i = formal; i < g->n_inputs && !captured; i++)
            captured = g->inputs[i] == v;
        put_u32(b, intern(st, val->name));
        put_u8(b, (uint8_t)(captured ? SLIM_VALUE_INTERMEDIATE : val->kind));
        put_u8(b, (uint8_t)(val->info.dtype ? slim_dtype_to_onnx(val->info.dtype) : 0));
        int ndim = val->info.ndim < 0 || val->info.ndim > SLIM_MAX_DIMS ? -1 : val->info.ndim;
        put_u8(b, (uint8_t)(int8_t)ndim);
        put_u8(b, value_type_byte(&val->info));
        for (int d = 0; d < ndim; d++) {
            put_i64(b, val->info.dims[d]);
            put_u32(b, intern(st, val->info.dim_names[d]));
        }
        put_u32(b, val->kind == SLIM_VALUE_INITIALIZER ? (*next_tensor)++ : SLIM_FORMAT_NONE);
    }

    put_u32(b, (uint32_t)formal);
    for (int i = 0; i < formal; i++)
        put_u32(b, (uint32_t)map[g->inputs[i]]);
    put_u32(b, (uint32_t)g->n_outputs);
    for (int i = 0; i < g->n_outputs; i++)
        put_u32(b, (uint32_t)map[g->outputs[i]]);

    put_u32(b, (uint32_t)g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        const int n_in = n->n_in - n->n_implicit;
        put_u32(b, intern(st, n->name));
        put_u32(b, intern(st, n->op_type));
        put_u32(b, intern(st, n->domain));
        put_i32(b, n->opset);
        put_u32(b, (uint32_t)n_in);
        for (int k = 0; k < n_in; k++)
            put_i32(b, mapped(map, n->in[k]));
        put_u32(b, (uint32_t)n->n_out);
        for (int k = 0; k < n->n_out; k++)
            put_i32(b, mapped(map, n->out[k]));
        put_u32(b, (uint32_t)n->n_attrs);
        for (int a = 0; a < n->n_attrs; a++) {
            const slim_attr *at = &n->attrs[a];
            put_u32(b, intern(st, at->name));
            put_u8(b, (uint8_t)(at->type == SLIM_ATTR_GRAPH && !at->g ? SLIM_ATTR_UNDEFINED
                                                                      : at->type));
            switch (at->type) {
            case SLIM_ATTR_FLOAT: put_f32(b, at->f); break;
            case SLIM_ATTR_INT: put_i64(b, at->i); break;
            case SLIM_ATTR_STRING: put_u32(b, intern(st, at->s ? at->s : "")); break;
            case SLIM_ATTR_TENSOR: put_u32(b, (*next_tensor)++); break;
            case SLIM_ATTR_FLOATS:
                put_u32(b, (uint32_t)at->n);
                for (int k = 0; k < at->n; k++)
                    put_f32(b, at->floats[k]);
                break;
            case SLIM_ATTR_INTS:
                put_u32(b, (uint32_t)at->n);
                for (int k = 0; k < at->n; k++)
                    put_i64(b, at->ints[k]);
                break;
            case SLIM_ATTR_STRINGS:
                put_u32(b, (uint32_t)at->n);
                for (int k = 0; k < at->n; k++)
                    put_u32(b, intern(st, at->strings[k]));
                break;
            case SLIM_ATTR_GRAPH:
                if (at->g) { /* version 2: the subgraph itself */
                    put_u32(b, intern(st, at->g->name ? at->g->name : ""));
                    put_i32(b, at->g->opset);
                    write_graph(at->g, n->n_implicit, st, next_tensor, b);
                }
                break;
            default: break;
            }
        }
    }
    free(map);
}

/* The metadata after the string table, with strings as ids. */
static void write_body(const slim_graph *g, strtab *st, const wtensors *wt, wbuf *b)
{
    put_i64(b, g->ir_version);
    put_u32(b, intern(st, g->name ? g->name : ""));
    put_u32(b, intern(st, g->producer_name ? g->producer_name : ""));
    put_i32(b, g->opset);

    put_u32(b, wt->n);
    for (uint32_t i = 0; i < wt->n; i++) {
        const slim_tensor *t = wt->ts[i];
        put_u8(b, (uint8_t)slim_dtype_to_onnx(t->dtype));
        put_u8(b, t->dtype == SLIM_STRING ? SLIM_ENCODING_STRINGS : SLIM_ENCODING_RAW);
        put_u8(b, (uint8_t)t->ndim);
        put_u8(b, 0);
        for (int d = 0; d < t->ndim; d++)
            put_i64(b, t->dims[d]);
        put_u64(b, wt->offsets[i]);
        put_u64(b, slim_format_stored_bytes(t));
    }
    uint32_t next_tensor = 0;
    write_graph(g, 0, st, &next_tensor, b);
}

static bool write_all(FILE *f, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, f) == n;
}

static bool write_zeros(FILE *f, uint64_t n)
{
    static const uint8_t zeros[4096];
    while (n) {
        size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        if (!write_all(f, zeros, k))
            return false;
        n -= k;
    }
    return true;
}

/* A tensor's bytes in pieces, so a progress callback hears of a large
 * model as it goes, not once at the end. */
static bool write_strings(FILE *f, const slim_tensor *t, uint64_t *done)
{
    const slim_str *e = t->data;
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        uint8_t len[4] = {(uint8_t)e[i].len, (uint8_t)(e[i].len >> 8),
                          (uint8_t)(e[i].len >> 16), (uint8_t)(e[i].len >> 24)};
        if (!write_all(f, len, 4))
            return false;
    }
    for (int64_t i = 0; i < n; i++)
        if (!write_all(f, e[i].ptr, (size_t)e[i].len))
            return false;
    *done += slim_format_stored_bytes(t);
    return true;
}

static bool write_tensor(FILE *f, const slim_tensor *t, uint64_t *done, uint64_t total,
                         slim_format_progress_fn progress, void *user)
{
    if (t->dtype == SLIM_STRING)
        return write_strings(f, t, done);
    const uint8_t *p = t->data;
    size_t n = slim_tensor_nbytes(t);
    const size_t piece = (size_t)8 << 20;
    while (n) {
        size_t k = n < piece ? n : piece;
        if (!write_all(f, p, k))
            return false;
        p += k;
        n -= k;
        *done += k;
        if (progress)
            progress(*done, total, user);
    }
    return true;
}

slim_status slim_format_write(const slim_graph *g, const char *path, slim_err *err)
{
    return slim_format_write_progress(g, path, NULL, NULL, err);
}

slim_status slim_format_write_progress(const slim_graph *g, const char *path,
                                       slim_format_progress_fn progress, void *user,
                                       slim_err *err)
{
    strtab st = {0};
    wtensors wt = {0};
    wbuf body = {0}, meta = {0};
    bool nested = false;
    FILE *f = NULL;
    char tmp[4096];
    tmp[0] = 0;
    /* The file is written beside the path and renamed over it: over a
     * device or a folder that would replace it (as root, /dev/null became
     * a 14 MB file), so only a regular file (or none) is written over. */
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))
        return slim_errf(err, SLIM_EINVAL,
                         "cannot write a model to \"%s\": it exists and is not a regular file",
                         path);
    slim_status s = collect(g, &wt, &nested, err);
    if (s)
        goto done;
    write_body(g, &st, &wt, &body);
    /* The string table goes first; its ids were handed out while writing
     * the body, so it is written after and placed before. */
    put_u32(&meta, st.n);
    for (uint32_t i = 0; i < st.n; i++) {
        uint32_t len = (uint32_t)strlen(st.strs[i]);
        put_u32(&meta, len);
        put(&meta, st.strs[i], len);
    }
    put(&meta, body.p, body.n);
    if (st.oom || body.oom || meta.oom) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory writing the model");
        goto done;
    }
    uint64_t meta_off = SLIM_FORMAT_HEADER_SIZE;
    uint64_t data_size = wt.end;
    bool small = data_size < SLIM_FORMAT_SMALL_DATA;
    uint64_t align = small ? SLIM_FORMAT_TENSOR_ALIGN : SLIM_FORMAT_DATA_ALIGN;
    uint64_t data_off = (meta_off + meta.n + align - 1) / align * align;
    uint8_t hdr[SLIM_FORMAT_HEADER_SIZE] = {0};
    /* Version 1 readers keep reading files without subgraphs, and older
     * readers refuse a small model's data section by its version. */
    uint32_t version = has_strings(g) ? 5 : small ? 4 : has_containers(g) ? 3 : nested ? 2 : 1;
    uint32_t hsize = SLIM_FORMAT_HEADER_SIZE;
    uint64_t meta_size = meta.n, file_size = data_off + data_size;
    uint32_t meta_crc = slim_format_crc32(0, meta.p, meta.n);
    memcpy(hdr, SLIM_FORMAT_MAGIC, SLIM_FORMAT_MAGIC_LEN);
    memcpy(hdr + 8, &version, 4);
    memcpy(hdr + 12, &hsize, 4);
    memcpy(hdr + 16, &meta_off, 8);
    memcpy(hdr + 24, &meta_size, 8);
    memcpy(hdr + 32, &data_off, 8);
    memcpy(hdr + 40, &data_size, 8);
    memcpy(hdr + 48, &file_size, 8);
    memcpy(hdr + 56, &meta_crc, 4);
    uint32_t hcrc = slim_format_crc32(0, hdr, 60);
    memcpy(hdr + 60, &hcrc, 4);

    /* A unique name: writers in other containers sharing the folder may
     * have the same pid. */
    int fd = -1;
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= sizeof(tmp) ||
        (fd = mkstemp(tmp)) < 0 || !(f = fdopen(fd, "wb"))) {
        s = slim_errf(err, SLIM_EIO, "cannot create a file beside \"%s\": %s", path,
                      strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        tmp[0] = 0;
        goto done;
    }
    /* mkstemp makes it 0600; the model is as readable as any other file. */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    bool ok = write_all(f, hdr, sizeof(hdr)) && write_all(f, meta.p, meta.n) &&
              write_zeros(f, data_off - meta_off - meta.n);
    uint64_t at = 0, done_bytes = 0, tensor_bytes = 0;
    for (uint32_t i = 0; i < wt.n; i++)
        tensor_bytes += slim_format_stored_bytes(wt.ts[i]);
    for (uint32_t i = 0; ok && i < wt.n; i++) {
        ok = write_zeros(f, wt.offsets[i] - at) &&
             write_tensor(f, wt.ts[i], &done_bytes, tensor_bytes, progress, user);
        at = wt.offsets[i] + slim_format_stored_bytes(wt.ts[i]);
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0)
        ok = false;
    f = NULL;
    if (!ok) {
        s = slim_errf(err, SLIM_EIO, "cannot write \"%s\": %s", tmp, strerror(errno));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        s = slim_errf(err, SLIM_EIO, "cannot rename \"%s\" to \"%s\": %s", tmp, path,
                      strerror(errno));
        goto done;
    }
    tmp[0] = 0;
done:
    if (f)
        fclose(f);
    if (tmp[0])
        unlink(tmp);
    free(st.strs);
    free(st.slots);
    free(wt.ts);
    free(wt.offsets);
    free(body.p);
    free(meta.p);
    return s;
}

/* Weights and nodes of the written file against the model's graph. */
int slim_format_verify(const slim_graph *a, const slim_graph *b, char *why, size_t cap)
{
    /* Values no node uses are not written (live_values). */
    int *map = malloc(sizeof(int) * (size_t)(a->n_values > 0 ? a->n_values : 1));
    if (!map) {
        snprintf(why, cap, "out of memory");
        return 1;
    }
    int n_live = live_values(a, map);
    if (a->n_nodes != b->n_nodes || n_live != b->n_values || a->n_inputs != b->n_inputs ||
        a->n_outputs != b->n_outputs) {
        snprintf(why, cap, "%d nodes and %d values written, %d and %d read back", a->n_nodes,
                 n_live, b->n_nodes, b->n_values);
        free(map);
        return 1;
    }
    for (int v = 0; v < a->n_values; v++) {
        const slim_value *x = &a->values[v];
        if (map[v] < 0)
            continue;
        int w = slim_graph_find_value(b, x->name);
        if (w < 0) {
            snprintf(why, cap, "value \"%s\" is missing", x->name);
            free(map);
            return 1;
        }
        const slim_value *y = &b->values[w];
        if (x->kind == SLIM_VALUE_INITIALIZER && x->init.dtype == SLIM_STRING) {
            /* Slots point at each tensor's own bytes: compare the strings. */
            bool same = y->kind == x->kind && y->init.dtype == SLIM_STRING &&
                        slim_tensor_numel(&x->init) == slim_tensor_numel(&y->init);
            for (int64_t i = 0, n = slim_tensor_numel(&x->init); same && i < n; i++) {
                size_t la, lb;
                const char *sa = slim_tensor_string_get(&x->init, i, &la);
                const char *sb = slim_tensor_string_get(&y->init, i, &lb);
                same = la == lb && (!la || memcmp(sa, sb, la) == 0);
            }
            if (!same) {
                snprintf(why, cap, "weight \"%s\" differs", x->name);
                free(map);
                return 1;
            }
            continue;
        }
        if (x->kind != y->kind || (x->kind == SLIM_VALUE_INITIALIZER &&
            (slim_tensor_nbytes(&x->init) != slim_tensor_nbytes(&y->init) ||
             x->init.dtype != y->init.dtype ||
             (slim_tensor_nbytes(&x->init) &&
              memcmp(x->init.data, y->init.data, slim_tensor_nbytes(&x->init)) != 0)))) {
            snprintf(why, cap, "weight \"%s\" differs", x->name);
            free(map);
            return 1;
        }
    }
    free(map);
    return 0;
}
