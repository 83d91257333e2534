/*
 * slim_reader.c - .slim file -> graph IR, the weights used in place.
 *
 * The file is untrusted: every field is read through a bounds-checked
 * cursor, every count is checked against the bytes left before anything is
 * allocated for it, every id against its table, and every tensor's offset,
 * size and alignment against the data section (and no two tensors may
 * overlap). Failures name the field and the value.
 */
#include "slim_format.h"
#include "device.h"
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- CRC-32 ---------------------------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_fill(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

/* The table is filled once, under pthread_once: with a plain "ready" flag
 * the compiler may store the flag before the table, and a thread loading
 * another file at the same moment would check it against zeros and refuse
 * a sound file as damaged. */
uint32_t slim_format_crc32(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_table_fill);
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

bool slim_format_sniff(const void *head, size_t n)
{
    return n >= SLIM_FORMAT_MAGIC_LEN && memcmp(head, SLIM_FORMAT_MAGIC, SLIM_FORMAT_MAGIC_LEN) == 0;
}

/* ---- the cursor ------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *p;
    size_t n, pos;
    slim_err *err;
    slim_status st;          /* the first failure; reads after it return 0 */
} cursor;

static bool fail(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(cursor *c, const char *fmt, ...)
{
    if (c->st)
        return false;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->st = slim_errf(c->err, SLIM_EPARSE, "not a valid .slim file: %s (metadata byte %zu)", msg,
                      c->pos);
    return false;
}

static bool take(cursor *c, void *out, size_t k, const char *what)
{
    if (c->st)
        return false;
    if (c->n - c->pos < k)
        return fail(c, "the metadata ends inside %s", what);
    memcpy(out, c->p + c->pos, k); /* the file is little-endian, as are the targets */
    c->pos += k;
    return true;
}

#define READ_FN(name, type)                                        \
    static type name(cursor *c, const char *what)                  \
    {                                                              \
        type v = 0;                                                \
        take(c, &v, sizeof(v), what);                              \
        return v;                                                  \
    }
READ_FN(rd_u8, uint8_t)
READ_FN(rd_u32, uint32_t)
READ_FN(rd_i32, int32_t)
READ_FN(rd_i64, int64_t)
READ_FN(rd_u64, uint64_t)
READ_FN(rd_f32, float)
#undef READ_FN

/* A count of elements of at least `each` bytes: no more than the bytes
 * left could hold, so a forged count cannot make us allocate much. */
static uint32_t rd_count(cursor *c, size_t each, const char *what)
{
    uint32_t n = rd_u32(c, what);
    if (!c->st && (uint64_t)n * each > c->n - c->pos) {
        fail(c, "%s: %u entries cannot fit in the %zu bytes left", what, n, c->n - c->pos);
        return 0;
    }
    return n;
}

/* ---- building ------------------------------------------------------------- */

typedef struct reader {
    cursor c;
    const uint8_t *data;     /* the data section */
    uint64_t data_size;
    slim_buffer *owner;
    char **strs;
    uint32_t n_strs;
    slim_tensor *tensors;    /* views into the data section */
    uint8_t *tensor_used;    /* taken by a value or an attribute */
    uint32_t n_tensors;
    slim_graph *g;           /* the graph being read: the model's or a subgraph */
    uint32_t version;        /* 2 and up: GRAPH attributes carry their subgraph */
    int depth;               /* subgraph nesting so far */
} reader;

/* Subgraphs nest at most this deep (as from ONNX, onnx_loader.c). */
#define SLIM_FORMAT_MAX_DEPTH 16

static void read_values(reader *r);
static bool read_ids(reader *r, int *n_out, int **ids, bool inputs);
static void read_nodes(reader *r);

/* String id -> text; "none" gives NULL, which the caller may refuse. */
static const char *rd_str(reader *r, const char *what, bool allow_none)
{
    uint32_t id = rd_u32(&r->c, what);
    if (r->c.st)
        return NULL;
    if (id == SLIM_FORMAT_NONE && allow_none)
        return NULL;
    if (id >= r->n_strs) {
        fail(&r->c, "%s: string %u of %u", what, id, r->n_strs);
        return NULL;
    }
    return r->strs[id];
}

static void read_strings(reader *r)
{
    uint32_t n = rd_count(&r->c, 4, "the string table");
    r->strs = calloc(n ? n : 1, sizeof(char *));
    if (!r->strs) {
        r->c.st = slim_errf(r->c.err, SLIM_ENOMEM, "out of memory reading the string table");
        return;
    }
    for (uint32_t i = 0; i < n && !r->c.st; i++) {
        uint32_t len = rd_u32(&r->c, "a string's length");
        if (r->c.st)
            break;
        if (len > r->c.n - r->c.pos) {
            fail(&r->c, "string %u: %u bytes, past the end of the metadata", i, len);
            break;
        }
        const char *s = (const char *)r->c.p + r->c.pos;
        if (memchr(s, 0, len)) {
            fail(&r->c, "string %u holds a NUL byte", i);
            break;
        }
        if (!(r->strs[i] = strndup(s, len))) {
            r->c.st = slim_errf(r->c.err, SLIM_ENOMEM, "out of memory reading the string table");
            break;
        }
        r->c.pos += len;
        r->n_strs = i + 1;
    }
}

/* A STRINGS tensor: its u32 lengths checked against its size, then the
 * elements copied into a string tensor of its own (strings are small
 * weights; a view into the mapping would outlive nothing useful). */
static bool read_string_tensor(reader *r, uint32_t i, slim_tensor *t, uint64_t size)
{
    const uint8_t *p = t->data;
    int64_t numel = slim_tensor_numel(t);
    uint64_t total = 4 * (uint64_t)numel;
    for (int64_t k = 0; k < numel; k++) {
        uint32_t len = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 |
                       (uint32_t)p[4 * k + 2] << 16 | (uint32_t)p[4 * k + 3] << 24;
        if (len > SLIM_STRING_MAX_LEN || len > size - total)
            return fail(&r->c, "tensor %u: string %lld has %u bytes, past the tensor's %llu", i,
                        (long long)k, len, (unsigned long long)size);
        total += len;
    }
    if (total != size)
        return fail(&r->c, "tensor %u: %llu bytes hold %llu of strings and lengths", i,
                    (unsigned long long)size, (unsigned long long)total);
    slim_tensor s = {.dtype = SLIM_STRING, .ndim = t->ndim};
    memcpy(s.dims, t->dims, sizeof(s.dims));
    slim_status st = slim_tensor_alloc(&s, r->c.err);
    if (!st)
        st = slim_tensor_string_reserve(&s, size - 4 * (uint64_t)numel, r->c.err);
    const char *bytes = (const char *)p + 4 * numel;
    for (int64_t k = 0; !st && k < numel; k++) {
        size_t len = (size_t)p[4 * k] | (size_t)p[4 * k + 1] << 8 | (size_t)p[4 * k + 2] << 16 |
                     (size_t)p[4 * k + 3] << 24;
        st = slim_tensor_string_set(&s, k, bytes, len, r->c.err);
        bytes += len;
    }
    if (st) {
        slim_tensor_release(&s);
        r->c.st = st;
        return false;
    }
    *t = s;
    return true;
}

/* Overlap check: offsets sorted, each ends before the next begins. */
static int cmp_range(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void read_tensors(reader *r)
{
    cursor *c = &r->c;
    uint32_t n = rd_count(c, 4 + 16, "the tensor table");
    r->tensors = calloc(n ? n : 1, sizeof(slim_tensor));
    r->tensor_used = calloc(n ? n : 1, 1);
    uint64_t *ranges = calloc(n ? n : 1, 2 * sizeof(uint64_t));
    if (!r->tensors || !r->tensor_used || !ranges) {
        free(ranges);
        c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory reading the tensor table");
        return;
    }
    r->n_tensors = n;
    for (uint32_t i = 0; i < n && !c->st; i++) {
        slim_tensor *t = &r->tensors[i];
        int code = rd_u8(c, "a tensor's dtype");
        int enc = rd_u8(c, "a tensor's encoding");
        int ndim = rd_u8(c, "a tensor's rank");
        rd_u8(c, "a reserved byte");
        t->dtype = slim_dtype_from_onnx(code);
        if (c->st)
            break;
        if (t->dtype == SLIM_DTYPE_UNDEFINED) {
            fail(c, "tensor %u: unknown dtype code %d", i, code);
            break;
        }
        bool strings = t->dtype == SLIM_STRING;
        if (enc != (strings ? SLIM_ENCODING_STRINGS : SLIM_ENCODING_RAW) ||
            (strings && r->version < 5)) {
            fail(c, "tensor %u: encoding %d is not defined for %s in format version %u", i, enc,
                 slim_dtype_name(t->dtype), r->version);
            break;
        }
        if (ndim > SLIM_MAX_DIMS) {
            fail(c, "tensor %u: rank %d, at most %d", i, ndim, SLIM_MAX_DIMS);
            break;
        }
        t->ndim = ndim;
        uint64_t numel = 1;
        for (int d = 0; d < ndim; d++) {
            t->dims[d] = rd_i64(c, "a tensor's dims");
            if (!c->st && (t->dims[d] < 0 || t->dims[d] > ((int64_t)1 << 40))) {
                fail(c, "tensor %u: dim %d is %lld", i, d, (long long)t->dims[d]);
                break;
            }
            if (!c->st && __builtin_mul_overflow(numel, (uint64_t)t->dims[d], &numel)) {
                fail(c, "tensor %u: too many elements", i);
                break;
            }
        }
        uint64_t off = rd_u64(c, "a tensor's offset"), size = rd_u64(c, "a tensor's size");
        if (c->st)
            break;
        uint64_t want;
        if (strings ? (numel > size / 4)
                    : (__builtin_mul_overflow(numel, (uint64_t)slim_dtype_size(t->dtype), &want) ||
                       want != size)) {
            fail(c, "tensor %u: %llu bytes for %llu elements of %s", i, (unsigned long long)size,
                 (unsigned long long)numel, slim_dtype_name(t->dtype));
            break;
        }
        if (off % SLIM_FORMAT_TENSOR_ALIGN || off > r->data_size || size > r->data_size - off) {
            fail(c, "tensor %u: bytes [%llu, +%llu) are not %d-aligned inside the %llu-byte data "
                 "section", i, (unsigned long long)off, (unsigned long long)size,
                 SLIM_FORMAT_TENSOR_ALIGN, (unsigned long long)r->data_size);
            break;
        }
        t->data = size ? (void *)(r->data + off) : NULL;
        if (strings && !read_string_tensor(r, i, t, size))
            break;
        ranges[2 * i] = off;
        ranges[2 * i + 1] = size;
    }
    if (!c->st) {
        qsort(ranges, n, 2 * sizeof(uint64_t), cmp_range);
        for (uint32_t i = 1; i < n; i++)
            if (ranges[2 * (i - 1) + 1] && ranges[2 * i + 1] &&
                ranges[2 * (i - 1)] + ranges[2 * (i - 1) + 1] > ranges[2 * i]) {
                fail(c, "two tensors overlap at data byte %llu", (unsigned long long)ranges[2 * i]);
                break;
            }
    }
    free(ranges);
}

/* Tensor id -> a view that holds a reference to the file; each tensor may
 * be used once (a weight or an attribute), so no two owners share it. */
static bool take_tensor(reader *r, uint32_t id, slim_tensor *out, const char *what)
{
    if (id >= r->n_tensors)
        return fail(&r->c, "%s: tensor %u of %u", what, id, r->n_tensors);
    if (r->tensor_used[id])
        return fail(&r->c, "%s: tensor %u is already used", what, id);
    r->tensor_used[id] = 1;
    *out = r->tensors[id];
    if (out->dtype == SLIM_STRING) {
        /* Its own buffer (read_string_tensor), handed over. */
        r->tensors[id].buf = NULL;
        return true;
    }
    out->buf = r->owner;
    slim_buffer_ref(r->owner);
    return true;
}

static void read_values(reader *r)
{
    cursor *c = &r->c;
    uint32_t n = rd_count(c, 4 + 4 + 4, "the value table");
    for (uint32_t i = 0; i < n && !c->st; i++) {
        const char *name = rd_str(r, "a value's name", false);
        int kind = rd_u8(c, "a value's kind");
        int dcode = rd_u8(c, "a value's dtype");
        int8_t ndim = (int8_t)rd_u8(c, "a value's rank");
        int type = rd_u8(c, "a value's type");
        if (c->st)
            return;
        if (r->version < 3) /* a reserved byte before */
            type = 0;
        int vkind = type & 3;
        bool seq_in_opt = type & SLIM_FORMAT_TYPE_SEQ_IN_OPTIONAL;
        if (type & ~7 || vkind > SLIM_KIND_OPTIONAL || (seq_in_opt && vkind != SLIM_KIND_OPTIONAL)) {
            fail(c, "value %u (\"%s\"): unknown value type %d", i, name, type);
            return;
        }
        if (!name[0] || slim_graph_find_value(r->g, name) >= 0) {
            fail(c, "value %u: name \"%s\" is empty or used twice", i, name);
            return;
        }
        if (kind > SLIM_VALUE_INITIALIZER || ndim < -1 || ndim > SLIM_MAX_DIMS) {
            fail(c, "value %u (\"%s\"): kind %d, rank %d", i, name, kind, ndim);
            return;
        }
        int v = slim_graph_value(r->g, name);
        if (v != (int)i) {
            c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory reading the value table");
            return;
        }
        slim_value *val = &r->g->values[v];
        val->kind = (slim_value_kind)kind;
        val->info.dtype = slim_dtype_from_onnx(dcode);
        val->info.ndim = ndim;
        val->info.kind = (slim_kind)vkind;
        val->info.elem_kind = seq_in_opt ? SLIM_KIND_SEQUENCE : SLIM_KIND_TENSOR;
        for (int d = 0; d < ndim && !c->st; d++) {
            val->info.dims[d] = rd_i64(c, "a value's dims");
            const char *dn = rd_str(r, "a dim's name", true);
            /* Names point into the graph's own copy of the string. */
            if (dn && !(val->info.dim_names[d] = strdup(dn)))
                c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
        }
        uint32_t tid = rd_u32(c, "a value's tensor");
        if (c->st)
            return;
        if ((kind == SLIM_VALUE_INITIALIZER) != (tid != SLIM_FORMAT_NONE)) {
            fail(c, "value %u (\"%s\"): %s", i, name,
                 kind == SLIM_VALUE_INITIALIZER ? "an initializer without a tensor"
                                                : "a tensor on a value that is no initializer");
            return;
        }
        if (tid != SLIM_FORMAT_NONE && !take_tensor(r, tid, &val->init, "an initializer"))
            return;
    }
}

static bool read_ids(reader *r, int *n_out, int **ids, bool inputs)
{
    cursor *c = &r->c;
    uint32_t n = rd_count(c, 4, inputs ? "the graph inputs" : "the graph outputs");
    for (uint32_t i = 0; i < n && !c->st; i++) {
        uint32_t v = rd_u32(c, "a graph input or output");
        if (c->st)
            break;
        if (v >= (uint32_t)r->g->n_values)
            return fail(c, "graph %s %u: value %u of %d", inputs ? "input" : "output", i, v,
                        r->g->n_values);
        slim_status st = inputs ? slim_graph_add_input(r->g, (int)v)
                                : slim_graph_add_output(r->g, (int)v);
        if (st) {
            c->st = slim_errf(c->err, st, "out of memory");
            break;
        }
    }
    (void)n_out;
    (void)ids;
    return !c->st;
}

static bool read_attr(reader *r, slim_attr *a)
{
    cursor *c = &r->c;
    const char *name = rd_str(r, "an attribute's name", false);
    int type = rd_u8(c, "an attribute's type");
    if (c->st)
        return false;
    if (!(a->name = strdup(name))) {
        c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
        return false;
    }
    a->type = (slim_attr_type)type;
    switch (type) {
    case SLIM_ATTR_UNDEFINED:
        return true;
    case SLIM_ATTR_GRAPH: {
        if (r->version < 2) /* no payload: refused at load, as from ONNX */
            return true;
        if (r->depth >= SLIM_FORMAT_MAX_DEPTH)
            return fail(c, "attribute \"%s\": subgraphs nest more than %d deep", a->name,
                        SLIM_FORMAT_MAX_DEPTH);
        const char *gname = rd_str(r, "a subgraph's name", false);
        int32_t opset = rd_i32(c, "a subgraph's opset");
        if (c->st)
            return false;
        if (!(a->g = slim_graph_new()) || !(a->g->name = strdup(gname))) {
            c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
            return false;
        }
        a->g->opset = opset;
        /* The subgraph's values, inputs, outputs and nodes, read as the
         * model's are; its outer-scope values are captured by the caller. */
        slim_graph *parent = r->g;
        r->g = a->g;
        r->depth++;
        read_values(r);
        read_ids(r, NULL, NULL, true);
        read_ids(r, NULL, NULL, false);
        read_nodes(r);
        r->depth--;
        r->g = parent;
        return !c->st;
    }
    case SLIM_ATTR_FLOAT:
        a->f = rd_f32(c, "a FLOAT attribute");
        return !c->st;
    case SLIM_ATTR_INT:
        a->i = rd_i64(c, "an INT attribute");
        return !c->st;
    case SLIM_ATTR_STRING: {
        const char *s = rd_str(r, "a STRING attribute", false);
        if (!c->st && !(a->s = strdup(s)))
            c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
        return !c->st;
    }
    case SLIM_ATTR_TENSOR: {
        uint32_t tid = rd_u32(c, "a TENSOR attribute");
        if (c->st)
            return false;
        if (!(a->t = calloc(1, sizeof(slim_tensor)))) {
            c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
            return false;
        }
        return take_tensor(r, tid, a->t, "a TENSOR attribute");
    }
    case SLIM_ATTR_FLOATS:
    case SLIM_ATTR_INTS:
    case SLIM_ATTR_STRINGS: {
        size_t each = type == SLIM_ATTR_INTS ? 8 : 4;
        uint32_t n = rd_count(c, each, "a list attribute");
        if (c->st)
            return false;
        a->n = (int)n;
        void *arr = calloc(n ? n : 1, type == SLIM_ATTR_FLOATS ? sizeof(float)
                                      : type == SLIM_ATTR_INTS ? sizeof(int64_t) : sizeof(char *));
        if (!arr) {
            c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
            return false;
        }
        if (type == SLIM_ATTR_FLOATS)
            a->floats = arr;
        else if (type == SLIM_ATTR_INTS)
            a->ints = arr;
        else
            a->strings = arr;
        for (uint32_t k = 0; k < n && !c->st; k++) {
            if (type == SLIM_ATTR_FLOATS)
                a->floats[k] = rd_f32(c, "a FLOATS attribute");
            else if (type == SLIM_ATTR_INTS)
                a->ints[k] = rd_i64(c, "an INTS attribute");
            else {
                const char *s = rd_str(r, "a STRINGS attribute", false);
                if (!c->st && !(a->strings[k] = strdup(s)))
                    c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
            }
        }
        return !c->st;
    }
    default:
        return fail(c, "attribute \"%s\": unknown type %d", a->name, type);
    }
}

/* Value id -> its name for slim_graph_add_node; -1 is the empty slot. */
static const char *id_name(reader *r, int32_t id, const char *what)
{
    if (id == -1)
        return "";
    if (id < 0 || id >= r->g->n_values) {
        fail(&r->c, "%s: value %d of %d", what, id, r->g->n_values);
        return NULL;
    }
    return r->g->values[id].name;
}

static void read_nodes(reader *r)
{
    cursor *c = &r->c;
    uint32_t n = rd_count(c, 4 * 7, "the node table");
    const char **names = NULL;
    for (uint32_t i = 0; i < n && !c->st; i++) {
        const char *name = rd_str(r, "a node's name", false);
        const char *op = rd_str(r, "a node's op_type", false);
        const char *domain = rd_str(r, "a node's domain", false);
        int32_t opset = rd_i32(c, "a node's opset");
        uint32_t n_in = rd_count(c, 4, "a node's inputs");
        if (c->st)
            break;
        if (!op[0]) {
            fail(c, "node %u has no op_type", i);
            break;
        }
        const char **ins = realloc(names, sizeof(char *) * (n_in + 1));
        if (!ins) {
            c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
            break;
        }
        names = ins;
        for (uint32_t k = 0; k < n_in && !c->st; k++)
            ins[k] = id_name(r, rd_i32(c, "a node input"), "a node input");
        uint32_t n_out = rd_count(c, 4, "a node's outputs");
        if (c->st)
            break;
        const char **outs = malloc(sizeof(char *) * (n_out + 1));
        if (!outs) {
            c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
            break;
        }
        for (uint32_t k = 0; k < n_out && !c->st; k++)
            outs[k] = id_name(r, rd_i32(c, "a node output"), "a node output");
        int id = c->st ? -1 : slim_graph_add_node(r->g, name, op, domain, (int)n_in, ins,
                                                  (int)n_out, outs);
        free(outs);
        if (c->st)
            break;
        if (id < 0) {
            c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory adding node %u", i);
            break;
        }
        slim_node *nd = &r->g->nodes[id];
        nd->opset = opset;
        uint32_t n_attrs = rd_count(c, 5, "a node's attributes");
        if (c->st)
            break;
        if (!(nd->attrs = calloc(n_attrs ? n_attrs : 1, sizeof(slim_attr)))) {
            c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
            break;
        }
        bool has_graph = false;
        for (uint32_t a = 0; a < n_attrs && !c->st; a++) {
            nd->n_attrs++;
            read_attr(r, &nd->attrs[a]);
            has_graph = has_graph || nd->attrs[a].g;
        }
        /* As the ONNX loader does: outer-scope values become implicit
         * inputs (they are not stored; see docs/format.md). */
        if (!c->st && has_graph && (c->st = slim_graph_capture_outer(r->g, id, c->err)))
            break;
    }
    free(names);
}

static void read_graph_header(reader *r)
{
    cursor *c = &r->c;
    slim_graph *g = r->g;
    g->ir_version = rd_i64(c, "the IR version");
    const char *name = rd_str(r, "the graph's name", false);
    const char *producer = rd_str(r, "the producer's name", false);
    g->opset = rd_i32(c, "the default opset");
    if (c->st)
        return;
    if (!(g->name = strdup(name)) || !(g->producer_name = strdup(producer)))
        c->st = slim_errf(c->err, SLIM_ENOMEM, "out of memory");
}

slim_status slim_format_load_buffer(const void *data, size_t size, slim_buffer *owner,
                                    slim_graph **out, slim_err *err)
{
    *out = NULL;
    const uint8_t *p = data;
    if (size < SLIM_FORMAT_HEADER_SIZE || !slim_format_sniff(p, size))
        return slim_errf(err, SLIM_EPARSE, "not a .slim file: %s",
                         size < SLIM_FORMAT_HEADER_SIZE ? "shorter than its header"
                                                        : "the magic number is wrong");
    uint32_t version, header_size, meta_crc, header_crc;
    uint64_t meta_off, meta_size, data_off, data_size, file_size;
    memcpy(&version, p + 8, 4);
    memcpy(&header_size, p + 12, 4);
    memcpy(&meta_off, p + 16, 8);
    memcpy(&meta_size, p + 24, 8);
    memcpy(&data_off, p + 32, 8);
    memcpy(&data_size, p + 40, 8);
    memcpy(&file_size, p + 48, 8);
    memcpy(&meta_crc, p + 56, 4);
    memcpy(&header_crc, p + 60, 4);
    if (slim_format_crc32(0, p, 60) != header_crc)
        return slim_errf(err, SLIM_EPARSE, "not a valid .slim file: the header's checksum is wrong");
    if (version < 1 || version > SLIM_FORMAT_VERSION)
        return slim_errf(err, SLIM_EUNSUPPORTED, ".slim format version %u; this slimserve reads "
                         "versions 1 to %d (convert the model again)", version, SLIM_FORMAT_VERSION);
    if (header_size != SLIM_FORMAT_HEADER_SIZE || file_size != size)
        return slim_errf(err, SLIM_EPARSE, "not a valid .slim file: it is %zu bytes but its header "
                         "says %llu (truncated or extended?)", size, (unsigned long long)file_size);
    if (meta_off != SLIM_FORMAT_HEADER_SIZE || meta_size > size - meta_off ||
        data_off % (version >= 4 ? SLIM_FORMAT_TENSOR_ALIGN : SLIM_FORMAT_DATA_ALIGN) ||
        data_off < meta_off + meta_size || data_off > size ||
        data_size != size - data_off)
        return slim_errf(err, SLIM_EPARSE, "not a valid .slim file: sections [%llu, +%llu) and "
                         "[%llu, +%llu) do not fit a %zu-byte file as the format lays them out",
                         (unsigned long long)meta_off, (unsigned long long)meta_size,
                         (unsigned long long)data_off, (unsigned long long)data_size, size);
    if (slim_format_crc32(0, p + meta_off, meta_size) != meta_crc)
        return slim_errf(err, SLIM_EPARSE, "not a valid .slim file: the metadata's checksum is "
                         "wrong (the file is corrupt)");
    reader r = {.c = {.p = p + meta_off, .n = meta_size, .err = err},
                .data = p + data_off, .data_size = data_size, .owner = owner,
                .version = version};
    if (!(r.g = slim_graph_new()))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    read_strings(&r);
    read_graph_header(&r);
    read_tensors(&r);
    read_values(&r);
    read_ids(&r, NULL, NULL, true);
    read_ids(&r, NULL, NULL, false);
    read_nodes(&r);
    if (!r.c.st && r.c.pos != r.c.n)
        fail(&r.c, "%zu bytes follow the node table", r.c.n - r.c.pos);
    for (uint32_t i = 0; !r.c.st && i < r.n_tensors; i++)
        if (!r.tensor_used[i])
            fail(&r.c, "tensor %u is used by no value or attribute", i);
    for (uint32_t i = 0; i < r.n_strs; i++)
        free(r.strs[i]);
    free(r.strs);
    for (uint32_t i = 0; r.tensors && i < r.n_tensors; i++)
        if (r.tensors[i].dtype == SLIM_STRING)
            slim_tensor_release(&r.tensors[i]); /* not taken: a failed read's */
    free(r.tensors);
    free(r.tensor_used);
    if (r.c.st) {
        slim_graph_free(r.g);
        return r.c.st;
    }
    *out = r.g;
    return SLIM_OK;
}

/* ---- the mapping ------------------------------------------------------------ */

typedef struct mapping {
    slim_buffer buf;         /* first: the tensors hold &buf */
    slim_mem_account *acct;  /* charged with the data section while mapped */
    size_t charged;
    int fd;                  /* the file, open while mapped */
} mapping;

static void mapping_release(slim_buffer *b)
{
    mapping *mp = (mapping *)b;
    slim_file_map_unregister(b->ptr);
    munmap(b->ptr, b->size);
    close(mp->fd);
    if (mp->acct) {
        atomic_fetch_sub(&mp->acct->current, mp->charged);
        slim_mem_account_unref(mp->acct);
    }
    free(mp);
}

void slim_format_uncharge(struct slim_buffer *owner, size_t bytes)
{
    if (!owner || owner->release != mapping_release)
        return;
    mapping *mp = (mapping *)owner;
    if (bytes > mp->charged)
        bytes = mp->charged;
    if (mp->acct && bytes) {
        atomic_fetch_sub(&mp->acct->current, bytes);
        mp->charged -= bytes;
    }
}

slim_status slim_format_load_file(const char *path, slim_graph **out, slim_err *err)
{
    *out = NULL;
    int fd;
    size_t size;
    slim_status st = slim_file_open_regular(path, "model", &fd, &size, err);
    if (st)
        return st;
    if (size == 0) {
        close(fd);
        return slim_errf(err, SLIM_EPARSE, "\"%s\" is empty", path);
    }
    void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return slim_errf(err, SLIM_EIO, "cannot map \"%s\": %s", path, strerror(errno));
    }
    mapping *mp = calloc(1, sizeof(*mp));
    if (!mp) {
        munmap(p, size);
        close(fd);
        return slim_errf(err, SLIM_ENOMEM, "out of memory loading %s", path);
    }
    /* Kept open for row reads (slim_file_map_register). */
    mp->fd = fd;
    slim_file_map_register(p, size, fd);
    mp->buf.dev = slim_device_cpu();
    mp->buf.ptr = p;
    mp->buf.size = size;
    mp->buf.release = mapping_release;
    atomic_init(&mp->buf.refs, 1);
    st = slim_format_load_buffer(p, size, &mp->buf, out, err);
    if (!st) {
        /* The weights are memory the model holds, mapped or not. */
        uint64_t data_size;
        memcpy(&data_size, (const uint8_t *)p + 40, 8);
        if ((mp->acct = slim_mem_account_current())) {
            slim_mem_account_ref(mp->acct);
            mp->charged = (size_t)data_size;
            size_t now = atomic_fetch_add(&mp->acct->current, mp->charged) + mp->charged;
            size_t peak = atomic_load(&mp->acct->peak);
            while (now > peak && !atomic_compare_exchange_weak(&mp->acct->peak, &peak, now))
                ;
        }
    } else {
        slim_err_prefix(err, "%s: ", path);
    }
    slim_buffer_unref(&mp->buf); /* the tensors hold the mapping now */
    return st;
}
