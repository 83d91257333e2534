/*
 * buf.c - growable byte buffers, JSON strings and the UTF-8 check (buf.h).
 * A buffer that fails to grow stays failed (oom), so a builder makes all its
 * appends and checks once; a JSON string escapes what JSON needs and turns
 * bytes that are not UTF-8 into U+FFFD, which is what keeps every reply
 * valid JSON whatever a client or a model sent.
 */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool buf_reserve(slim_server_buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void slim_server_buf_append(slim_server_buf *b, const void *p, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void slim_server_buf_puts(slim_server_buf *b, const char *s)
{
    slim_server_buf_append(b, s, strlen(s));
}

void slim_server_buf_printf(slim_server_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[128];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(small)) {
        slim_server_buf_append(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the well-formed UTF-8 sequence at p (n bytes left), or 0 when
 * it is not one (RFC 3629: no overlongs, no surrogates, nothing past
 * U+10FFFF). */
size_t slim_server_utf8_len(const unsigned char *p, size_t n)
{
    unsigned char lo = 0x80, hi = 0xBF;
    size_t len;
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xC2 && p[0] <= 0xDF)
        len = 2;
    else if (p[0] >= 0xE0 && p[0] <= 0xEF)
        len = 3, lo = p[0] == 0xE0 ? 0xA0 : 0x80, hi = p[0] == 0xED ? 0x9F : 0xBF;
    else if (p[0] >= 0xF0 && p[0] <= 0xF4)
        len = 4, lo = p[0] == 0xF0 ? 0x90 : 0x80, hi = p[0] == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return len;
}

void slim_server_buf_json_string(slim_server_buf *b, const char *s)
{
    slim_server_buf_json_bytes(b, s, strlen(s));
}

void slim_server_buf_json_bytes(slim_server_buf *b, const char *s, size_t n)
{
    slim_server_buf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s, *end = p + n; p < end;) {
        size_t len = slim_server_utf8_len(p, (size_t)(end - p));
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            slim_server_buf_append(b, esc, 2);
        } else if (*p < 0x20) {
            slim_server_buf_printf(b, "\\u%04x", *p);
        } else if (len == 0) {
            slim_server_buf_puts(b, "\\ufffd"); /* the client's bytes, not UTF-8 */
            len = 1;
        } else {
            slim_server_buf_append(b, p, len);
        }
        p += len ? len : 1;
    }
    slim_server_buf_puts(b, "\"");
}

void slim_server_buf_free(slim_server_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}
