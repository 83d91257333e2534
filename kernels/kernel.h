/*
 * kernel.h - what CPU kernels share: the operator contract (runtime/op.h),
 * the CPU op registry (registry.c) and helpers (common.c).
 *
 * A kernel file exports one table of slim_op_def, terminated by an entry
 * with op_type NULL, and kernels/registry.c lists the tables.
 */
#ifndef SLIM_KERNEL_H
#define SLIM_KERNEL_H

#include "cancel.h"
#include "graph.h"
#include "op.h"
#include "parallel.h"

/* The CPU registry (registry.c): the def for (domain, op_type, opset) or
 * NULL, from the CPU tables directly (passes that fold constants use it;
 * graphs go through the runtime registry, op_registry.h). */
const slim_op_def *slim_op_lookup(const char *domain, const char *op_type, int opset);
/* Calls fn for every registered op type once (for docs and tests). */
void slim_op_foreach(void (*fn)(const slim_op_def *def, void *user), void *user);

/* ---- helpers shared by kernels (kernels/common.c) ----------------------- */

/* Input i, or NULL when the node has fewer inputs (an optional one left
 * off the end). An empty name in the middle is NULL in ctx->in already. */
static inline const slim_tensor *slim_opt_in(const slim_op_ctx *ctx, int i)
{
    return i < ctx->n_in ? ctx->in[i] : NULL;
}
/* Writes n copies of one es-byte element at dst (memset for an all-zero
 * element, else doubling memcpy: fast for any element size). */
void slim_fill_elems(void *dst, int64_t n, const void *elem, size_t es);

/* Sets out shape to the numpy broadcast of a and b; ESHAPE if incompatible. */
slim_status slim_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b,
                                 int *nout, int64_t *out, slim_err *err);
/* Strides (in elements) of `in` viewed with `out`'s rank, 0 on broadcast
 * axes; in is right-aligned against out. */
void slim_broadcast_strides(int nin, const int64_t *in, int nout,
                            const int64_t *out, int64_t *strides);
/* Contiguous row-major strides in elements. */
void slim_contiguous_strides(int ndim, const int64_t *dims, int64_t *strides);
/* Normalizes a possibly negative axis against rank; EINVAL if out of range. */
slim_status slim_norm_axis(int64_t axis, int rank, int *out, slim_err *err);

/* Fails with ETYPE unless t's dtype is in the list (terminated by
 * SLIM_DTYPE_UNDEFINED); `what` names the input in the message. */
slim_status slim_check_dtype(const slim_tensor *t, const char *what, slim_err *err, ...);
/* Copies dtype and shape of src to dst. */
void slim_tensor_set_like(slim_tensor *dst, const slim_tensor *src);
void slim_tensor_set_shape(slim_tensor *dst, slim_dtype dt, int ndim, const int64_t *dims);

/* Reads a window attribute (kernel_shape, strides, dilations, pads) of up
 * to cap ints into out, each in [min, 2^31 - 1] so that products of two fit
 * in int64; *count is -1 when absent. EINVAL names a value out of range. */
slim_status slim_attr_geometry(const slim_node *node, const char *name, int64_t *out, int cap,
                               int64_t min, int *count, slim_err *err);

/* Reads an int tensor (I32 or I64) into out; ENEEDVALUE if data is NULL. */
slim_status slim_read_ints(const slim_tensor *t, const char *what, int64_t *out,
                           int cap, int *n, slim_err *err);
/* Reads element 0 of a numeric tensor as double/int64; ENEEDVALUE if no data. */
slim_status slim_read_scalar_f64(const slim_tensor *t, const char *what, double *v, slim_err *err);
slim_status slim_read_scalar_i64(const slim_tensor *t, const char *what, int64_t *v, slim_err *err);

/* A float32 pointer to t's data: the data itself for float32, or a
 * converted copy held in *tmp (release it after). t may be NULL. */
slim_status slim_f32_in(const slim_tensor *t, slim_tensor *tmp, const float **out, slim_err *err);
/* A float32 buffer for output t: its own data, or scratch in *tmp that
 * slim_f32_out_finish converts back into t (and the caller releases). */
