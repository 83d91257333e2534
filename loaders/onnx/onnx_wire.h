/*
 * onnx_wire.h - a serialized ModelProto split into the model without its
 * initializers and the initializers' byte ranges (onnx_wire.c).
 */
#ifndef SLIM_ONNX_WIRE_H
#define SLIM_ONNX_WIRE_H

#include "graph.h"
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

/* An initializer's facts without its data: what a weightless read
 * (slim_onnx_load_file_shapes, onnx_loader.c) needs to make the value
 * without decoding, copying or touching its bytes. name points into the
 * input (not NUL-terminated). */
typedef struct slim_onnx_init_info {
    const char *name;
    size_t name_len;
    int32_t data_type;        /* ONNX TensorProto.DataType */
    int ndim;                 /* -1: more dims than SLIM_MAX_DIMS */
    int64_t dims[SLIM_MAX_DIMS];
    size_t stored_bytes;      /* payload bytes in the file: raw_data or the typed fields */
    bool external;            /* data_location EXTERNAL: the bytes are in another file */
    /* The data is one raw_data field and every other field is one of
     * dims, data_type, name, doc_string or data_location, with its wire
     * type: raw (stored_bytes long, inside the input) is then the tensor's
     * bytes exactly as protobuf-c would unpack them, and the loader copies
     * them straight from the file (no unpacked copy of the weight). */
    const uint8_t *raw;
    bool plain_raw;
} slim_onnx_init_info;

/* Reads the keys, the dims, the type and the name of the serialized
 * TensorProto s, skipping every data field by its length (a few keys for a
 * weight of any size). EPARSE when the bytes are not protobuf. */
slim_status slim_onnx_wire_init_info(const slim_onnx_span *s, slim_onnx_init_info *out,
                                     slim_err *err);

/* onnx_loader.c: a weightless read of the ONNX file at path. The graph is
 * the file's, but an initializer of more than keep_bytes is made from the
 * wire scan above: its type and shape, data and buf NULL (its
 * slim_tensor_nbytes all the same); its bytes are never decoded, copied or
 * read (nor an external file's). Smaller ones (shapes, axes, scalars) are
 * read as always, so shape inference sees them. The peak is the graph
 * without its weights: for a footprint's prediction, not for running. */
slim_status slim_onnx_load_file_shapes(const char *path, size_t keep_bytes,
                                       slim_graph **out, slim_err *err);

#endif
