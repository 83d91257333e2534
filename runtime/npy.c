/*
 * npy.c - reading and writing NumPy .npy files.
 *
 * The format (numpy/lib/format.py): the magic "\x93NUMPY", a major and a
 * minor version byte, the header length (2 bytes little-endian in 1.0, 4
 * bytes in 2.0 and 3.0), then the header: a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a newline, then the raw data in C order.
 *
 * The header is parsed by a small hand-written scanner rather than by
 * anything general: the writers we meet (numpy, old numpy with 2L-style
 * longs) produce only these three keys with these value forms, and anything
 * else is more likely a corrupt file than a format worth accepting.
 *
 * Loading reads the data straight into the tensor's buffer (no second copy
 * of a large input), and checks the file's size against the shape before
 * allocating, so a corrupt header cannot ask for terabytes.
 */
#include "npy.h"
#include "npy_strings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* numpy itself refuses headers over 10000 bytes unless told otherwise; a
 * little more room costs nothing and still bounds the allocation. */
#define NPY_MAX_HEADER (1u << 20)

static const struct {
    slim_dtype dtype;
    const char *descr;
} npy_types[] = {
    {SLIM_F32, "<f4"}, {SLIM_F16, "<f2"}, {SLIM_F64, "<f8"},  {SLIM_I8, "|i1"},
    {SLIM_I16, "<i2"}, {SLIM_I32, "<i4"}, {SLIM_I64, "<i8"},  {SLIM_U8, "|u1"},
    {SLIM_U16, "<u2"}, {SLIM_U32, "<u4"}, {SLIM_U64, "<u8"},  {SLIM_BOOL, "|b1"},
};

const char *slim_npy_descr(slim_dtype t)
{
    for (size_t i = 0; i < sizeof(npy_types) / sizeof(npy_types[0]); i++)
        if (npy_types[i].dtype == t)
            return npy_types[i].descr;
    return NULL;
}

/* ---- header parsing ----------------------------------------------------- */

typedef struct npy_header {
    slim_dtype dtype;
    int ndim;
    int64_t dims[SLIM_MAX_DIMS];
    char str_kind;      /* strings (npy_strings.c): 'U' or 'S', else 0 */
    size_t itemsize;    /* strings: bytes per element */
} npy_header;

typedef struct scanner {
    const char *p, *end;
    const char *what; /* file name for messages */
    slim_err *err;
} scanner;

