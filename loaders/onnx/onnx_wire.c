/*
 * onnx_wire.c - splits a serialized ModelProto into the model without its
 * weights and the byte ranges of the weights, by walking the protobuf wire
 * format.
 *
 * protobuf-c unpacks a message whole, copying every bytes field: unpacking
 * a ModelProto holds a second copy of all the weights next to the mapped
 * file, and converting them made a third. Walking the wire format is cheap
 * (keys and lengths only), so the loader unpacks the small rest of the
 * model once and each initializer (GraphProto field 5) on its own, one at a
 * time: the peak is the weights plus the largest one. Fields are facts of
 * onnx.proto: ModelProto.graph = 7, GraphProto.initializer = 5.
 *
 * The same walk, guided by protobuf-c's message descriptors, measures how
 * deep the messages nest before anything is unpacked.
 */
#include "onnx_wire.h"
#include "onnx.pb-c.h"

#include <stdlib.h>
#include <string.h>

#define MODEL_GRAPH_FIELD 7
#define GRAPH_INITIALIZER_FIELD 5

typedef struct span_list {
    slim_onnx_span *v;
    size_t n, cap;
} span_list;

static bool read_varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= n)
            return false;
        uint8_t b = p[(*pos)++];
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

static size_t put_varint(uint8_t *out, uint64_t v)
{
    size_t k = 0;
    do {
        uint8_t b = v & 0x7F;
        v >>= 7;
        out[k++] = b | (v ? 0x80 : 0);
    } while (v);
    return k;
}

/* One field at *pos: its number, wire type, and for length-delimited ones
 * the payload; *pos moves past it. False when the bytes are not a field. */
static bool next_field(const uint8_t *p, size_t n, size_t *pos, uint32_t *field, int *wire,
                       const uint8_t **payload, size_t *payload_len)
{
    uint64_t key, len;
    if (!read_varint(p, n, pos, &key) || key >> 3 == 0 || key >> 3 > 0x1FFFFFFF)
        return false;
    *field = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    *payload = NULL;
    *payload_len = 0;
    switch (*wire) {
    case 0:
        return read_varint(p, n, pos, &len);
    case 1:
        if (n - *pos < 8)
            return false;
        *pos += 8;
        return true;
    case 5:
        if (n - *pos < 4)
            return false;
        *pos += 4;
        return true;
    case 2:
        if (!read_varint(p, n, pos, &len) || len > n - *pos)
            return false;
        *payload = p + *pos;
        *payload_len = (size_t)len;
        *pos += (size_t)len;
        return true;
    default: /* groups (3, 4) are not used by onnx.proto */
        return false;
    }
}

static bool push_span(span_list *l, const uint8_t *p, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        slim_onnx_span *v = realloc(l->v, sizeof(*v) * cap);
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (slim_onnx_span){p, n};
    return true;
}

/* Copies the GraphProto at g[0..n) without its initializers into out
 * (which has room for n bytes), recording their spans. */
static slim_status filter_graph(const uint8_t *g, size_t n, uint8_t *out, size_t *out_len,
                                span_list *inits, slim_err *err)
{
    size_t pos = 0, k = 0;
    while (pos < n) {
        size_t start = pos;
        uint32_t field;
        int wire;
        const uint8_t *payload;
        size_t len;
        if (!next_field(g, n, &pos, &field, &wire, &payload, &len))
            return slim_errf(err, SLIM_EPARSE, "not a valid ONNX model: the graph's protobuf "
                             "is malformed or truncated");
        if (field == GRAPH_INITIALIZER_FIELD && wire == 2) {
            if (!push_span(inits, payload, len))
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
            continue;
        }
        memcpy(out + k, g + start, pos - start);
        k += pos - start;
    }
    *out_len = k;
    return SLIM_OK;
}

