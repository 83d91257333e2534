/*
 * onnx_tensor.c - ONNX TensorProto -> slimserve tensor, for the loader's
 * initializers and tensor attributes (onnx_loader.c) and for tensor files
 * (test data: slim_onnx_load_tensor_file, slim__onnx_tensor_from_bytes).
 *
 * Raw, typed-field and string storage are all accepted; external data is
 * read from the model's folder and must stay inside it. Files are mapped
 * read-only and whole (the loader maps its models the same way).
 */
#include "onnx_tensor.h"

#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- whole-file mapping --------------------------------------------------- */

slim_status slim__onnx_map_file(const char *path, const char *what, mapped_file *mf,
                                slim_err *err)
{
    mf->data = NULL;
    mf->size = 0;
    int fd;
    slim_status st = slim_file_open_regular(path, what, &fd, &mf->size, err);
    if (st)
        return st;
    if (mf->size == 0) {
        close(fd);
        return slim_errf(err, SLIM_EPARSE, "\"%s\" is empty", path);
    }
    mf->data = mmap(NULL, mf->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (mf->data == MAP_FAILED) {
        mf->data = NULL;
        return slim_errf(err, SLIM_EIO, "cannot map \"%s\": %s", path, strerror(errno));
    }
    return SLIM_OK;
}

void slim__onnx_unmap_file(mapped_file *mf)
{
    if (mf->data)
        munmap(mf->data, mf->size);
    mf->data = NULL;
}

/* ---- tensors -------------------------------------------------------------- */

/* Resolves an external data location against the model folder, refusing
 * absolute paths and anything that escapes the folder (via .. or links). */
static slim_status external_path(const char *base_dir, const char *location, char *out,
                                 size_t cap, slim_err *err)
{
    if (!base_dir)
        return slim_errf(err, SLIM_EINVAL, "external data \"%s\" needs the model's folder",
                         location);
    if (location[0] == '/' || strstr(location, ".."))
        return slim_errf(err, SLIM_EINVAL,
                         "external data location \"%s\" must be a relative path inside the "
                         "model's folder", location);
    char joined[PATH_MAX], real_base[PATH_MAX];
    snprintf(joined, sizeof(joined), "%s/%s", base_dir, location);
    if (!realpath(base_dir, real_base))
        return slim_errf(err, SLIM_EIO, "cannot resolve model folder \"%s\"", base_dir);
    if (!realpath(joined, out))
        return slim_errf(err, SLIM_ENOTFOUND, "external data file \"%s\" not found", joined);
    size_t nb = strlen(real_base);
    if (strncmp(out, real_base, nb) != 0 || (out[nb] != '/' && out[nb] != '\0'))
        return slim_errf(err, SLIM_EINVAL,
                         "external data \"%s\" resolves outside the model's folder", location);
    (void)cap;
    return SLIM_OK;
}

static slim_status read_external(const Onnx__TensorProto *tp, const char *base_dir,
                                 void *dst, size_t nbytes, slim_err *err)
{
    const char *location = NULL;
    long long offset = 0, length = -1;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = tp->external_data[i];
        if (!kv->key || !kv->value)
            continue;
        if (strcmp(kv->key, "location") == 0)
            location = kv->value;
        else if (strcmp(kv->key, "offset") == 0)
            offset = atoll(kv->value);
        else if (strcmp(kv->key, "length") == 0)
            length = atoll(kv->value);
    }
    if (!location)
        return slim_errf(err, SLIM_EPARSE, "external data has no location");
    if (offset < 0 || (length >= 0 && (size_t)length != nbytes))
        return slim_errf(err, SLIM_EPARSE,
                         "external data \"%s\": length %lld does not match the %zu bytes the "
                         "shape needs", location, length, nbytes);
    char path[PATH_MAX];
    slim_status st = external_path(base_dir, location, path, sizeof(path), err);
    if (st)
        return st;
    int fd;
    size_t file_size;
    if ((st = slim_file_open_regular(path, "external data", &fd, &file_size, err)))
        return st;
    if ((unsigned long long)offset > file_size || nbytes > file_size - (size_t)offset) {
        close(fd);
        return slim_errf(err, SLIM_EPARSE,
                         "external data \"%s\" is truncated: wanted %zu bytes at offset %lld, "
                         "the file has %zu", path, nbytes, offset, file_size);
    }
    size_t got = 0;
    while (got < nbytes) {
        ssize_t r = pread(fd, (char *)dst + got, nbytes - got, (off_t)offset + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != nbytes)
        return slim_errf(err, SLIM_EIO, "cannot read external data \"%s\": wanted %zu bytes at "
                         "offset %lld, read %zu", path, nbytes, offset, got);
    return SLIM_OK;
}

/* Typed-field storage of each ONNX type (see onnx.proto's comments). */
static slim_status copy_typed(const Onnx__TensorProto *tp, slim_tensor *t, int64_t n,
                              slim_err *err)
{
    size_t have = 0;
    switch (t->dtype) {
    case SLIM_F32: have = tp->n_float_data; break;
    case SLIM_F64: have = tp->n_double_data; break;
    case SLIM_I64: have = tp->n_int64_data; break;
    case SLIM_U32: case SLIM_U64: have = tp->n_uint64_data; break;
    default: have = tp->n_int32_data; break;
    }
    if ((int64_t)have != n)
        return slim_errf(err, SLIM_EPARSE, "has %zu stored values, its shape needs %lld", have,
                         (long long)n);
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case SLIM_F32: ((float *)t->data)[i] = tp->float_data[i]; break;
        case SLIM_F64: ((double *)t->data)[i] = tp->double_data[i]; break;
        case SLIM_I64: ((int64_t *)t->data)[i] = tp->int64_data[i]; break;
        case SLIM_U32: ((uint32_t *)t->data)[i] = (uint32_t)tp->uint64_data[i]; break;
        case SLIM_U64: ((uint64_t *)t->data)[i] = tp->uint64_data[i]; break;
        case SLIM_F16: case SLIM_BF16: case SLIM_U16:
            ((uint16_t *)t->data)[i] = (uint16_t)tp->int32_data[i];
            break;
        default: slim_store_i64(t->dtype, t->data, i, tp->int32_data[i]); break;
        }
    }
    return SLIM_OK;
}

