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

/* *rest (malloc'ed, *rest_len bytes) is the ModelProto with every
 * GraphProto.initializer removed; *inits (malloc'ed, *n_inits) point into
 * data, in file order. EPARSE when the bytes are not protobuf. */
slim_status slim_onnx_wire_split(const uint8_t *data, size_t size, uint8_t **rest,
                                 size_t *rest_len, slim_onnx_span **inits, size_t *n_inits,
                                 slim_err *err);

#endif
