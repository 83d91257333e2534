/*
 * grpc_wire.c - a ModelInferRequest unpacked without copying its
 * raw_input_contents (grpc.h: slim_server_grpc_infer_unpack).
 *
 * Why: protobuf-c's unpack copies every bytes field into an allocation of
 * its own, so each input's bytes were copied twice on their way to the
 * model (message -> protobuf-c's copy -> the input tensor). Here the
 * top-level fields are walked once: each raw_input_contents entry
 * (field 7, length-delimited) is left where it is and pointed at, and the
 * other fields (names, shapes, parameters: small) are handed to protobuf-c
 * as they are. The message then holds the same values as protobuf-c's own
 * unpack would give it; only where the raw bytes live differs, so the
 * caller keeps the packed bytes alive as long as the message.
 *
 * The walk follows protobuf-c's own reading of the wire (a tag of at most
 * 5 bytes whose first byte names a field, varints of at most 10 bytes,
 * length prefixes of at most 5); anything it does not take (a group, a
 * truncated field) goes to protobuf-c's plain unpack, which then decides
 * exactly as before. The fuzz target (fuzz_grpc_infer) checks that both
 * ways agree on every input it is given.
 */
#include "grpc.h"
#include "inference.pb-c.h"

#include <stdlib.h>
#include <string.h>

#define RAW_INPUT_FIELD 7u
#define WIRE_VARINT 0u
#define WIRE_64BIT 1u
#define WIRE_LENGTH 2u
#define WIRE_32BIT 5u

/* One top-level field: where it starts, where its value starts, where it
 * ends; false when the bytes there are not one field protobuf-c reads. */
typedef struct {
    size_t start, value, end;
    uint32_t number;
    unsigned wire;
} field;

static bool read_tag(const uint8_t *p, size_t left, uint32_t *number, unsigned *wire,
                     size_t *used)
{
    if (!left || (p[0] & 0xf8) == 0)
        return false; /* field number 0 is not a field */
    *wire = p[0] & 7u;
    uint32_t n = (uint32_t)(p[0] & 0x7f) >> 3;
    size_t max = left < 5 ? left : 5;
    if (!(p[0] & 0x80)) {
        *number = n;
        *used = 1;
        return true;
    }
    unsigned shift = 4;
    for (size_t i = 1; i < max; i++, shift += 7) {
        n |= (uint32_t)(p[i] & 0x7f) << shift;
        if (!(p[i] & 0x80)) {
            *number = n;
            *used = i + 1;
            return true;
        }
    }
    return false;
}

static bool next_field(const uint8_t *data, size_t len, size_t at, field *f)
{
    size_t used;
    if (!read_tag(data + at, len - at, &f->number, &f->wire, &used))
        return false;
    f->start = at;
    at += used;
    size_t left = len - at;
    switch (f->wire) {
    case WIRE_VARINT: {
        size_t max = left < 10 ? left : 10, i = 0;
        while (i < max && (data[at + i] & 0x80))
            i++;
        if (i == max)
            return false;
        f->value = at;
        f->end = at + i + 1;
        return true;
    }
    case WIRE_64BIT:
    case WIRE_32BIT: {
        size_t n = f->wire == WIRE_64BIT ? 8 : 4;
        if (left < n)
            return false;
        f->value = at;
        f->end = at + n;
        return true;
    }
    case WIRE_LENGTH: {
        size_t max = left < 5 ? left : 5, i = 0;
        uint64_t n = 0;
        for (; i < max; i++) {
            n |= (uint64_t)(data[at + i] & 0x7f) << (7 * i);
            if (!(data[at + i] & 0x80))
                break;
        }
        if (i == max || n > left - (i + 1))
            return false;
        f->value = at + i + 1;
        f->end = f->value + (size_t)n;
        return true;
    }
    default:
        return false; /* groups and unknown wire types: protobuf-c's call */
    }
}

void *slim_server_grpc_infer_unpack(const uint8_t *data, size_t len, bool *in_place)
{
    *in_place = false;
    /* First pass: how many raw entries, how many bytes everything else is. */
    size_t n_raw = 0, rest_len = 0;
    field f;
    for (size_t at = 0; at < len; at = f.end) {
        if (!next_field(data, len, at, &f))
            return inference__model_infer_request__unpack(NULL, len, data);
        if (f.number == RAW_INPUT_FIELD && f.wire == WIRE_LENGTH)
            n_raw++;
        else
            rest_len += f.end - f.start;
    }
    if (!n_raw) /* nothing to leave in place */
        return inference__model_infer_request__unpack(NULL, len, data);
    uint8_t *rest = malloc(rest_len ? rest_len : 1);
    ProtobufCBinaryData *raw = malloc(n_raw * sizeof(*raw));
    if (!rest || !raw) {
        free(rest);
        free(raw);
        return NULL; /* as protobuf-c answers when its allocator fails */
    }
    /* Second pass: the raw entries pointed at, the rest gathered in order. */
    size_t k = 0, r = 0;
    for (size_t at = 0; at < len; at = f.end) {
        next_field(data, len, at, &f); /* cannot fail: the first pass read it */
        if (f.number == RAW_INPUT_FIELD && f.wire == WIRE_LENGTH) {
            raw[k].data = (uint8_t *)(data + f.value);
            raw[k++].len = f.end - f.value;
        } else {
            memcpy(rest + r, data + f.start, f.end - f.start);
            r += f.end - f.start;
        }
    }
    Inference__ModelInferRequest *q = inference__model_infer_request__unpack(NULL, rest_len, rest);
    free(rest);
    if (!q || q->n_raw_input_contents) { /* (the latter cannot be: none went to it) */
        if (q)
            inference__model_infer_request__free_unpacked(q, NULL);
        free(raw);
        return q ? inference__model_infer_request__unpack(NULL, len, data) : NULL;
    }
    q->raw_input_contents = raw;
    q->n_raw_input_contents = n_raw;
    *in_place = true;
    return q;
}

void slim_server_grpc_infer_unpacked_free(void *msg, bool in_place)
{
    Inference__ModelInferRequest *q = msg;
    if (!q)
        return;
    if (in_place) { /* the array is ours, the bytes the caller's */
        free(q->raw_input_contents);
        q->raw_input_contents = NULL;
        q->n_raw_input_contents = 0;
    }
    inference__model_infer_request__free_unpacked(q, NULL);
}