/* ONNX keeps string tensors in string_data, one bytes field per element
 * (never raw_data nor external files). */
static slim_status strings_from_proto(const Onnx__TensorProto *tp, slim_tensor *t, int64_t n,
                                      slim_err *err)
{
    if (tp->has_raw_data || (tp->has_data_location &&
                             tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
        return slim_errf(err, SLIM_EPARSE, "a string tensor keeps its elements in string_data, "
                         "not in raw or external data");
    if ((int64_t)tp->n_string_data != n)
        return slim_errf(err, SLIM_EPARSE, "has %zu strings, its shape needs %lld",
                         tp->n_string_data, (long long)n);
    size_t total = 0;
    for (int64_t i = 0; i < n; i++)
        total += tp->string_data[i].len;
    slim_status st = slim_tensor_alloc(t, err);
    if (!st)
        st = slim_tensor_string_reserve(t, total, err);
    for (int64_t i = 0; !st && i < n; i++)
        st = slim_tensor_string_set(t, i, (const char *)tp->string_data[i].data,
                                    tp->string_data[i].len, err);
    if (st)
        slim_tensor_release(t);
    return st;
}

slim_status slim__onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *base_dir,
                                         slim_tensor *t, slim_err *err)
{
    const char *name = tp->name ? tp->name : "";
    memset(t, 0, sizeof(*t));
    t->dtype = slim_dtype_from_onnx(tp->data_type);
    if (t->dtype == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EUNSUPPORTED, "tensor \"%s\" has ONNX data type %d, which is "
                         "not supported", name, (int)tp->data_type);
    if (tp->n_dims > SLIM_MAX_DIMS)
        return slim_errf(err, SLIM_EUNSUPPORTED, "tensor \"%s\" has %zu dims, at most %d supported",
                         name, tp->n_dims, SLIM_MAX_DIMS);
    t->ndim = (int)tp->n_dims;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (tp->dims[i] < 0 || (tp->dims[i] > 0 && n > INT64_MAX / 16 / tp->dims[i]))
            return slim_errf(err, SLIM_EPARSE, "tensor \"%s\" has invalid dimension %lld", name,
                             (long long)tp->dims[i]);
        t->dims[i] = tp->dims[i];
        n *= tp->dims[i];
    }
    if (t->dtype == SLIM_STRING) {
        slim_status st = strings_from_proto(tp, t, n, err);
        return st ? slim_err_prefix(err, "tensor \"%s\": ", name) : SLIM_OK;
    }
    size_t nbytes = (size_t)n * slim_dtype_size(t->dtype);
    bool external = tp->has_data_location &&
                    tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    if (!external && tp->has_raw_data && tp->raw_data.len != nbytes)
        return slim_errf(err, SLIM_EPARSE, "tensor \"%s\" has %zu bytes of raw data, its shape "
                         "%s needs %zu", name, tp->raw_data.len,
                         slim_shape_str(t->ndim, t->dims, (char[160]){0}, 160), nbytes);
    slim_status st = slim_tensor_alloc(t, err);
    if (st)
        return st;
    if (external)
        st = read_external(tp, base_dir, t->data, nbytes, err);
    else if (tp->has_raw_data) {
        if (nbytes)
            memcpy(t->data, tp->raw_data.data, nbytes);
    }
    else
        st = copy_typed(tp, t, n, err);
    if (st) {
        slim_err_prefix(err, "tensor \"%s\": ", name);
        slim_tensor_release(t);
    }
    return st;
}

/* ---- tensor files --------------------------------------------------------- */

slim_status slim_onnx_load_tensor_file(const char *path, slim_tensor *out, char *name,
                                       size_t name_cap, slim_err *err)
{
    mapped_file mf;
    slim_status st = slim__onnx_map_file(path, "tensor file", &mf, err);
    if (st)
        return st;
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, mf.size, mf.data);
    slim__onnx_unmap_file(&mf);
    if (!tp)
        return slim_errf(err, SLIM_EPARSE, "%s: not a valid serialized ONNX tensor", path);
    if (name && name_cap)
        snprintf(name, name_cap, "%s", tp->name ? tp->name : "");
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    st = slim__onnx_tensor_from_proto(tp, dir, out, err);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    if (st)
        slim_err_prefix(err, "%s: ", path);
    return st;
}

slim_status slim__onnx_tensor_from_bytes(const uint8_t *data, size_t size, const char *base_dir,
                                         slim_tensor *out, slim_err *err)
{
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, size, data);
    if (!tp)
        return slim_errf(err, SLIM_EPARSE, "not a valid serialized ONNX tensor");
    slim_status st = slim__onnx_tensor_from_proto(tp, base_dir, out, err);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return st;
}
