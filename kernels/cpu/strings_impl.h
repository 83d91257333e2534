/*
 * strings_impl.h - what the string kernels share (strings.c, strings_ml.c,
 * strings_cast.c, strings_regex.c): element access, a growing scratch
 * buffer for building one element, and a broadcast walk.
 */
#ifndef SLIM_STRINGS_IMPL_H
#define SLIM_STRINGS_IMPL_H

#include "kernel.h"
#include "string_tensor.h"

#include <string.h>

/* Most elements a string kernel makes in one output: a hostile input
 * (a million delimiters in each of a million strings) is refused by
 * count before anything is sized from it. */
#define SLIM_STRINGS_MAX_ELEMS ((int64_t)1 << 28)

static inline slim_str slim_str_at(const slim_tensor *t, int64_t i)
{
    return ((const slim_str *)t->data)[i];
}

static inline bool slim_str_eq(slim_str a, const char *b, size_t blen)
{
    return a.len == blen && (!blen || memcmp(a.ptr, b, blen) == 0);
}

/* Bytes for building one element, grown as needed (scratch of the run's
 * account); free with slim_strbuf_free. */
typedef struct slim_strbuf {
    char *p;
    size_t len, cap;
} slim_strbuf;

slim_status slim_strbuf_put(slim_strbuf *b, const char *s, size_t n, slim_err *err);
void slim_strbuf_free(slim_strbuf *b);

/* Element offsets of a and b for each output element of their numpy
 * broadcast, in order: fills ia/ib (n_out each). */
void slim_broadcast_index2(const slim_tensor *a, const slim_tensor *b, const slim_tensor *out,
                           int64_t *ia, int64_t *ib);

/* Checks that input `what` is a string tensor (dtype only while planning). */
slim_status slim_check_strings(const slim_tensor *t, const char *what, slim_err *err);

/* The Equal and Cast of slimserve before strings (elementwise.c,
 * cast.c), which the string-aware ones hand every other type to. */
const slim_op_def *slim__strings_delegate(const char *op_type, int before);

#include "strings_regex.h"

#endif