slim_status slim_f32_out(slim_tensor *t, slim_tensor *tmp, float **out, slim_err *err);
void slim_f32_out_finish(slim_tensor *t, const slim_tensor *tmp);
/* Scratch that grows with the tensors, charged like a tensor to the run's
 * memory account (alloc.h), so --memory-limit bounds a run's whole
 * footprint and not only its outputs. count * size is checked for
 * overflow; zero asks for zeroed bytes. Returns the memory (never NULL on
 * success, even for 0 bytes) or NULL with err filled (SLIM_EOOM naming the
 * limit, or SLIM_ENOMEM). Release *holder with slim_tensor_release; a
 * zero-initialised holder releases as a no-op. */
void *slim_scratch_alloc(slim_tensor *holder, int64_t count, size_t size, bool zero,
                         slim_err *err);
/* The same for an array of count slots of size bytes each, growing a block
 * held in *holder to at least count slots and keeping its content (a
 * realloc through the account); *data follows the block. */
slim_status slim_scratch_grow(slim_tensor *holder, void **data, int64_t count, size_t size,
                              slim_err *err);

/* Window taps: the j in [0, count) with 0 <= start + j*step < limit form
 * [*lo, *hi) (empty when none do). */
void slim_window_range(int64_t start, int64_t step, int64_t count, int64_t limit,
                       int64_t *lo, int64_t *hi);

/* The same as a malloc / calloc / free trio, for kernels whose scratch
 * pointer travels through several exits: NULL on failure, and then
 * slim_scratch_oom fills err with the allocator's message (SLIM_EOOM
 * naming the account's limit, or SLIM_ENOMEM). Memory from these must go
 * back through slim_scratch_free (NULL ok), never free(). */
void *slim_scratch_malloc(size_t bytes);
void *slim_scratch_calloc(size_t count, size_t size);
void slim_scratch_free(void *p);
slim_status slim_scratch_oom(slim_err *err);

/* slim_cancel_poll reads the clock every 1024th call, which suits steps
 * of nanoseconds; a loop whose steps take a good part of a millisecond (a
 * row of a product, a run of a long pool row) calls this instead, which
 * reads it every time (~20 ns). */
static inline bool slim_cancel_check(void)
{
    slim_cancel *c = slim_cancel_current();
    return c && slim_cancel_reason_of(c) != SLIM_CANCEL_NONE;
}


/* cblas_sgemm's row-major contract, split across the kernel threads by rows
 * (or columns when there are few rows), each part a single-threaded BLAS
 * call. slimserve owns the threads: BLAS's own pool would spin against ours
 * and against concurrent requests. */
void slim_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                float *c, int64_t ldc);

/* One product on the calling thread: for kernels that split their own work
 * across the pool (the attention core). With AVX-512 and A not transposed
 * it runs on the project's own kernel (cpu/sgemm_panel.h: no JIT code left
 * behind), otherwise on the same BLAS as slim_sgemm. Calling cblas_sgemm directly would wake OpenBLAS's
 * per-thread buffers besides (about 17 MiB resident for BERT-base's
 * attention at batch 8). */
void slim_sgemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc);
/* The same product where the rows of A are independent items (a batch):
 * in row-invariant mode (slim_gemm_set_row_invariant, set per thread by the
 * CPU and CUDA backends around each kernel from slim_op_ctx.row_invariant,
 * for models that batch) a row's result is bitwise the same
 * whatever other rows share the call; otherwise it is slim_sgemm. */
void slim_sgemm_rows(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc);
/* Sets the calling thread's mode; returns the previous one. */
bool slim_gemm_set_row_invariant(bool on);
/* The calling thread's mode (device kernels follow it too). */
bool slim_gemm_row_invariant(void);

/* Whether the CPU converts fp16 <-> fp32 in hardware (F16C). Not through
 * __builtin_cpu_supports("f16c"): clang 14 does not know that name. */
bool slim_cpu_has_f16c(void);
/* Whether the CPU (and OS) run AVX-512F; the answer is cached. */
bool slim_cpu_has_avx512f(void);

#endif
