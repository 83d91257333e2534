/*
 * onnx_wire.h - a serialized ModelProto split into the model without its
 * initializers and the initializers' byte ranges (onnx_wire.c).
 */
#ifndef SLIM_ONNX_WIRE_H
#define SLIM_ONNX_WIRE_H

#include "slim.h"

typedef struct slim_onnx_span {
    const uint8_t *p;        /* a serialized TensorProto inside the input */
    size_t n;
} slim_onnx_span;

/* A hostile file can nest subgraphs as deep as its size allows; each level
 * costs C stack in the loader and in the executor. The main graph is
 * depth 0. */
#define SLIM_MAX_SUBGRAPH_DEPTH 16

/* How deep protobuf messages may nest in a ModelProto: room for subgraphs
 * SLIM_MAX_SUBGRAPH_DEPTH deep (three levels each: graph, node, attribute)
 * and for the types inside the deepest of them. */
#define SLIM_ONNX_MAX_NESTING 100

/* Walks the serialized ModelProto at data[0..size) without unpacking it
 * and refuses (EUNSUPPORTED) subgraphs nested more than
 * SLIM_MAX_SUBGRAPH_DEPTH deep or messages more than SLIM_ONNX_MAX_NESTING
 * deep; EPARSE when the bytes are not protobuf. protobuf-c's unpack
 * recurses once per nested message, so a file of a few hundred KB nesting
 * If bodies thousands deep overflows the stack inside it, before the
 * loader's own depth check could run: this runs first, in bounded memory
 * and stack. */
slim_status slim_onnx_wire_check_nesting(const uint8_t *data, size_t size, slim_err *err);

/* *rest (malloc'ed, *rest_len bytes) is the ModelProto with every
 * GraphProto.initializer removed; *inits (malloc'ed, *n_inits) point into
 * data, in file order. EPARSE when the bytes are not protobuf. */
slim_status slim_onnx_wire_split(const uint8_t *data, size_t size, uint8_t **rest,
                                 size_t *rest_len, slim_onnx_span **inits, size_t *n_inits,
                                 slim_err *err);

#endif
