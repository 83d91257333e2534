/*
 * slim.h - the public face of the slimserve runtime.
 *
 * Usage:
 *     slim_err err;
 *     slim_model *m;
 *     if (slim_model_load("model.onnx", NULL, &m, &err) != SLIM_OK)
 *         fprintf(stderr, "%s\n", err.msg);
 *     slim_tensor *outs; int n_out;
 *     slim_model_run(m, n_in, names, inputs, &outs, &n_out, &err);
 *     ... slim_tensors_free(outs, n_out); slim_model_free(m);
 *
 * Every function that can fail returns a slim_status (0 success, negative
 * error) and, when given a slim_err, writes a message a user can act on.
 */
#ifndef SLIM_H
#define SLIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------ */

#define SLIM_STATUS_MAP(X)                                                   \
    X(OK, 0, "success")                                                      \
    X(EINVAL, -1, "invalid argument")                                        \
    X(ENOMEM, -2, "host out of memory")                                      \
    X(EIO, -3, "input/output error")                                         \
    X(EPARSE, -4, "malformed model or file")                                 \
    X(EUNSUPPORTED, -5, "unsupported operator or feature")                   \
    X(ESHAPE, -6, "shape mismatch")                                          \
    X(ETYPE, -7, "data type mismatch")                                       \
    X(ENOTFOUND, -8, "not found")                                            \
    X(EOOM, -9, "out of memory under the configured limit")                  \
    X(EINTERNAL, -10, "internal error")                                      \
    X(ENEEDVALUE, -11, "shape depends on a tensor value not yet known")    \
    X(ETIMEDOUT, -12, "timed out")                                           \
    X(ECANCELLED, -13, "cancelled")

typedef enum {
#define SLIM__STATUS_ENUM(name, code, text) SLIM_##name = code,
    SLIM_STATUS_MAP(SLIM__STATUS_ENUM)
#undef SLIM__STATUS_ENUM
} slim_status;

const char *slim_strerror(slim_status s);   /* "shape mismatch" */
const char *slim_status_name(slim_status s); /* "SLIM_ESHAPE" */

/* An error message travels with the status; callers own the struct. */
typedef struct slim_err {
    slim_status status;
    char msg[1024];
} slim_err;