slim_status slim_onnx_wire_split(const uint8_t *data, size_t size, uint8_t **rest,
                                 size_t *rest_len, slim_onnx_span **inits, size_t *n_inits,
                                 slim_err *err)
{
    *rest = NULL;
    *rest_len = 0;
    *inits = NULL;
    *n_inits = 0;
    /* The rest is never longer than the input plus a re-encoded length
     * per graph occurrence. */
    uint8_t *out = malloc(size + 64);
    uint8_t *graph = NULL;
    span_list l = {0};
    slim_status st = SLIM_OK;
    if (!out) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory");
        goto fail;
    }
    size_t pos = 0, k = 0;
    while (pos < size) {
        size_t start = pos;
        uint32_t field;
        int wire;
        const uint8_t *payload;
        size_t len;
        if (!next_field(data, size, &pos, &field, &wire, &payload, &len)) {
            st = slim_errf(err, SLIM_EPARSE, "not a valid ONNX model: the protobuf is malformed "
                           "or truncated");
            goto fail;
        }
        if (field != MODEL_GRAPH_FIELD || wire != 2) {
            memcpy(out + k, data + start, pos - start);
            k += pos - start;
            continue;
        }
        free(graph);
        if (!(graph = malloc(len ? len : 1))) {
            st = slim_errf(err, SLIM_ENOMEM, "out of memory");
            goto fail;
        }
        size_t glen = 0;
        if ((st = filter_graph(payload, len, graph, &glen, &l, err)))
            goto fail;
        if (k + 16 + glen > size + 64) { /* cannot happen: glen <= len */
            st = slim_errf(err, SLIM_EINTERNAL, "ONNX graph filter overran its buffer");
            goto fail;
        }
        out[k++] = (MODEL_GRAPH_FIELD << 3) | 2;
        k += put_varint(out + k, glen);
        memcpy(out + k, graph, glen);
        k += glen;
    }
    free(graph);
    *rest = out;
    *rest_len = k;
    *inits = l.v;
    *n_inits = l.n;
    return SLIM_OK;
fail:
    free(graph);
    free(out);
    free(l.v);
    return st;
}

/* One message being walked: its type, where its bytes end, and how many
 * GraphProtos enclose it (itself included). */
typedef struct nest_frame {
    const ProtobufCMessageDescriptor *desc;
    size_t end;
    int graphs;
} nest_frame;

slim_status slim_onnx_wire_check_nesting(const uint8_t *data, size_t size, slim_err *err)
{
    /* An explicit stack, bounded by the limit: the walk itself must not
     * be the thing that recurses. */
    nest_frame st[SLIM_ONNX_MAX_NESTING];
    int top = 0;
    st[0] = (nest_frame){&onnx__model_proto__descriptor, size, 0};
    size_t pos = 0;
    for (;;) {
        while (pos == st[top].end) {
            if (top == 0)
                return SLIM_OK;
            top--;
        }
        size_t at = pos;
        uint32_t field;
        int wire;
        const uint8_t *payload;
        size_t len;
        /* Bounded by the enclosing message: a field may not run past it. */
        if (!next_field(data, st[top].end, &pos, &field, &wire, &payload, &len))
            return slim_errf(err, SLIM_EPARSE, "not a valid ONNX model: the protobuf is "
                             "malformed or truncated (byte %zu, inside %s)", at,
                             st[top].desc->short_name);
        if (wire != 2)
            continue;
        const ProtobufCFieldDescriptor *fd =
            protobuf_c_message_descriptor_get_field(st[top].desc, field);
        if (!fd || fd->type != PROTOBUF_C_TYPE_MESSAGE)
            continue; /* bytes, strings, packed numbers, unknown fields */
        const ProtobufCMessageDescriptor *sub = fd->descriptor;
        int graphs = st[top].graphs + (sub == &onnx__graph_proto__descriptor);
        if (graphs - 1 > SLIM_MAX_SUBGRAPH_DEPTH)
            return slim_errf(err, SLIM_EUNSUPPORTED, "subgraphs nest more than %d deep (the "
                             "graph at byte %zu is subgraph level %d; checked before unpacking)",
                             SLIM_MAX_SUBGRAPH_DEPTH, at, graphs - 1);
        if (top + 1 >= SLIM_ONNX_MAX_NESTING)
            return slim_errf(err, SLIM_EUNSUPPORTED, "protobuf messages nest more than %d deep "
                             "(%s.%s at byte %zu; checked before unpacking)",
                             SLIM_ONNX_MAX_NESTING, st[top].desc->short_name, fd->name, at);
        pos = (size_t)(payload - data);
        st[++top] = (nest_frame){sub, pos + len, graphs};
    }
}

