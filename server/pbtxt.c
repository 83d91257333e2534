/*
 * pbtxt.c - a protobuf text format parser with no schema (pbtxt.h has the
 * tree it builds). The grammar, as Triton's configs use it:
 *
 *     message := { field [',' | ';'] }
 *     field   := NAME ':' scalar
 *              | NAME [':'] ( '{' message '}' | '<' message '>' )
 *              | NAME [':'] '[' [ value { ',' value } ] ']'
 *     value   := scalar | '{' message '}' | '<' message '>'
 *     scalar  := ['-'] NUMBER | IDENT | STRING { STRING }
 *
 * '#' starts a comment that runs to the end of the line. Strings take '
 * or " quotes and C's escapes (\n, \t, \\, \", octal \NNN, hex \xHH);
 * adjacent strings are joined. A list's colon is optional because
 * Triton's own examples write `input [ {...} ]`. Extension names
 * ([pkg.ext]) and Any expansions are not part of a model config and are
 * refused.
 *
 * Recursion follows message nesting only, bounded by
 * SLIM_SERVER_PBTXT_MAX_DEPTH, so hostile input cannot exhaust the stack.
 */
#include "pbtxt.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct parser {
    const char *text;
    size_t len, pos;
    int depth;
    int values;            /* counted against SLIM_SERVER_PBTXT_MAX_VALUES */
    slim_err *err;
    bool failed;
} parser;

/* ---- errors ------------------------------------------------------------- */

/* Formats "line L, column C: ..." for the byte at `at`; the first error
 * wins (later ones are consequences). Returns NULL so callers can return
 * it. */
