/*
 * reply.c - what the HTTP layer writes: the reply (status, body, content
 * type) a route fills in, and its handing to libmicrohttpd. The byte
 * buffers and JSON strings replies are built from are in buf.c.
 *
 * Every reply body passes through here, so this is where the invariant
 * "a reply is valid UTF-8 JSON whatever a model or a client sent" is kept:
 * strings are escaped as JSON (buf.c), and text cJSON prints is re-checked
 * and any invalid byte replaced before it leaves (utf8_sanitize). A reply may
 * also carry parts, bytes sent after its body straight from tensors'
 * buffers (binary outputs), which go to libmicrohttpd as an I/O vector.
 */
#include "buf.h"
#include "codec.h"
#include "device.h"

#include <microhttpd.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replies up to this size (body and binary parts) go out as one buffer. */
#define REPLY_COALESCE_MAX ((size_t)64 << 10)

/* ---- replies ------------------------------------------------------------ */

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

/* A small reply's parts copied after its body, in one buffer: libmicrohttpd
 * then sends the status line, headers and body in one system call (an I/O
 * vector response takes two, and two TCP segments the client reads apart),
 * and a copy of a few KiB costs less than either. False (r untouched) when
 * it is larger, or out of memory. */
static bool coalesce_parts(slim_server_reply *r)
{
    size_t total = r->len;
    for (int i = 0; i < r->n_parts; i++)
        total += r->parts[i].len;
    if (total > REPLY_COALESCE_MAX)
        return false;
    char *p = malloc(total ? total : 1);
    if (!p)
        return false;
    if (r->len)
        memcpy(p, r->body, r->len);
    size_t at = r->len;
    for (int i = 0; i < r->n_parts; i++) {
        if (r->parts[i].len)
            memcpy(p + at, r->parts[i].data, r->parts[i].len);
        at += r->parts[i].len;
    }
    slim_server_reply_parts_free(r->parts, r->n_parts);
    free(r->parts);
    free(r->body);
    r->parts = NULL;
    r->n_parts = 0;
    r->body = p;
    r->len = total;
    return true;
}

/* A reply with binary parts goes out as an I/O vector: the JSON header,
 * then each output straight from its tensor's memory, so a 1 GiB binary
 * answer is never copied into a second 1 GiB buffer; a small one is one
 * buffer (coalesce_parts). */
struct MHD_Response *slim_server_reply_response(slim_server_reply *r)
{
    if (r->n_parts)
        coalesce_parts(r);
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