static void skip_space(scanner *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static slim_status bad_header(scanner *s, const char *expected)
{
    if (s->p >= s->end)
        return slim_errf(s->err, SLIM_EPARSE, "%s: corrupt header: expected %s, found its end",
                         s->what, expected);
    /* The header need not end in NUL (or in '\n'): quote at most what is
     * left of it, printable bytes only. */
    char near[13];
    size_t n = 0;
    for (const char *q = s->p; q < s->end && n < 12; q++)
        near[n++] = (*q >= 0x20 && *q < 0x7f) ? *q : '?';
    near[n] = '\0';
    return slim_errf(s->err, SLIM_EPARSE, "%s: corrupt header: expected %s at \"%s\"",
                     s->what, expected, near);
}

static bool accept(scanner *s, char c)
{
    skip_space(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

/* A quoted Python string without escapes (none of the valid values have any). */
static slim_status scan_string(scanner *s, char *out, size_t cap)
{
    skip_space(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
        return bad_header(s, "a quoted string");
    char quote = *s->p++;
    size_t n = 0;
    while (s->p < s->end && *s->p != quote) {
        if (n + 1 >= cap)
            return slim_errf(s->err, SLIM_EPARSE, "%s: corrupt header: string too long", s->what);
        out[n++] = *s->p++;
    }
    if (s->p >= s->end)
        return bad_header(s, "a closing quote");
    s->p++;
    out[n] = '\0';
    return SLIM_OK;
}

static slim_status descr_to_dtype(scanner *s, const char *descr, npy_header *h)
{
    slim_dtype *out = &h->dtype;
    bool bad_order;
    if (slim__npy_string_descr(descr, &h->str_kind, &h->itemsize, &bad_order)) {
        if (bad_order)
            return slim_errf(s->err, SLIM_EUNSUPPORTED, "%s: big-endian strings ('%s') are "
                             "not supported", s->what, descr);
        /* Width 0 would let a 100-byte header ask for billions of
         * elements with no data to back them (16 bytes each, held);
         * NumPy never writes it ('|S0' arrays are '|S1'). */
        if (h->itemsize == 0)
            return slim_errf(s->err, SLIM_EPARSE, "%s: corrupt header: strings of width 0 "
                             "('%s'); NumPy writes at least 1", s->what, descr);
        *out = SLIM_STRING;
        return SLIM_OK;
    }
    h->str_kind = 0;
    char order = descr[0];
    const char *kind = descr;
    if (order == '<' || order == '>' || order == '|' || order == '=')
        kind++;
    else
        order = '=';
    for (size_t i = 0; i < sizeof(npy_types) / sizeof(npy_types[0]); i++) {
        if (strcmp(npy_types[i].descr + 1, kind) != 0)
            continue;
        if (order == '>' && slim_dtype_size(npy_types[i].dtype) > 1)
            return slim_errf(s->err, SLIM_EUNSUPPORTED,
                             "%s: big-endian data ('%s') is not supported; save it with "
                             "arr.astype(arr.dtype.newbyteorder('<'))", s->what, descr);
        *out = npy_types[i].dtype;
        return SLIM_OK;
    }
    return slim_errf(s->err, SLIM_EUNSUPPORTED,
                     "%s: NumPy dtype '%s' is not supported (supported: float16/32/64, "
                     "int8/16/32/64, uint8/16/32/64, bool)", s->what, descr);
}

static slim_status scan_shape(scanner *s, npy_header *h)
{
    if (!accept(s, '('))
        return bad_header(s, "a shape tuple \"(\"");
    h->ndim = 0;
    for (;;) {
        if (accept(s, ')'))
            return SLIM_OK;
        skip_space(s);
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return bad_header(s, "a non-negative dimension");
        int64_t d = 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
            if (d > (INT64_MAX - 9) / 10)
                return slim_errf(s->err, SLIM_EPARSE, "%s: corrupt header: dimension too large",
                                 s->what);
            d = d * 10 + (*s->p++ - '0');
        }
        if (s->p < s->end && (*s->p == 'L' || *s->p == 'l')) /* Python 2 longs */
            s->p++;
        if (h->ndim >= SLIM_MAX_DIMS)
            return slim_errf(s->err, SLIM_EUNSUPPORTED, "%s: array has more than %d dimensions",
                             s->what, SLIM_MAX_DIMS);
        h->dims[h->ndim++] = d;
        if (accept(s, ','))
            continue;
        if (accept(s, ')'))
            return SLIM_OK;
        return bad_header(s, "\",\" or \")\" in the shape");
    }
}

static slim_status parse_header(const char *text, size_t len, const char *what,
                                npy_header *h, slim_err *err)
{
    scanner s = {text, text + len, what, err};
    bool have_descr = false, have_order = false, have_shape = false;
    slim_status st;
    if (!accept(&s, '{'))
        return bad_header(&s, "\"{\"");
    while (!accept(&s, '}')) {
        char key[32];
        if ((st = scan_string(&s, key, sizeof(key))))
            return st;
        if (!accept(&s, ':'))
            return bad_header(&s, "\":\"");
        skip_space(&s);
        if (strcmp(key, "descr") == 0) {
            if (s.p < s.end && *s.p == '[')
                return slim_errf(err, SLIM_EUNSUPPORTED,
                                 "%s: structured (record) arrays are not supported", what);
            char descr[32];
            if ((st = scan_string(&s, descr, sizeof(descr))) ||
                (st = descr_to_dtype(&s, descr, h)))
                return st;
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0) {
            if ((size_t)(s.end - s.p) >= 4 && memcmp(s.p, "True", 4) == 0)
                return slim_errf(err, SLIM_EUNSUPPORTED,
                                 "%s: Fortran-order arrays are not supported; save a C-order "
                                 "array (np.ascontiguousarray)", what);
            if ((size_t)(s.end - s.p) < 5 || memcmp(s.p, "False", 5) != 0)
                return bad_header(&s, "True or False for fortran_order");
            s.p += 5;
            have_order = true;
        } else if (strcmp(key, "shape") == 0) {
            if ((st = scan_shape(&s, h)))
                return st;
            have_shape = true;
        } else {
            return slim_errf(err, SLIM_EPARSE, "%s: corrupt header: unexpected key '%s'", what,
                             key);
        }
        if (!accept(&s, ',')) {
            if (accept(&s, '}'))
                break;
            return bad_header(&s, "\",\" or \"}\"");
        }
    }
    skip_space(&s);
    if (s.p != s.end)
        return bad_header(&s, "only padding after the header's \"}\"");
    if (!have_descr || !have_order || !have_shape)
        return slim_errf(err, SLIM_EPARSE, "%s: corrupt header: missing '%s'", what,
                         !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    return SLIM_OK;
}

/* Reads the fixed part in front of the header: returns its length (10 or
 * 12) in *prefix and the header's in *header_len. buf holds avail bytes. */
static slim_status parse_preamble(const unsigned char *buf, size_t avail, const char *what,
                                  size_t *prefix, size_t *header_len, slim_err *err)
{
    if (avail < 8 || memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return slim_errf(err, SLIM_EPARSE, "%s: not a NumPy .npy file (no \\x93NUMPY magic)",
                         what);
    int major = buf[6];
    if (major < 1 || major > 3)
        return slim_errf(err, SLIM_EUNSUPPORTED, "%s: .npy format version %d.%d is not supported",
                         what, major, buf[7]);
    *prefix = major == 1 ? 10 : 12;
    if (avail < *prefix)
        return slim_errf(err, SLIM_EPARSE, "%s: truncated: file ends inside the .npy preamble",
                         what);
    if (major == 1)
        *header_len = buf[8] | (size_t)buf[9] << 8;
    else
        *header_len = buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
                      (size_t)buf[11] << 24;
    if (*header_len > NPY_MAX_HEADER)
        return slim_errf(err, SLIM_EPARSE, "%s: corrupt header: length %zu is implausible", what,
                         *header_len);
    return SLIM_OK;
}

/* Bytes of data the header's shape calls for; EPARSE on overflow. */
static slim_status header_nbytes(const npy_header *h, const char *what, size_t *out,
                                 slim_err *err)
{
    size_t n = h->dtype == SLIM_STRING ? h->itemsize : slim_dtype_size(h->dtype);
    for (int i = 0; i < h->ndim; i++) {
        if (h->dims[i] != 0 && n > SIZE_MAX / (size_t)h->dims[i])
            return slim_errf(err, SLIM_EPARSE, "%s: corrupt header: shape is too large", what);
        n *= (size_t)h->dims[i];
    }
    *out = n;
    return SLIM_OK;
}

static slim_status size_mismatch(const npy_header *h, const char *what, size_t want,
                                 size_t have, slim_err *err)
{
    char shape[160];
    slim_shape_str(h->ndim, h->dims, shape, sizeof(shape));
    if (have < want)
        return slim_errf(err, SLIM_EPARSE,
                         "%s: truncated: %s %s needs %zu bytes of data, the file has %zu", what,
                         slim_dtype_name(h->dtype), shape, want, have);
    return slim_errf(err, SLIM_EPARSE,
                     "%s: corrupt: %zu bytes after the data of %s %s (%zu bytes expected)", what,
                     have - want, slim_dtype_name(h->dtype), shape, want);
}

static slim_status alloc_for(const npy_header *h, slim_tensor *t, slim_err *err)
{
    memset(t, 0, sizeof(*t));
    t->dtype = h->dtype;
    t->ndim = h->ndim;
    memcpy(t->dims, h->dims, sizeof(int64_t) * (size_t)h->ndim);
    return slim_tensor_alloc(t, err);
}

/* ---- public entry points ------------------------------------------------- */

slim_status slim_npy_parse(const void *data, size_t size, const char *what,
                           slim_tensor *out, slim_err *err)
{
    const unsigned char *buf = data;
    size_t prefix, header_len, nbytes = 0;
    npy_header h;
    slim_status st;
    memset(out, 0, sizeof(*out));
    if ((st = parse_preamble(buf, size, what, &prefix, &header_len, err)))
        return st;
    if (size - prefix < header_len)
        return slim_errf(err, SLIM_EPARSE, "%s: truncated: file ends inside the header", what);
    if ((st = parse_header((const char *)buf + prefix, header_len, what, &h, err)) ||
        (st = header_nbytes(&h, what, &nbytes, err)))
        return st;
    size_t have = size - prefix - header_len;
    if (have != nbytes)
        return size_mismatch(&h, what, nbytes, have, err);
    if ((st = alloc_for(&h, out, err)))
        return st;
    if (h.dtype == SLIM_STRING) {
        st = slim__npy_strings_fill(out, h.str_kind, h.itemsize, buf + prefix + header_len,
                                    what, err);
        if (st)
            slim_tensor_release(out);
        return st;
    }
    if (nbytes)
        memcpy(out->data, buf + prefix + header_len, nbytes);
    return SLIM_OK;
}

slim_status slim_npy_load(const char *path, slim_tensor *out, slim_err *err)
{
    memset(out, 0, sizeof(*out));
    FILE *f = fopen(path, "rb");
    if (!f)
        return slim_errf(err, SLIM_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return slim_errf(err, SLIM_EIO, "%s: is a directory, not a .npy file", path);
    }

    unsigned char pre[12];
    char *header = NULL;
    size_t prefix, header_len, nbytes = 0;
    npy_header h;
    slim_status st;
    size_t got = fread(pre, 1, 8, f);
    if (got == 8 && pre[6] >= 2)
        got += fread(pre + 8, 1, 4, f);
    else if (got == 8)
        got += fread(pre + 8, 1, 2, f);
    if ((st = parse_preamble(pre, got, path, &prefix, &header_len, err)))
        goto done;

    header = malloc(header_len + 1);
    if (!header) {
        st = slim_errf(err, SLIM_ENOMEM, "%s: out of memory reading the header", path);
        goto done;
    }
    if (fread(header, 1, header_len, f) != header_len) {
        st = slim_errf(err, SLIM_EPARSE, "%s: truncated: file ends inside the header", path);
        goto done;
    }
    if ((st = parse_header(header, header_len, path, &h, err)) ||
        (st = header_nbytes(&h, path, &nbytes, err)))
        goto done;

    /* Check the size before allocating, when the file can tell us. */
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode)) {
        /* The header was read, so the file is at least prefix + header long. */
        size_t have = (size_t)sb.st_size - prefix - header_len;
        if (have != nbytes) {
            st = size_mismatch(&h, path, nbytes, have, err);
            goto done;
        }
    }
    if ((st = alloc_for(&h, out, err)))
        goto done;
    /* Strings are fixed-width on disk: read, then made elements. */
    unsigned char *raw = h.dtype == SLIM_STRING ? malloc(nbytes ? nbytes : 1) : out->data;
    if (h.dtype == SLIM_STRING && !raw) {
        st = slim_errf(err, SLIM_ENOMEM, "%s: out of memory reading %zu bytes", path, nbytes);
        slim_tensor_release(out);
        goto done;
    }
    got = nbytes ? fread(raw, 1, nbytes, f) : 0;
    if (h.dtype == SLIM_STRING) {
        if (got == nbytes &&
            (st = slim__npy_strings_fill(out, h.str_kind, h.itemsize, raw, path, err))) {
            free(raw);
            slim_tensor_release(out);
            goto done;
        }
        free(raw);
    }
    if (got != nbytes) {
        st = ferror(f) ? slim_errf(err, SLIM_EIO, "%s: read error: %s", path, strerror(errno))
                       : size_mismatch(&h, path, nbytes, got, err);
        slim_tensor_release(out);
        goto done;
    }
    if (fgetc(f) != EOF) { /* a pipe with more after the data */
        st = slim_errf(err, SLIM_EPARSE, "%s: corrupt: extra bytes after the array data", path);
        slim_tensor_release(out);
        goto done;
    }
    st = SLIM_OK;
done:
    free(header);
    fclose(f);
    return st;
}

slim_status slim_npy_save(const char *path, const slim_tensor *t, slim_err *err)
{
    const char *descr = slim_npy_descr(t->dtype);
    char str_descr[32];
    unsigned char *str_data = NULL;
    size_t nbytes = slim_tensor_nbytes(t);
    if (nbytes && !t->data)
        return slim_errf(err, SLIM_EINVAL, "%s: tensor has no data to save", path);
    if (t->dtype == SLIM_STRING) {
        slim_status st = slim__npy_strings_encode(t, str_descr, sizeof(str_descr), &str_data,
                                                  &nbytes, err);
        if (st)
            return slim_err_prefix(err, "%s: ", path);
        descr = str_descr;
    }
    if (!descr)
        return slim_errf(err, SLIM_EUNSUPPORTED, "%s: %s has no NumPy dtype; cannot save it",
                         path, slim_dtype_name(t->dtype));
    const void *payload = str_data ? (const void *)str_data : t->data;

    /* The dict, then spaces and a newline so that data starts at a multiple
     * of 64 bytes, as numpy does (it lets readers mmap aligned arrays). */
    char header[512];
    int n = snprintf(header, sizeof(header), "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
    for (int i = 0; i < t->ndim; i++)
        n += snprintf(header + n, sizeof(header) - (size_t)n, i ? ", %lld" : "%lld",
                      (long long)t->dims[i]);
    n += snprintf(header + n, sizeof(header) - (size_t)n, t->ndim == 1 ? ",), }" : "), }");
    size_t total = 10 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    memset(header + n, ' ', padded - total);
    header[padded - 10 - 1] = '\n';
    size_t header_len = padded - 10;

    unsigned char pre[10];
    memcpy(pre, NPY_MAGIC, NPY_MAGIC_LEN);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (unsigned char)(header_len & 0xff);
    pre[9] = (unsigned char)(header_len >> 8);

    FILE *f = fopen(path, "wb");
    if (!f) {
        free(str_data);
        return slim_errf(err, SLIM_EIO, "%s: cannot create: %s", path, strerror(errno));
    }
    bool ok = fwrite(pre, 1, sizeof(pre), f) == sizeof(pre) &&
              fwrite(header, 1, header_len, f) == header_len &&
              (nbytes == 0 || fwrite(payload, 1, nbytes, f) == nbytes);
    int saved_errno = errno;
    free(str_data);
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved_errno = errno;
    }
    if (!ok) {
        remove(path);
        return slim_errf(err, SLIM_EIO, "%s: write failed: %s", path, strerror(saved_errno));
    }
    return SLIM_OK;
}