static void *fail_at(parser *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void *fail_at(parser *p, size_t at, const char *fmt, ...)
{
    if (p->failed)
        return NULL;
    p->failed = true;
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    slim_errf(p->err, SLIM_EPARSE, "line %d, column %d: %s", line, col, msg);
    return NULL;
}

static void *fail_oom(parser *p)
{
    if (!p->failed) {
        p->failed = true;
        slim_errf(p->err, SLIM_ENOMEM, "out of memory");
    }
    return NULL;
}

/* ---- lexing ------------------------------------------------------------- */

static void skip_space(parser *p)
{
    while (p->pos < p->len) {
        char c = p->text[p->pos];
        if (c == '#') {
            while (p->pos < p->len && p->text[p->pos] != '\n')
                p->pos++;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
            p->pos++;
        } else {
            return;
        }
    }
}

/* The next significant byte, or 0 at the end. */
static char peek(parser *p)
{
    skip_space(p);
    return p->pos < p->len ? p->text[p->pos] : 0;
}

static bool accept(parser *p, char c)
{
    if (peek(p) != c)
        return false;
    p->pos++;
    return true;
}

static bool is_ident_start(char c)
{
    return isalpha((unsigned char)c) || c == '_';
}

static bool is_ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

/* An identifier at pos into buf (NUL-terminated); false when there is none
 * or it is too long. */
static bool read_ident(parser *p, char *buf, size_t cap)
{
    skip_space(p);
    size_t start = p->pos;
    if (start >= p->len || !is_ident_start(p->text[start]))
        return false;
    while (p->pos < p->len && is_ident_char(p->text[p->pos]))
        p->pos++;
    size_t n = p->pos - start;
    if (n >= cap) {
        fail_at(p, start, "name longer than %zu characters", cap - 1);
        return false;
    }
    memcpy(buf, p->text + start, n);
    buf[n] = '\0';
    return true;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One escape after a backslash at p->pos (which points past it); the byte
 * in *out. */
static bool read_escape(parser *p, unsigned char *out)
{
    size_t at = p->pos - 1;
    if (p->pos >= p->len)
        return fail_at(p, at, "unfinished escape at the end of the text"), false;
    char c = p->text[p->pos++];
    static const char plain[] = "n\nt\tr\ra\ab\bf\fv\v\\\\''\"\"??";
    for (const char *e = plain; *e; e += 2)
        if (c == e[0]) {
            *out = (unsigned char)e[1];
            return true;
        }
    if (c >= '0' && c <= '7') {
        unsigned v = (unsigned)(c - '0');
        for (int i = 0; i < 2 && p->pos < p->len && p->text[p->pos] >= '0' &&
                        p->text[p->pos] <= '7'; i++)
            v = v * 8 + (unsigned)(p->text[p->pos++] - '0');
        if (v > 255)
            return fail_at(p, at, "octal escape over \\377"), false;
        *out = (unsigned char)v;
        return true;
    }
    if (c == 'x' || c == 'X') {
        int v = 0, n = 0;
        while (n < 2 && p->pos < p->len && hex_value(p->text[p->pos]) >= 0)
            v = v * 16 + hex_value(p->text[p->pos++]), n++;
        if (!n)
            return fail_at(p, at, "\\x needs a hex digit"), false;
        *out = (unsigned char)v;
        return true;
    }
    return fail_at(p, at, "unknown escape \\%c", isprint((unsigned char)c) ? c : '?'), false;
}

/* One or more adjacent quoted strings, joined. The text bounds the
 * result's length (an escape never makes it longer). */
static cJSON *read_strings(parser *p)
{
    size_t cap = 64, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return fail_oom(p);
    while (peek(p) == '"' || peek(p) == '\'') {
        char quote = p->text[p->pos];
        size_t open = p->pos++;
        for (;;) {
            if (p->pos >= p->len || p->text[p->pos] == '\n') {
                free(buf);
                return fail_at(p, open, "string not closed on its line");
            }
            unsigned char c = (unsigned char)p->text[p->pos++];
            if (c == (unsigned char)quote)
                break;
            if (c == '\\' && !read_escape(p, &c)) {
                free(buf);
                return NULL;
            }
            if (c == 0) {
                free(buf);
                return fail_at(p, p->pos - 1, "a string may not hold a NUL byte");
            }
            if (n + 1 >= cap) {
                char *grown = realloc(buf, cap *= 2);
                if (!grown) {
                    free(buf);
                    return fail_oom(p);
                }
                buf = grown;
            }
            buf[n++] = (char)c;
        }
    }
    buf[n] = '\0';
    cJSON *s = cJSON_CreateString(buf);
    free(buf);
    return s ? s : fail_oom(p);
}

/* A number: decimal, hex (0x) or octal (leading 0) integers and floats
 * with an optional f suffix, as protobuf writes them. */
static cJSON *read_number(parser *p, bool negative, size_t at)
{
    size_t start = p->pos;
    while (p->pos < p->len && (is_ident_char(p->text[p->pos]) || p->text[p->pos] == '.' ||
                               (p->pos > start && (p->text[p->pos] == '-' || p->text[p->pos] == '+') &&
                                (p->text[p->pos - 1] == 'e' || p->text[p->pos - 1] == 'E'))))
        p->pos++;
    char tok[64];
    size_t n = p->pos - start;
    if (n == 0 || n >= sizeof(tok))
        return fail_at(p, at, "expected a number");
    memcpy(tok, p->text + start, n);
    tok[n] = '\0';
    if (n > 1 && (tok[n - 1] == 'f' || tok[n - 1] == 'F') && !(tok[0] == '0' && (tok[1] == 'x' || tok[1] == 'X')))
        tok[--n] = '\0';
    char *end = NULL;
    double v;
    bool integer = !strpbrk(tok, ".eE") || (tok[0] == '0' && (tok[1] == 'x' || tok[1] == 'X'));
    if (integer) {
        unsigned long long u = strtoull(tok, &end, 0);
        v = (double)u;
    } else {
        v = strtod(tok, &end);
    }
    if (!end || *end || tok[0] == '-' || tok[0] == '+')
        return fail_at(p, at, "\"%s\" is not a number", tok);
    cJSON *num = cJSON_CreateNumber(negative ? -v : v);
    return num ? num : fail_oom(p);
}

/* ---- parsing ------------------------------------------------------------ */

static cJSON *parse_message(parser *p, char close);

static cJSON *parse_scalar(parser *p)
{
    size_t at = (skip_space(p), p->pos);
    char c = peek(p);
    if (c == '"' || c == '\'')
        return read_strings(p);
    bool negative = false;
    if (c == '-') {
        negative = true;
        p->pos++;
        c = peek(p);
    }
    if (isdigit((unsigned char)c) || c == '.')
        return read_number(p, negative, at);
    char ident[128];
    if (!read_ident(p, ident, sizeof(ident)))
        return fail_at(p, at, "expected a value");
    if (!negative && (strcmp(ident, "true") == 0 || strcmp(ident, "True") == 0 ||
                      strcmp(ident, "t") == 0))
        {
        cJSON *b = cJSON_CreateTrue();
        return b ? b : fail_oom(p);
    }
    if (!negative && (strcmp(ident, "false") == 0 || strcmp(ident, "False") == 0 ||
                      strcmp(ident, "f") == 0))
        {
        cJSON *b = cJSON_CreateFalse();
        return b ? b : fail_oom(p);
    }
    if (negative && strcasecmp(ident, "inf") && strcasecmp(ident, "infinity"))
        return fail_at(p, at, "'-' before \"%s\"", ident);
    char text[130];
    snprintf(text, sizeof(text), "%s%s", negative ? "-" : "", ident);
    cJSON *str = cJSON_CreateString(text);
    return str ? str : fail_oom(p);
}

/* A value in a list or after a field name: a nested message or a scalar. */
static cJSON *parse_value(parser *p, bool message_only)
{
    if (++p->values > (int)SLIM_SERVER_PBTXT_MAX_VALUES)
        return fail_at(p, p->pos, "more than %d values", (int)SLIM_SERVER_PBTXT_MAX_VALUES);
    char c = peek(p);
    if (c == '{' || c == '<') {
        size_t open = p->pos++;
        if (p->depth >= SLIM_SERVER_PBTXT_MAX_DEPTH)
            return fail_at(p, open, "messages nested more than %d deep",
                           SLIM_SERVER_PBTXT_MAX_DEPTH);
        p->depth++;
        cJSON *m = parse_message(p, c == '{' ? '}' : '>');
        p->depth--;
        return m;
    }
    if (message_only)
        return fail_at(p, p->pos, "expected '{'");
    return parse_scalar(p);
}

/* Appends v to the array of field `name` in msg, creating it. */
static bool add_value(parser *p, cJSON *msg, const char *name, cJSON *v)
{
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(msg, name);
    if (!arr) {
        arr = cJSON_CreateArray();
        if (!arr || !cJSON_AddItemToObject(msg, name, arr)) {
            cJSON_Delete(arr);
            cJSON_Delete(v);
            return fail_oom(p), false;
        }
    }
    if (!cJSON_AddItemToArray(arr, v)) {
        cJSON_Delete(v);
        return fail_oom(p), false;
    }
    return true;
}

/* '[' already taken: values up to ']'. */
static bool parse_list(parser *p, cJSON *msg, const char *name, size_t open)
{
    if (accept(p, ']'))
        return true;
    for (;;) {
        if (peek(p) == 0)
            return fail_at(p, open, "'[' not closed"), false;
        cJSON *v = parse_value(p, false);
        if (!v || !add_value(p, msg, name, v))
            return false;
        if (accept(p, ']'))
            return true;
        if (!accept(p, ','))
            return fail_at(p, p->pos, "expected ',' or ']' in the list of \"%s\"", name), false;
    }
}

static bool parse_field(parser *p, cJSON *msg)
{
    char name[128];
    size_t at = (skip_space(p), p->pos);
    if (at < p->len && p->text[at] == '[')
        return fail_at(p, at, "extension and Any fields ([...]) are not supported"), false;
    if (!read_ident(p, name, sizeof(name))) {
        if (!p->failed)
            fail_at(p, at, "expected a field name");
        return false;
    }
    bool colon = accept(p, ':');
    char c = peek(p);
    if (c == '[') {
        size_t open = p->pos++;
        return parse_list(p, msg, name, open);
    }
    if (!colon && c != '{' && c != '<')
        return fail_at(p, p->pos, "expected ':' or '{' after \"%s\"", name), false;
    cJSON *v = parse_value(p, !colon);
    return v && add_value(p, msg, name, v);
}

/* Fields up to `close` ('}' or '>'; 0: the end of the text). */
static cJSON *parse_message(parser *p, char close)
{
    cJSON *msg = cJSON_CreateObject();
    if (!msg)
        return fail_oom(p);
    size_t open = p->pos ? p->pos - 1 : 0;
    for (;;) {
        char c = peek(p);
        if (c == 0 && close) {
            cJSON_Delete(msg);
            return fail_at(p, open, "'%c' not closed", close == '}' ? '{' : '<');
        }
        if (c == close) {
            if (close)
                p->pos++;
            return msg;
        }
        if (c == '}' || c == '>' || c == ']') {
            cJSON_Delete(msg);
            return fail_at(p, p->pos, "unexpected '%c'", c);
        }
        if (!parse_field(p, msg)) {
            cJSON_Delete(msg);
            return NULL;
        }
        if (!accept(p, ','))
            accept(p, ';');
    }
}

cJSON *slim_server_pbtxt_parse(const char *text, size_t len, slim_err *err)
{
    parser p = {.text = text, .len = len, .err = err};
    if (len > SLIM_SERVER_PBTXT_MAX_BYTES) {
        slim_errf(err, SLIM_EPARSE, "%zu bytes; a text config may have at most %u", len,
                  SLIM_SERVER_PBTXT_MAX_BYTES);
        return NULL;
    }
    if (memchr(text, '\0', len))
        return fail_at(&p, (size_t)((const char *)memchr(text, '\0', len) - text),
                       "a NUL byte in the text");
    return parse_message(&p, 0);
}
