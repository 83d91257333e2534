/*
 * npy.h - NumPy .npy files: how tensors get in and out of `slim run`.
 *
 *     slim_tensor t;
 *     slim_err err;
 *     if (slim_npy_load("x.npy", &t, &err) != SLIM_OK)
 *         fprintf(stderr, "%s\n", err.msg);  // "x.npy: truncated: ..."
 *     ...
 *     slim_npy_save("y.npy", &t, &err);
 *     slim_tensor_release(&t);
 *
 * Format versions 1.0, 2.0 and 3.0 are read; files are written as 1.0 (a
 * header of SLIM_MAX_DIMS dims always fits its 64 KiB). Only little-endian (or byte-sized) numeric
 * and bool dtypes in C order: float16/32/64, int8..int64, uint8..uint64 and
 * bool, and strings as NumPy's fixed-width '<Un' / '|Sn' (npy_strings.c;
 * written as '<Un' when every element is UTF-8). bfloat16 has no NumPy
 * dtype, so it can be neither read nor written.
 * Every error message starts with the file's path.
 */
#ifndef SLIM_NPY_H
#define SLIM_NPY_H

#include "slim.h"

/* Reads path into a new host tensor owned by the caller (slim_tensor_release).
 * On failure *out is left empty. */
slim_status slim_npy_load(const char *path, slim_tensor *out, slim_err *err);

/* Parses a whole .npy file held in memory; `what` names it in messages.
 * The tensor gets its own copy of the data. */
slim_status slim_npy_parse(const void *data, size_t size, const char *what,
                           slim_tensor *out, slim_err *err);

/* Writes t (host data) to path, replacing any existing file. */
slim_status slim_npy_save(const char *path, const slim_tensor *t, slim_err *err);

/* The NumPy descr ("<f4", "|b1") of a dtype, or NULL if NumPy has none. */
const char *slim_npy_descr(slim_dtype t);

#endif
