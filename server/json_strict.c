/*
 * json_strict.c - the request body's JSON read strictly: cJSON alone is
 * lenient (trailing data, "3136.0" as an integer, a NUL cutting a string
 * short), and the bytes its tree can take bounded before it is built
 * (codec.h). Moved out of infer_codec.c unchanged.
 */
#include "codec.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- strict JSON --------------------------------------------------------- */

/* cJSON keeps a number as a double, so "3136.0" and "3136" read the same,
 * yet a field that is a count or a dimension written with a fraction is a
 * client bug worth naming (Triton refuses it too). The text is therefore
 * read once more beside the parsed tree, number for number in document
 * order, and a number written with '.', 'e' or 'E' gets
 * SLIM_SERVER_JSON_NOT_INTEGRAL (codec.h) in its type. */

typedef struct json_scan {
    const char *p, *end;
    const char *nul;                /* the first string holding a NUL, or NULL */
} json_scan;

static void scan_string(json_scan *s)
{
    const char *start = s->p++;
    while (s->p < s->end && *s->p != '"') {
        bool nul = *s->p == '\0' ||
                   (*s->p == '\\' && s->end - s->p >= 6 && memcmp(s->p + 1, "u0000", 5) == 0);
        if (nul && !s->nul)
            s->nul = start;
        s->p += *s->p == '\\' && s->end - s->p >= 2 ? 2 : 1;
    }
    if (s->p < s->end)
        s->p++;
}

/* The next number token (cJSON's: a '-' or digit, then [0-9+-.eE]), or
 * NULL; strings on the way are skipped and checked. */
static const char *scan_number(json_scan *s, size_t *len)
{
    while (s->p < s->end) {
        char c = *s->p;
        if (c == '"') {
            scan_string(s);
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            const char *start = s->p;
            while (s->p < s->end && ((*s->p >= '0' && *s->p <= '9') || *s->p == '+' ||
                                     *s->p == '-' || *s->p == '.' || *s->p == 'e' || *s->p == 'E'))
                s->p++;
            *len = (size_t)(s->p - start);
            return start;
        } else {
            s->p++;
        }
    }
    return NULL;
}

static void mark_numbers(cJSON *v, json_scan *s)
{
    for (; v; v = v->next) {
        size_t n;
        const char *t;
        if (cJSON_IsNumber(v) && (t = scan_number(s, &n)) &&
            (memchr(t, '.', n) || memchr(t, 'e', n) || memchr(t, 'E', n)))
            v->type |= SLIM_SERVER_JSON_NOT_INTEGRAL;
        else if (v->child)
            mark_numbers(v->child, s); /* depth: cJSON's nesting limit */
    }
}

cJSON *slim_server_json_parse(const char *text, size_t len, slim_err *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        slim_errf(err, SLIM_EPARSE, "malformed JSON in the request body near byte %ld",
                  end && end >= text ? (long)(end - text) : 0L);
        return NULL;
    }
    while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
        end++;
    if (end < text + len) {
        slim_errf(err, SLIM_EPARSE, "unexpected data after the JSON value at byte %ld",
                  (long)(end - text));
        cJSON_Delete(root);
        return NULL;
    }
    json_scan scan = {text, text + len, NULL};
    mark_numbers(root, &scan);
    while (scan_number(&scan, &(size_t){0})) /* the strings after the last number */
        ;
    if (scan.nul) {
        slim_errf(err, SLIM_EINVAL, "the string at byte %ld of the request body holds a NUL "
                  "(\\u0000), which no name or id may contain (a BYTES element holding a NUL "
                  "goes in binary)", (long)(scan.nul - text));
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

bool slim_server_json_integer(const cJSON *v, double lo, double hi, int64_t *out)
{
    if (!cJSON_IsNumber(v) || (v->type & SLIM_SERVER_JSON_NOT_INTEGRAL) || v->valuedouble < lo ||
        v->valuedouble > hi || v->valuedouble != floor(v->valuedouble))
        return false;
    *out = (int64_t)v->valuedouble;
    return true;
}

/* What cJSON mallocs to parse text, at most. Every value is one cJSON node
 * (64 bytes; 80 with glibc's chunk header and rounding), and a value is the
 * root or follows a '[', '{' or ','; every key and string value is one more
 * block of at most its quoted length plus a terminator, header and rounding.
 * Counting those bytes over-counts (commas inside strings), never under.
 * Measured with glibc's mallinfo2 around cJSON_ParseWithLength (cJSON
 * 1.7.15): 80 bytes per value; 3.8 bytes per body byte for float32 data as
 * Python's json writes it (21 bytes a number), 40 for one-digit integers,
 * 1.0 for one long string. The bound gives 4.8, 41 and 1.0. */
#define JSON_NODE_BYTES 80
#define JSON_STRING_OVERHEAD 32

size_t slim_server_json_parse_bound(const char *text, size_t len)
{
    size_t values = 1, strings = 0;
    for (const char *p = text, *end = text + len; p < end; p++) {
        char c = *p;
        values += c == ',' || c == '[' || c == '{';
        strings += c == '"';
    }
    return values * JSON_NODE_BYTES + len + (strings / 2 + 1) * JSON_STRING_OVERHEAD;
}
