/*
 * string_tensor.h - the runtime's side of string tensors (the public helpers are
 * in slim.h, "string tensors").
 *
 * A string tensor's buffer is one block from the CPU's allocator: a small
 * header (the list of byte chunks), then numel slim_str slots, which
 * t->data points at. Element bytes live in chunks, each a slim_buffer of
 * the same allocator, so every byte is charged to the account that was
 * current when it was set. The buffer's release callback drops the chunks
 * with the slots: the bytes die with the last tensor that views them.
 *
 * Why not the arena: an element's bytes are known only once a kernel has
 * computed them, so the planner cannot size them; and views (Reshape,
 * Identity) share a tensor's slots, so the bytes have to live exactly as
 * long as the shared buffer, which its reference count already tracks.
 * The planner therefore leaves string values out (plan.c) and the
 * executor gives each its own buffer, freed after its last reader.
 *
 * Kernels that only move elements (Gather, Concat, Transpose...) copy
 * slots, which then point at the input's bytes. Right after such a node
 * runs, the executor calls slim__tensor_string_own on each string output,
 * which copies foreign bytes into the output's own chunk, so no tensor
 * ever points at bytes another tensor frees.
 */
#ifndef SLIM_STRING_TENSOR_H
#define SLIM_STRING_TENSOR_H

#include "device.h"
#include "op.h"

/* Allocates a string tensor's block (every slot ""), on the CPU. */
slim_status slim__tensor_string_alloc(slim_tensor *t, slim_err *err);
/* Whether t's buffer is a string block (slim__tensor_string_alloc's). */
bool slim__tensor_string_is_owned(const slim_tensor *t);
/* Makes every element's bytes t's own (copies those that point outside
 * t's chunks into one new chunk). t must come from
 * slim__tensor_string_alloc. Checks every slot: a NULL pointer with a
 * length, or a length past SLIM_STRING_MAX_LEN, is SLIM_EINTERNAL. */
slim_status slim__tensor_string_own(slim_tensor *t, slim_err *err);
/* Element i made len bytes long in t's own bytes, for the caller to fill
 * (a kernel that builds an element from pieces writes it in place): the
 * bytes, or NULL with err filled (as slim_tensor_string_set). */
char *slim__tensor_string_make(slim_tensor *t, int64_t i, size_t len, slim_err *err);
/* Checks the slots of a string tensor the caller made (a run's input):
 * lengths in range, no NULL pointer with a length. */
slim_status slim__tensor_string_check(const slim_tensor *t, const char *what, slim_err *err);

/* Whether op may see string tensors: SLIM_OP_STRINGS, or one of the ops
 * that copy whole elements without reading them (views, Gather, Concat,
 * Transpose, ...) or read only shapes. */
bool slim__op_takes_strings(const slim_op_def *op);

#endif
