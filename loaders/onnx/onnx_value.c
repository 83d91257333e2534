/*
 * onnx_value.c - test data of sequence and optional type.
 *
 * ONNX's node tests store a sequence input or output as a SequenceProto and
 * an optional one as an OptionalProto (onnx-data.proto). The build compiles
 * only onnx.proto, so these two small messages are read straight off the
 * wire here: their tensors are TensorProtos, handed to the loader's own
 * tensor parser. Only what a container can hold is accepted: tensors in a
 * sequence, a tensor or a sequence in an optional; sparse tensors, maps and
 * nested sequences are an EUNSUPPORTED error naming the field.
 */
#include "container.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Field numbers shared by SequenceProto and OptionalProto. */
enum { F_ELEM_TYPE = 2, F_TENSOR = 3, F_SPARSE = 4, F_SEQUENCE = 5, F_MAP = 6, F_OPTIONAL = 7 };

typedef struct {
    const uint8_t *p, *end;
} wire;

static bool rd_varint(wire *w, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && w->p < w->end; shift += 7) {
        uint8_t b = *w->p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* The next field: its number, and for a length-delimited one its bytes;
 * other wire types are skipped over. false at the end or on bad bytes
 * (*bad set). */
static bool next_field(wire *w, int *field, const uint8_t **val, size_t *len, bool *bad)
{
    *bad = false;
    if (w->p >= w->end)
        return false;
    uint64_t key, v;
    if (!rd_varint(w, &key)) {
        *bad = true;
        return false;
    }
    *field = (int)(key >> 3);
    *val = NULL;
    *len = 0;
    switch (key & 7) {
    case 0:
        if (!rd_varint(w, &v))
            break;
        return true;
    case 1:
        if (w->end - w->p < 8)
            break;
        w->p += 8;
        return true;
    case 5:
        if (w->end - w->p < 4)
            break;
        w->p += 4;
        return true;
    case 2:
        if (!rd_varint(w, &v) || v > (uint64_t)(w->end - w->p))
            break;
        *val = w->p;
        *len = (size_t)v;
        w->p += v;
        return true;
    }
    *bad = true;
    return false;
}

static slim_status unsupported_field(int field, const char *msg, slim_err *err)
{
    const char *what = field == F_SPARSE ? "sparse tensors"
                       : field == F_MAP  ? "maps"
                       : field == F_OPTIONAL ? "optionals"
                                             : "sequences";
    return slim_errf(err, SLIM_EUNSUPPORTED, "%s holding %s: not supported", msg, what);
}

/* Counts, then adds, the tensors of a SequenceProto into a new sequence. */
static slim_status parse_sequence(const uint8_t *data, size_t size, const char *dir,
                                  slim_tensor *out, slim_err *err)
{
    wire w = {data, data + size};
    int field, n = 0;
    const uint8_t *val;
    size_t len;
    bool bad;
    while (next_field(&w, &field, &val, &len, &bad)) {
        if (field == F_TENSOR && val)
            n++;
        else if (field >= F_SPARSE && field <= F_OPTIONAL)
            return unsupported_field(field, "a sequence", err);
    }
    if (bad)
        return slim_errf(err, SLIM_EPARSE, "not a valid serialized SequenceProto");
    slim_status st = slim_container_new(SLIM_KIND_SEQUENCE, SLIM_DTYPE_UNDEFINED, n, out, err);
    if (st)
        return st;
    w = (wire){data, data + size};
    while (!st && next_field(&w, &field, &val, &len, &bad)) {
        if (field != F_TENSOR || !val)
            continue;
        slim_tensor t;
        if (!(st = slim__onnx_tensor_from_bytes(val, len, dir, &t, err)))
            st = slim_container_take(out, &t, err);
    }
    if (st)
        slim_tensor_release(out);
    return st;
}

static slim_status parse_optional(const uint8_t *data, size_t size, const char *dir,
                                  slim_tensor *out, slim_err *err)
{
    slim_status st = slim_container_new(SLIM_KIND_OPTIONAL, SLIM_DTYPE_UNDEFINED, 1, out, err);
    if (st)
        return st;
    wire w = {data, data + size};
    int field;
    const uint8_t *val;
    size_t len;
    bool bad;
    while (!st && next_field(&w, &field, &val, &len, &bad)) {
        if ((field == F_TENSOR || field == F_SEQUENCE) && val) {
            if (slim_container_len(out))
                st = slim_errf(err, SLIM_EPARSE, "an optional holding two values");
            slim_tensor t;
            if (!st && !(st = field == F_TENSOR
                                  ? slim__onnx_tensor_from_bytes(val, len, dir, &t, err)
                                  : parse_sequence(val, len, dir, &t, err))) {
                /* The optional's dtype is its tensors'. */
                slim_dtype dt = t.dtype;
                if (!(st = slim_container_take(out, &t, err)))
                    out->dtype = ((slim_container *)out->data)->dtype = dt;
            }
        } else if (field == F_SPARSE || field == F_MAP || field == F_OPTIONAL) {
            st = unsupported_field(field, "an optional", err);
        }
    }
    if (!st && bad)
        st = slim_errf(err, SLIM_EPARSE, "not a valid serialized OptionalProto");
    if (st)
        slim_tensor_release(out);
    return st;
}

slim_status slim_onnx_load_value_file(const char *path, slim_kind kind, slim_tensor *out,
                                      slim_err *err)
{
    memset(out, 0, sizeof(*out));
    if (kind == SLIM_KIND_TENSOR)
        return slim_onnx_load_tensor_file(path, out, NULL, 0, err);
    FILE *f = fopen(path, "rb");
    if (!f)
        return slim_errf(err, SLIM_EIO, "%s: cannot open", path);
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        buf = malloc(size ? (size_t)size : 1);
    bool ok = buf && fread(buf, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    if (!ok) {
        free(buf);
        return slim_errf(err, buf || size < 0 ? SLIM_EIO : SLIM_ENOMEM, "%s: cannot read", path);
    }
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    slim_status st = kind == SLIM_KIND_SEQUENCE ? parse_sequence(buf, (size_t)size, dir, out, err)
                                                : parse_optional(buf, (size_t)size, dir, out, err);
    free(buf);
    if (st)
        slim_err_prefix(err, "%s: ", path);
    return st;
}
