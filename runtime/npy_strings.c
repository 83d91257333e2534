/*
 * npy_strings.c - string arrays in .npy files (npy.c): NumPy's fixed-width
 * '<Un' (n UTF-32 code points per element) and '|Sn' (n bytes), each
 * element padded with zeros at its end, which are dropped on reading (as
 * NumPy does). Strings are written as '<Un' when every element is UTF-8,
 * as '|Sn' otherwise. Object arrays ('|O', pickled) are not read.
 */
#include "npy_strings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Widest element accepted: a header cannot ask for more per element. */
#define NPY_STR_MAX_WIDTH ((size_t)1 << 24)

bool slim__npy_string_descr(const char *descr, char *kind, size_t *itemsize, bool *bad_order)
{
    char order = descr[0];
    const char *k = descr;
    if (order == '<' || order == '>' || order == '|' || order == '=')
        k++;
    if (*k != 'U' && *k != 'S')
        return false;
    char *end;
    unsigned long long n = strtoull(k + 1, &end, 10);
    if (end == k + 1 || *end || n > NPY_STR_MAX_WIDTH)
        return false;
    *kind = *k;
    *itemsize = (size_t)n * (*k == 'U' ? 4 : 1);
    *bad_order = *k == 'U' && order == '>';
    return true;
}

static size_t utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80)
        return o[0] = (char)cp, 1;
    if (cp < 0x800)
        return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3F)),
               o[2] = (char)(0x80 | (cp & 0x3F)), 3;
    return o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3F)),
           o[2] = (char)(0x80 | (cp >> 6 & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F)), 4;
}

slim_status slim__npy_strings_fill(slim_tensor *t, char kind, size_t itemsize,
                                   const unsigned char *raw, const char *what, slim_err *err)
{
    int64_t n = slim_tensor_numel(t);
    char *tmp = malloc(itemsize + 1); /* UTF-8 of n code points fits 4n bytes */
    if (!tmp)
        return slim_errf(err, SLIM_ENOMEM, "%s: out of memory", what);
    slim_status st = SLIM_OK;
    for (int64_t i = 0; !st && i < n; i++) {
        const unsigned char *e = raw + (size_t)i * itemsize;
        size_t len = 0;
        if (kind == 'S') {
            len = itemsize;
            while (len && !e[len - 1])
                len--;
            memcpy(tmp, e, len);
        } else {
            size_t cps = itemsize / 4;
            while (cps && !(e[4 * cps - 4] | e[4 * cps - 3] | e[4 * cps - 2] | e[4 * cps - 1]))
                cps--;
            for (size_t c = 0; c < cps; c++) {
                uint32_t cp = (uint32_t)e[4 * c] | (uint32_t)e[4 * c + 1] << 8 |
                              (uint32_t)e[4 * c + 2] << 16 | (uint32_t)e[4 * c + 3] << 24;
                if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                    st = slim_errf(err, SLIM_EPARSE, "%s: element %lld holds code point 0x%x, "
                                   "which is not Unicode", what, (long long)i, cp);
                    break;
                }
                len += utf8_put(cp, tmp + len);
            }
        }
        if (!st)
            st = slim_tensor_string_set(t, i, tmp, len, err);
    }
    free(tmp);
    return st;
}

/* Code points of s (n bytes), or -1 when it is not UTF-8. */
static int64_t utf8_count(const unsigned char *s, size_t n, uint32_t *out)
{
    int64_t count = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        int len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3
                : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!len || i + (size_t)len > n)
            return -1;
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return -1;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_of[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return -1;
        if (out)
            out[count] = cp;
        count++;
        i += (size_t)len;
    }
    return count;
}

slim_status slim__npy_strings_encode(const slim_tensor *t, char *descr, size_t cap,
                                     unsigned char **data, size_t *nbytes, slim_err *err)
{
    int64_t n = slim_tensor_numel(t);
    bool utf8 = true;
    size_t widest_cp = 0, widest = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = slim_tensor_string_get(t, i, &len);
        int64_t cps = utf8_count((const unsigned char *)s, len, NULL);
        utf8 = utf8 && cps >= 0;
        if (cps > (int64_t)widest_cp)
            widest_cp = (size_t)cps;
        if (len > widest)
            widest = len;
    }
    size_t width = utf8 ? widest_cp : widest, item = utf8 ? 4 * width : width;
    if (width == 0)
        width = 1, item = utf8 ? 4 : 1; /* NumPy's '<U1' for all-empty */
    if (n && item > SIZE_MAX / (size_t)n)
        return slim_errf(err, SLIM_EINVAL, "strings too large for a .npy file");
    snprintf(descr, cap, utf8 ? "<U%zu" : "|S%zu", width);
    *nbytes = item * (size_t)n;
    *data = calloc(*nbytes ? *nbytes : 1, 1);
    if (!*data)
        return slim_errf(err, SLIM_ENOMEM, "out of memory writing strings");
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = slim_tensor_string_get(t, i, &len);
        unsigned char *e = *data + (size_t)i * item;
        if (!utf8) {
            if (len)
                memcpy(e, s, len);
            continue;
        }
        uint32_t *cps = malloc(sizeof(uint32_t) * (len ? len : 1));
        if (!cps) {
            free(*data);
            return slim_errf(err, SLIM_ENOMEM, "out of memory writing strings");
        }
        int64_t c = utf8_count((const unsigned char *)s, len, cps);
        for (int64_t k = 0; k < c; k++)
            for (int b = 0; b < 4; b++)
                e[4 * k + b] = (unsigned char)(cps[k] >> (8 * b));
        free(cps);
    }
    return SLIM_OK;
}
