/*
 * reply.c - what the HTTP layer writes: growable byte buffers, JSON
 * strings, and the reply (status, body, content type) a route fills in.
 *
 * Every reply body passes through here, so this is where the invariant
 * "a reply is valid UTF-8 JSON whatever a model or a client sent" is kept:
 * strings are escaped as JSON, and text cJSON prints is re-checked and any
 * invalid byte replaced before it leaves (utf8_sanitize). A reply may
 * also carry parts, bytes sent after its body straight from tensors'
 * buffers (binary outputs), which go to libmicrohttpd as an I/O vector.
 */
#include "device.h"
#include "server.h"

#include <microhttpd.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small helpers ------------------------------------------------------ */

int64_t slim_server_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

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
    size_t n = strlen(s);
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

void slim_server_reply_parts_free(slim_server_reply_part *parts, int n)
{
    for (int i = 0; i < n; i++)
        if (parts[i].buf)
            slim_buffer_unref(parts[i].buf);
}

size_t slim_server_reply_size(const slim_server_reply *r)
{
    size_t n = r->len;
    for (int i = 0; i < r->n_parts; i++)
        n += r->parts[i].len;
    return n;
}

void slim_server_reply_free(slim_server_reply *r)
{
    slim_server_reply_parts_free(r->parts, r->n_parts);
    free(r->parts);
    free(r->body);
    memset(r, 0, sizeof(*r));
    r->infer_header_len = -1;
}

void slim_server_reply_error(slim_server_reply *r, int status, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    slim_server_reply_free(r);
    slim_server_buf b = {0};
    slim_server_buf_puts(&b, "{\"error\":");
    slim_server_buf_json_string(&b, msg);
    slim_server_buf_puts(&b, "}");
    r->status = b.oom ? 500 : status;
    r->body = b.data;
    r->len = b.len;
    r->content_type = "application/json";
}

/* cJSON prints strings' bytes as they are. Bytes that are not UTF-8 can
 * only sit inside strings, so each becomes U+FFFD there. NULL: no memory. */
static char *utf8_sanitize(char *text)
{
    size_t n = strlen(text), bad = 0;
    for (size_t i = 0; i < n;) {
        size_t len = slim_server_utf8_len((const unsigned char *)text + i, n - i);
        bad += !len;
        i += len ? len : 1;
    }
    if (!bad)
        return text;
    char *out = malloc(n + 2 * bad + 1), *o = out;
    for (size_t i = 0; out && i < n;) {
        size_t len = slim_server_utf8_len((const unsigned char *)text + i, n - i);
        if (len) {
            memcpy(o, text + i, len);
            o += len;
            i += len;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    if (out)
        *o = '\0';
    free(text);
    return out;
}

void slim_server_reply_json(slim_server_reply *r, int status, cJSON *json)
{
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (text)
        text = utf8_sanitize(text);
    if (!text) {
        slim_server_reply_error(r, 500, "out of memory while writing the response");
        return;
    }
    slim_server_reply_free(r);
    r->status = status;
    r->body = text;
    r->len = strlen(text);
    r->content_type = "application/json";
}

/* ---- handing a reply to libmicrohttpd ----------------------------------- */

/* What a reply with parts leaves with MHD: its body and the parts' buffer
 * references, dropped once MHD has sent them (or given up). */
typedef struct sent_parts {
    char *body;
    slim_server_reply_part *parts;
    int n_parts;
} sent_parts;

static void sent_parts_free(void *cls)
{
    sent_parts *sp = cls;
    slim_server_reply_parts_free(sp->parts, sp->n_parts);
    free(sp->parts);
    free(sp->body);
    free(sp);
}

/* A reply with binary parts goes out as an I/O vector: the JSON header,
 * then each output straight from its tensor's memory, so a 1 GiB binary
 * answer is never copied into a second 1 GiB buffer. */
struct MHD_Response *slim_server_reply_response(slim_server_reply *r)
{
    if (!r->n_parts) {
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
        if (resp)
            r->body = NULL; /* MHD owns it now */
        return resp;
    }
    struct MHD_IoVec *iov = calloc((size_t)r->n_parts + 1, sizeof(*iov));
    sent_parts *sp = calloc(1, sizeof(*sp));
    struct MHD_Response *resp = NULL;
    if (iov && sp) {
        iov[0] = (struct MHD_IoVec){r->body, r->len};
        for (int i = 0; i < r->n_parts; i++)
            iov[i + 1] = (struct MHD_IoVec){r->parts[i].data, r->parts[i].len};
        *sp = (sent_parts){r->body, r->parts, r->n_parts};
        resp = MHD_create_response_from_iovec(iov, (unsigned)r->n_parts + 1, sent_parts_free, sp);
    }
    free(iov); /* MHD keeps its own copy of the vector */
    if (!resp) {
        free(sp);
        return NULL;
    }
    r->body = NULL;
    r->parts = NULL;
    r->n_parts = 0;
    return resp;
}