/* TensorProto's fields (onnx.proto). */
#define TENSOR_DIMS 1
#define TENSOR_DATA_TYPE 2
#define TENSOR_NAME 8
#define TENSOR_RAW_DATA 9
#define TENSOR_DOC_STRING 12
#define TENSOR_DATA_LOCATION 14
#define TENSOR_LOCATION_EXTERNAL 1

/* The typed data fields (float 4, int32 5, string 6, int64 7, raw 9,
 * double 10, uint64 11), whose payload is the data itself. */
static bool is_data_field(uint32_t f)
{
    return (f >= 4 && f <= 7) || f == 9 || f == 10 || f == 11;
}

/* One dim, or a packed run of them; false past SLIM_MAX_DIMS (ndim -1). */
static bool add_dims(slim_onnx_init_info *o, int wire, const uint8_t *pl, size_t pl_len,
                     uint64_t value)
{
    if (wire == 0) {
        if (o->ndim < 0 || o->ndim >= SLIM_MAX_DIMS)
            return false;
        o->dims[o->ndim++] = (int64_t)value;
        return true;
    }
    size_t q = 0;
    while (q < pl_len) {
        uint64_t d;
        if (!read_varint(pl, pl_len, &q, &d) || o->ndim < 0 || o->ndim >= SLIM_MAX_DIMS)
            return false;
        o->dims[o->ndim++] = (int64_t)d;
    }
    return true;
}

slim_status slim_onnx_wire_init_info(const slim_onnx_span *s, slim_onnx_init_info *out,
                                     slim_err *err)
{
    memset(out, 0, sizeof(*out));
    size_t pos = 0;
    bool too_many = false;
    int raws = 0, others = 0; /* raw_data fields; fields a plain raw tensor has not */
    while (pos < s->n) {
        /* next_field skips a varint's value: read it again for the few
         * varint fields wanted here. */
        size_t at = pos;
        uint32_t f;
        int wire;
        const uint8_t *pl;
        size_t pl_len;
        if (!next_field(s->p, s->n, &pos, &f, &wire, &pl, &pl_len))
            return slim_errf(err, SLIM_EPARSE, "not a valid ONNX model: an initializer is "
                             "malformed or truncated");
        uint64_t value = 0, key;
        read_varint(s->p, s->n, &at, &key);
        size_t value_at = at; /* a varint's bytes: from here to pos */
        if (wire == 0)
            read_varint(s->p, s->n, &at, &value);
        if (f == TENSOR_DIMS && (wire == 0 || wire == 2))
            too_many = too_many || !add_dims(out, wire, pl, pl_len, value);
        else if (f == TENSOR_DATA_TYPE && wire == 0)
            out->data_type = (int32_t)value;
        else if (f == TENSOR_NAME && wire == 2) {
            out->name = (const char *)pl;
            out->name_len = pl_len;
        } else if (f == TENSOR_DATA_LOCATION && wire == 0)
            out->external = value == TENSOR_LOCATION_EXTERNAL;
        else if (is_data_field(f)) {
            out->stored_bytes += wire == 2 ? pl_len : pos - value_at;
            if (f == TENSOR_RAW_DATA && wire == 2) {
                out->raw = pl;
                raws++;
            } else
                others++;
        } else if (!(f == TENSOR_DOC_STRING && wire == 2))
            others++;
    }
    if (too_many)
        out->ndim = -1;
    out->plain_raw = raws == 1 && !others && !out->external;
    return SLIM_OK;
}
