/*
 * onnx_tensor.h - internal to the ONNX loader (loaders/onnx/): ONNX
 * TensorProtos into slimserve tensors, and the read-only file mapping the
 * loader reads models and tensor files through.
 *
 *     mapped_file mf;
 *     if (slim__onnx_map_file(path, "model", &mf, err)) return ...;
 *     ... read mf.data, mf.size ...
 *     slim__onnx_unmap_file(&mf);
 *
 * slim__onnx_tensor_from_proto fills *t (the caller releases it) or
 * returns an error naming the tensor; external data is read from base_dir
 * and must stay inside it (NULL: none allowed).
 */
#ifndef SLIM_ONNX_TENSOR_H
#define SLIM_ONNX_TENSOR_H

#include "model.h"
#include "onnx.pb-c.h"

#include <stddef.h>
typedef struct mapped_file {
    void *data;
    size_t size;
} mapped_file;

/* Maps the whole regular file at path (`what` names it in errors); an
 * empty file is an error. */
slim_status slim__onnx_map_file(const char *path, const char *what, mapped_file *mf,
                                slim_err *err);
void slim__onnx_unmap_file(mapped_file *mf);

slim_status slim__onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *base_dir,
                                         slim_tensor *t, slim_err *err);

#endif