/* Formats into err (if non-NULL) and returns s, so `return slim_errf(...)`. */
slim_status slim_errf(slim_err *err, slim_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends context ("node \"conv1\" (Conv): ") to an existing message. */
slim_status slim_err_prefix(slim_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- data types -------------------------------------------------------- */

/* X(enum suffix, C type name for docs, byte size, numpy-ish name, onnx code) */
#define SLIM_DTYPE_MAP(X)                 \
    X(F32, 4, "float32", 1)               \
    X(U8, 1, "uint8", 2)                  \
    X(I8, 1, "int8", 3)                   \
    X(U16, 2, "uint16", 4)                \
    X(I16, 2, "int16", 5)                 \
    X(I32, 4, "int32", 6)                 \
    X(I64, 8, "int64", 7)                 \
    X(BOOL, 1, "bool", 9)                 \
    X(F16, 2, "float16", 10)              \
    X(F64, 8, "float64", 11)              \
    X(U32, 4, "uint32", 12)               \
    X(U64, 8, "uint64", 13)               \
    X(BF16, 2, "bfloat16", 16)            \
    X(STRING, 16, "string", 8)

typedef enum {
    SLIM_DTYPE_UNDEFINED = 0,
#define SLIM__DTYPE_ENUM(name, size, text, onnx) SLIM_##name,
    SLIM_DTYPE_MAP(SLIM__DTYPE_ENUM)
#undef SLIM__DTYPE_ENUM
    SLIM_DTYPE_COUNT
} slim_dtype;

size_t slim_dtype_size(slim_dtype t);
const char *slim_dtype_name(slim_dtype t);
slim_dtype slim_dtype_from_name(const char *name); /* UNDEFINED if unknown */
slim_dtype slim_dtype_from_onnx(int onnx_code);     /* UNDEFINED if unknown */
int slim_dtype_to_onnx(slim_dtype t);
bool slim_dtype_is_float(slim_dtype t); /* F16 BF16 F32 F64 */
bool slim_dtype_is_int(slim_dtype t);   /* signed or unsigned integers */
bool slim_dtype_is_signed(slim_dtype t);

float slim_f16_to_f32(uint16_t h);
uint16_t slim_f32_to_f16(float f);       /* round to nearest even */
float slim_bf16_to_f32(uint16_t h);
uint16_t slim_f32_to_bf16(float f);      /* round to nearest even */

/* Element i of a buffer of type t, widened; used by shape-like ops and tests. */
double slim_load_f64(slim_dtype t, const void *data, int64_t i);
int64_t slim_load_i64(slim_dtype t, const void *data, int64_t i);
void slim_store_f64(slim_dtype t, void *data, int64_t i, double v);
void slim_store_i64(slim_dtype t, void *data, int64_t i, int64_t v);

/* ---- tensors ----------------------------------------------------------- */

#define SLIM_MAX_DIMS 8

struct slim_buffer; /* refcounted device memory, see runtime/device.h */

/* What a value holds. Most are tensors; ONNX's sequence and optional types
 * (loops that collect results, optional model inputs) are containers: a
 * slim_tensor with this kind, ndim 0, dtype the element tensors' (or
 * UNDEFINED), whose data is a struct slim_container (runtime/container.h)
 * owned by buf like any other storage. */
typedef enum {
    SLIM_KIND_TENSOR = 0,
    SLIM_KIND_SEQUENCE,  /* of tensors */
    SLIM_KIND_OPTIONAL,  /* of a tensor or a sequence; may be empty */
} slim_kind;

typedef struct slim_tensor {
    slim_dtype dtype;
    int ndim;                     /* 0 for a scalar */
    int64_t dims[SLIM_MAX_DIMS];
    void *data;                   /* NULL when numel is 0, or not yet known */
    struct slim_buffer *buf;      /* owner of data; NULL for borrowed data */
    struct slim_device *device;   /* where data lives; NULL: host memory */
    slim_kind kind;               /* SLIM_KIND_TENSOR (0) unless a container */
} slim_tensor;

int64_t slim_tensor_numel(const slim_tensor *t);
size_t slim_tensor_nbytes(const slim_tensor *t);
int64_t slim_shape_numel(int ndim, const int64_t *dims);
/* "[2,3,224,224]" into buf; returns buf. */
char *slim_shape_str(int ndim, const int64_t *dims, char *buf, size_t cap);

/* Allocates data for t->dtype/ndim/dims on the host; 64-byte aligned. */
slim_status slim_tensor_alloc(slim_tensor *t, slim_err *err);
/* Drops this tensor's reference to its buffer and clears data. */
void slim_tensor_release(slim_tensor *t);
void slim_tensors_free(slim_tensor *ts, int n); /* release each, free array */

/* ---- string tensors (SLIM_STRING, ONNX type 8) -------------------------
 *
 * Element i of a string tensor is a slim_str in data (16 bytes: where its
 * bytes are and how many; not NUL-terminated, may hold any byte). The
 * bytes belong to the tensor's buffer: slim_tensor_alloc gives a string
 * tensor whose every element is "", slim_tensor_string_set copies bytes
 * in, slim_tensor_release frees slots and bytes together (the buffer's
 * last reference; views such as Reshape's share it). Everything comes
 * from the CPU's allocator and is charged to the current account.
 *
 *     slim_tensor t = {.dtype = SLIM_STRING, .ndim = 1, .dims = {n}};
 *     if (slim_tensor_alloc(&t, &err)) ...;            every element ""
 *     slim_tensor_string_reserve(&t, total_bytes, &err); optional: one block
 *     slim_tensor_string_set(&t, i, bytes, len, &err);
 *     size_t len; const char *s = slim_tensor_string_get(&t, i, &len);
 *     slim_tensor_release(&t);
 *
 * Elements are immutable once set (a later set of the same element takes
 * new bytes; the old ones go when the tensor does), so a kernel may copy
 * whole slim_str elements from one string tensor to another: the executor
 * then gives the output bytes of its own (runtime/string_tensor.h). */
typedef struct slim_str {
    const char *ptr;            /* NULL when len is 0 */
    uint64_t len;
} slim_str;

/* One element's bytes; SIZE_MAX-free limit on a single element. */
#define SLIM_STRING_MAX_LEN ((uint64_t)1 << 31)

/* Element i's bytes (NULL and *len 0 for ""); NULL with *len 0 also when i
 * is out of range or t is not a string tensor. */
const char *slim_tensor_string_get(const slim_tensor *t, int64_t i, size_t *len);
/* Copies len bytes into element i. SLIM_ETYPE when t is not a string
 * tensor made by slim_tensor_alloc, SLIM_EINVAL for i out of range or len
 * over SLIM_STRING_MAX_LEN, SLIM_EOOM/ENOMEM from the allocator. */
slim_status slim_tensor_string_set(slim_tensor *t, int64_t i, const char *s, size_t len,
                                   slim_err *err);
/* Makes room for `bytes` more bytes in one block, so the sets that follow
 * allocate nothing (a caller that knows the total: a decoder). */
slim_status slim_tensor_string_reserve(slim_tensor *t, size_t bytes, slim_err *err);
/* Sum of the elements' lengths. */
size_t slim_tensor_string_total(const slim_tensor *t);
/* A new string tensor with src's shape and a copy of its elements. */
slim_status slim_tensor_string_copy(slim_tensor *dst, const slim_tensor *src, slim_err *err);

/* ---- models ------------------------------------------------------------ */

typedef struct slim_model slim_model;

/* Pruning at load (quant/prune.h, docs/prune.md), before int8 or half
 * precision: weights of MatMul and Gemm (constant, 2-D, float32) lose their
 * smallest entries and, where that pays in bytes and time, are stored and
 * run sparse. */
typedef struct slim_prune_opts {
    const char *method;       /* "magnitude", "2:4" or "mask"; NULL or "": none */
    double amount;            /* magnitude: fraction of weights zeroed, [0, 1) */
    bool global;              /* magnitude: ranked over all selected layers at once */
    const char *masks;        /* mask: the .npz file (name -> 0/1 array) */
    const char *const *ops;   /* op types or node names to prune; none: every candidate */
    int n_ops;
    /* "auto" (NULL): sparse where it measured cheaper; "sparse": every
     * pruned layer sparse (benchmarks, tests); "dense": zeros stored dense. */
    const char *storage;
    /* The batch the model is expected to serve (config max_batch_size;
     * 0: 1, as for slim run): csr is used up to the break-even density
     * measured at that many rows (quant/prune_rule.c). */
    int64_t batch;
    struct slim_prune_report *report; /* per-layer report (slim_prune_report_free), or NULL */
} slim_prune_opts;

/* The load pipeline (pipeline/load.c) runs as stages, each with its own
 * options: read (the file, by its magic number), compress (pruning, int8,
 * half precision), optimize (the device's graph passes), then the model is
 * planned and placed. slim_load_opts is the composition; zero is the
 * default everywhere. */

/* With precision "int8" (quant/int8.h). */
typedef struct slim_load_int8_opts {
    /* Node names or op types kept in float32, and where to put the pass's
     * per-layer report (NULL: none; the caller frees it with
     * slim_int8_report_free). */
    const char *const *exclude;
    int n_exclude;
    struct slim_int8_report *report;
    /* Measure each layer's output error on sample inputs (one float32 run
     * of the model at load) and report it; layers over max_error (when > 0,
     * which implies measuring) stay float32. The samples are these inputs
     * by name, the rest drawn from the input specs (quant/int8_check.c). */
    bool measure;
    double max_error;
    int n_samples;
    const char *const *sample_names;
    const slim_tensor *samples;
    /* "fp16" / "bf16" makes the layers the int8 pass leaves float32
     * (excluded, over max_error) half instead. */
    const char *fallback;
} slim_load_int8_opts;

/* With precision "fp16" / "bf16" (quant/half.h): on the CPU, the weights of
 * MatMul, Gemm and embedding Gathers are stored half and products
 * accumulate in float32; activations (NULL or "fp32", "fp16", "bf16") in
 * half too adds the whole-graph pass (quant/fp16.h). A model placed on CUDA
 * with activations unset keeps the whole-graph pass alone. exclude: node
 * names or op types kept in float32; report: the per-layer report
 * (slim_half_report_free). */
typedef struct slim_load_half_opts {
    const char *activations;
    const char *const *exclude;
    int n_exclude;
    struct slim_half_report *report;
    /* fp16 / bf16 as the whole graph in half, as a CUDA placement means it
     * with activations unset: for who converts a CUDA model without placing
     * it (the server's conversion cache). */
    bool whole_graph;
} slim_load_half_opts;

/* The compress stage (pipeline/compress.c). */
typedef struct slim_compress_opts {
    /* "fp32" (NULL means this), "fp16" or "bf16": on the CPU, half weights
     * with float32 activations (see half.activations); on CUDA, weights
     * and activations in half precision, normalizations and reductions
     * accumulating in fp32; inputs and outputs keep their declared types.
     * "int8": matrix products and embedding tables with int8 weights,
     * activations quantized per row at run time (quant/int8.h). On a GPU,
     * float32 products may round their operands to TF32 (10-bit mantissas,
     * float32 accumulation), as onnxruntime-gpu's do; "fp32-strict" is fp32
     * with that turned off. The CPU computes float32 products in float32. */
    const char *precision;
    slim_load_int8_opts int8;
    slim_load_half_opts half;
    /* Pruning (NULL: none); runs before the precision passes. */
    const slim_prune_opts *prune;
} slim_compress_opts;

/* The optimize stage (pipeline/optimize.c). */
typedef struct slim_optimize_opts {
    /* Skip the graph optimization passes (passes/pass.h): the graph as
     * written, e.g. to save it to a .slim file, whose loads run them. */
    bool no_passes;
    /* With no_passes: still pack the float32 MatMul weights for this CPU
     * (slim_pass_pack_matmul), which a .slim file stores packed, and merge
     * attention projections (slim_pass_merge_qkv), which it stores merged. */
    bool pack_matmul;
} slim_optimize_opts;

/* The place stage (pipeline/place.c). */
typedef struct slim_place_opts {
    /* "cpu" (NULL means this) or "cuda", "cuda:N": nodes with a kernel on
     * that device run there, the rest on the CPU, with copies between. */
    const char *device;
} slim_place_opts;

typedef struct slim_load_opts {
    slim_compress_opts compress;
    slim_optimize_opts optimize;
    slim_place_opts place;
} slim_load_opts;

/* Loads an ONNX or .slim model (told by its magic number) through the
 * load pipeline (pipeline/load.c); opts may be NULL. The model is
 * read-only after loading and may be run from several threads at once. */
slim_status slim_model_load(const char *path, const slim_load_opts *opts,
                            slim_model **out, slim_err *err);
void slim_model_free(slim_model *m);

/* Describes graph inputs and outputs. Dims of -1 are dynamic. */
typedef struct slim_io_info {
    const char *name;
    slim_dtype dtype;
    int ndim;               /* -1 when the rank is unknown */
    int64_t dims[SLIM_MAX_DIMS];
    const char *dim_names[SLIM_MAX_DIMS]; /* symbolic names, or NULL */
    /* SEQUENCE or OPTIONAL for a container; dtype and dims then describe
     * its tensors. An OPTIONAL holds a SEQUENCE when elem_kind says so. */
    slim_kind kind, elem_kind;
} slim_io_info;

int slim_model_num_inputs(const slim_model *m);
int slim_model_num_outputs(const slim_model *m);
const slim_io_info *slim_model_input(const slim_model *m, int i);
const slim_io_info *slim_model_output(const slim_model *m, int i);

/* Runs the model. inputs[i] is matched by names[i]. On success *outputs is
 * a new array of n graph outputs in graph order, owned by the caller
 * (slim_tensors_free). On failure nothing is left allocated. */
slim_status slim_model_run(const slim_model *m, int n_inputs,
                           const char *const *names, const slim_tensor *inputs,
                           slim_tensor **outputs, int *n_outputs, slim_err *err);

#ifdef __cplusplus
}
#endif
#endif
