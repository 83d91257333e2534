/*
 * bytes_codec.c - KServe's BYTES datatype: string tensors (SLIM_STRING)
 * from and to the wire, for both protocols.
 *
 * Wire form (Triton's binary tensor data, gRPC's raw contents): per
 * element a 4-byte little-endian length, then that many bytes. JSON form:
 * a list of strings, nested as for numbers.
 *
 * A BYTES input is untrusted in a way a number is not: its size on the
 * wire says little about its size decoded (an empty string is 4 bytes
 * sent and 16 held). So every decoder checks, before it allocates, that
 * the decoded tensor (16 bytes an element plus the bytes) stays within the
 * limit the server sets from --max-request-bytes; and every length is
 * checked against the bytes that are left, with a message naming the
 * input, the element and what was wrong.
 */
#include "buf.h"
#include "codec.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* 0: no limit (a decoder used outside the server, the fuzz targets). */
static _Atomic size_t bytes_limit = 64u << 20;

void slim_server_bytes_set_limit(size_t max_bytes)
{
    atomic_store(&bytes_limit, max_bytes);
}

static uint32_t load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether a string tensor of numel elements holding total bytes fits the
 * limit; the error names the input and the sizes. */
static slim_status check_decoded(const slim_tensor *t, double total, const char *name,
                                 slim_err *err)
{
    size_t limit = atomic_load(&bytes_limit);
    double numel = (double)slim_tensor_numel(t);
    double decoded = numel * (double)sizeof(slim_str) + total;
    if (limit && decoded > (double)limit)
        return slim_errf(err, SLIM_EINVAL,
                         "input '%s': BYTES tensor of %.0f elements and %.0f bytes would take "
                         "%.0f bytes decoded (%zu an element plus the bytes), over the limit of "
                         "%zu bytes (--max-request-bytes)", name, numel, total, decoded,
                         sizeof(slim_str), limit);
    return SLIM_OK;
}

/* t allocated (every element "") with room for total bytes in one block. */
static slim_status alloc_strings(slim_tensor *t, size_t total, slim_err *err)
{
    slim_status s = slim_tensor_alloc(t, err);
    if (s == SLIM_OK && total && (s = slim_tensor_string_reserve(t, total, err)) != SLIM_OK)
        slim_tensor_release(t);
    return s;
}

slim_status slim_server_bytes_from_wire(const void *data, size_t n, slim_tensor *t,
                                        const char *name, const char *what, slim_err *err)
{
    const unsigned char *p = data;
    int64_t numel = slim_tensor_numel(t);
    /* Every element needs its 4-byte length: a count the bytes cannot
     * hold is refused before anything is walked or allocated. */
    if ((double)numel * 4 > (double)n)
        return slim_errf(err, SLIM_EINVAL, "input '%s': %s has %zu bytes, too few for %lld "
                         "BYTES elements (each needs a 4-byte length)", name, what, n,
                         (long long)numel);
    slim_status s = check_decoded(t, (double)n - 4.0 * (double)numel, name, err);
    if (s != SLIM_OK)
        return s;
    size_t pos = 0, total = 0;
    for (int64_t i = 0; i < numel; i++) {
        if (n - pos < 4)
            return slim_errf(err, SLIM_EINVAL, "input '%s': %s ends inside the 4-byte length "
                             "of element %lld (byte %zu of %zu)", name, what, (long long)i, pos, n);
        uint32_t len = load_le32(p + pos);
        pos += 4;
        if (len > n - pos)
            return slim_errf(err, SLIM_EINVAL, "input '%s': element %lld of %s is %u bytes "
                             "long, past the end (%zu bytes left)", name, (long long)i, what,
                             len, n - pos);
        pos += len;
        total += len;
    }
    if (pos != n)
        return slim_errf(err, SLIM_EINVAL, "input '%s': %s has %zu bytes after its %lld "
                         "elements (shape and data disagree)", name, what, n - pos,
                         (long long)numel);
    if ((s = alloc_strings(t, total, err)) != SLIM_OK)
        return s;
    /* The bytes may be a client's shared memory region, read in place,
     * which the client can rewrite between the two walks: each length is
     * read again here, so it is checked again, or a changed one would
     * send the copy past the end of the region. */
    pos = 0;
    for (int64_t i = 0; i < numel && s == SLIM_OK; i++) {
        uint32_t len = n - pos < 4 ? UINT32_MAX : load_le32(p + pos);
        if (n - pos < 4 || len > n - pos - 4) {
            s = slim_errf(err, SLIM_EINVAL, "input '%s': element %lld of %s is %u bytes long, "
                          "past the end: the data changed while it was read", name,
                          (long long)i, what, len);
            break;
        }
        s = slim_tensor_string_set(t, i, (const char *)p + pos + 4, len, err);
        pos += 4 + (size_t)len;
    }
    if (s != SLIM_OK)
        slim_tensor_release(t);
    return s;
}

