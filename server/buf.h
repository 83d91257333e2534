/*
 * buf.h - a growable byte buffer that every text the server writes is built
 * in (replies, metrics, JSON strings), and the UTF-8 check behind the rule
 * "a reply is valid UTF-8 whatever a model or a client sent" (buf.c).
 *
 *     slim_server_buf b = {0};
 *     slim_server_buf_printf(&b, "slim_up %d\n", 1);
 *     if (b.oom) ...;          (checked once, at the end)
 *     slim_server_buf_free(&b);
 */
#ifndef SLIM_SERVER_BUF_H
#define SLIM_SERVER_BUF_H

#include <stdbool.h>
#include <stddef.h>

/* Appends never fail loudly: an allocation failure sets oom and later
 * appends do nothing, so a builder is checked once, at the end. */
typedef struct slim_server_buf {
    char *data;
    size_t len, cap;
    bool oom;
} slim_server_buf;

void slim_server_buf_append(slim_server_buf *b, const void *p, size_t n);
void slim_server_buf_puts(slim_server_buf *b, const char *s);
void slim_server_buf_printf(slim_server_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "quoted"; bytes that are not valid UTF-8 become \ufffd, so a reply that
 * echoes a client's bytes is still valid UTF-8 JSON. */
void slim_server_buf_json_string(slim_server_buf *b, const char *s);
/* The same for n bytes that may hold a NUL (written \u0000). */
void slim_server_buf_json_bytes(slim_server_buf *b, const char *s, size_t n);
void slim_server_buf_free(slim_server_buf *b);
/* Length of the well-formed UTF-8 sequence at p (n bytes left), 0 if none. */
size_t slim_server_utf8_len(const unsigned char *p, size_t n);

#endif
