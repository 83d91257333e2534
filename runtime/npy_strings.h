/* npy_strings.h - string arrays in .npy files, for npy.c (npy_strings.c). */
#ifndef SLIM_NPY_STRINGS_H
#define SLIM_NPY_STRINGS_H

#include "slim.h"

/* Whether descr is a string dtype ('<U7', '|S3'): its kind ('U' or 'S')
 * and bytes per element; *bad_order for big-endian UTF-32. */
bool slim__npy_string_descr(const char *descr, char *kind, size_t *itemsize, bool *bad_order);
/* Sets every element of string tensor t from the fixed-width raw data. */
slim_status slim__npy_strings_fill(slim_tensor *t, char kind, size_t itemsize,
                                   const unsigned char *raw, const char *what, slim_err *err);
/* t's elements as fixed-width data (malloc'd into *data) and its descr. */
slim_status slim__npy_strings_encode(const slim_tensor *t, char *descr, size_t cap,
                                     unsigned char **data, size_t *nbytes, slim_err *err);

#endif