slim_status slim_server_bytes_from_list(const void *const *ptrs, const size_t *lens,
                                        size_t count, slim_tensor *t, const char *name,
                                        slim_err *err)
{
    double total = 0;
    for (size_t i = 0; i < count; i++)
        total += (double)lens[i];
    slim_status s = check_decoded(t, total, name, err);
    if (s != SLIM_OK || (s = alloc_strings(t, (size_t)total, err)) != SLIM_OK)
        return s;
    for (size_t i = 0; i < count && s == SLIM_OK; i++)
        s = slim_tensor_string_set(t, (int64_t)i, ptrs[i], lens[i], err);
    if (s != SLIM_OK)
        slim_tensor_release(t);
    return s;
}

/* Checks the strings of JSON data (depth-first, the elements' order) and
 * adds up their bytes; *bad gets the first element that is not a UTF-8
 * string (-1: none) and *not_string whether it is not a string at all. */
static void json_strings_scan(const cJSON *v, int64_t *i, double *total, int64_t *bad,
                              bool *not_string)
{
    for (; v && *bad < 0; v = v->next) {
        if (cJSON_IsArray(v)) {
            json_strings_scan(v->child, i, total, bad, not_string); /* cJSON's depth limit */
            continue;
        }
        if (!cJSON_IsString(v)) {
            *bad = *i;
            *not_string = true;
            return;
        }
        const unsigned char *p = (const unsigned char *)v->valuestring;
        size_t n = strlen(v->valuestring);
        for (size_t k = 0; k < n;) {
            size_t l = slim_server_utf8_len(p + k, n - k);
            if (!l) {
                *bad = *i;
                return;
            }
            k += l;
        }
        *total += (double)n;
        (*i)++;
    }
}

static slim_status json_strings_store(const cJSON *v, slim_tensor *t, int64_t *i, slim_err *err)
{
    for (; v; v = v->next) {
        slim_status s;
        if (cJSON_IsArray(v))
            s = json_strings_store(v->child, t, i, err);
        else
            s = slim_tensor_string_set(t, (*i)++, v->valuestring, strlen(v->valuestring), err);
        if (s != SLIM_OK)
            return s;
    }
    return SLIM_OK;
}

slim_status slim_server_bytes_from_json(const cJSON *data, slim_tensor *t, const char *name,
                                        slim_err *err)
{
    int64_t i = 0, bad = -1;
    double total = 0;
    bool not_string = false;
    json_strings_scan(data ? data->child : NULL, &i, &total, &bad, &not_string);
    if (bad >= 0 && not_string)
        return slim_errf(err, SLIM_EINVAL, "input '%s': element %lld is not a string (BYTES "
                         "data in JSON are strings)", name, (long long)bad);
    if (bad >= 0)
        return slim_errf(err, SLIM_EINVAL, "input '%s': element %lld is not valid UTF-8 (JSON "
                         "strings are text; send other bytes as binary data)", name,
                         (long long)bad);
    slim_status s = check_decoded(t, total, name, err);
    if (s != SLIM_OK || (s = alloc_strings(t, (size_t)total, err)) != SLIM_OK)
        return s;
    i = 0;
    if ((s = json_strings_store(data->child, t, &i, err)) != SLIM_OK)
        slim_tensor_release(t);
    return s;
}

/* ---- answers -------------------------------------------------------------- */

size_t slim_server_bytes_wire_size(const slim_tensor *t)
{
    return (size_t)slim_tensor_numel(t) * 4 + slim_tensor_string_total(t);
}

void slim_server_bytes_to_wire(const slim_tensor *t, void *out)
{
    unsigned char *p = out;
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = slim_tensor_string_get(t, i, &len);
        /* An element is at most SLIM_STRING_MAX_LEN (2^31) bytes: it fits. */
        uint32_t l = (uint32_t)len;
        p[0] = (unsigned char)l;
        p[1] = (unsigned char)(l >> 8);
        p[2] = (unsigned char)(l >> 16);
        p[3] = (unsigned char)(l >> 24);
        if (len)
            memcpy(p + 4, s, len);
        p += 4 + len;
    }
}

/* Each byte at most 6 characters ("\u001f", or \ufffd for one that is not
 * UTF-8), plus the quotes and the comma. */
size_t slim_server_bytes_json_bound(const slim_tensor *t)
{
    return (size_t)slim_tensor_numel(t) * 3 + slim_tensor_string_total(t) * 6;
}

void slim_server_bytes_put_json(slim_server_buf *b, const slim_tensor *t)
{
    int64_t n = slim_tensor_numel(t);
    slim_server_buf_puts(b, "\"data\":[");
    for (int64_t i = 0; i < n && !b->oom; i++) {
        size_t len;
        const char *s = slim_tensor_string_get(t, i, &len);
        if (i)
            slim_server_buf_puts(b, ",");
        slim_server_buf_json_bytes(b, s ? s : "", len);
    }
    slim_server_buf_puts(b, "]");
}
