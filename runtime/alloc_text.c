/*
 * alloc_text.c - the allocator's figures as text: byte counts for people
 * ("12.0 MiB"), sizes from people ("2GiB"), and the memory summary table.
 * Kept apart from alloc.c so the allocator itself reads as one piece.
 */
#include "alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *slim_format_bytes(size_t bytes, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, cap, "%zu B", bytes);
        return buf;
    }
    double v = (double)bytes;
    int u = 0;
    /* 1023.97 KiB would print as "1024.0 KiB": promote it to "1.0 MiB". */
    while (v >= 1023.95 && u < 6) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

#define SUMMARY_LABEL_WIDTH 38
#define SUMMARY_WIDTH (1 + SUMMARY_LABEL_WIDTH + 4 * 13)

typedef struct summary_row {
    const char *label;
    size_t offset;              /* of the per-pool array in slim_mem_stats */
    bool bytes;
} summary_row;

static void summary_cell(FILE *f, int64_t v, bool bytes)
{
    char buf[32];
    if (bytes)
        fprintf(f, " %12s", slim_format_bytes(v < 0 ? 0 : (size_t)v, buf, sizeof(buf)));
    else
        fprintf(f, " %12lld", (long long)v);
}

static void summary_line(FILE *f, const char *label, const slim_mem_stat *st, bool bytes)
{
    fprintf(f, " %-*s", SUMMARY_LABEL_WIDTH, label);
    summary_cell(f, st->current, bytes);
    summary_cell(f, st->peak, bytes);
    summary_cell(f, st->allocated, bytes);
    summary_cell(f, st->freed, bytes);
    fputc('\n', f);
}

char *slim_mem_stats_summary(const slim_mem_stats *s, const char *device)
{
    static const summary_row rows[] = {
        {"Allocated memory", offsetof(slim_mem_stats, allocated_bytes), true},
        {"Active memory", offsetof(slim_mem_stats, active_bytes), true},
        {"Requested memory", offsetof(slim_mem_stats, requested_bytes), true},
        {"Reserved memory", offsetof(slim_mem_stats, reserved_bytes), true},
        {"Non-releasable memory (inactive split)", offsetof(slim_mem_stats, inactive_split_bytes),
         true},
        {"Allocations", offsetof(slim_mem_stats, allocation), false},
        {"Active allocs", offsetof(slim_mem_stats, active), false},
        {"Reserved segments", offsetof(slim_mem_stats, segment), false},
        {"Non-releasable allocs", offsetof(slim_mem_stats, inactive_split), false},
    };
    if (!s)
        return NULL;
    char rule[SUMMARY_WIDTH + 2];
    memset(rule, '-', SUMMARY_WIDTH);
    rule[SUMMARY_WIDTH] = '\n';
    rule[SUMMARY_WIDTH + 1] = '\0';
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fprintf(f, " Memory of %s\n", device ? device : "device");
    fputs(rule, f);
    fprintf(f, " %-*s %12s %12s %12s %12s\n", SUMMARY_LABEL_WIDTH, "Metric", "Cur Usage",
            "Peak Usage", "Tot Alloc", "Tot Freed");
    fputs(rule, f);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const slim_mem_stat *per_pool = (const slim_mem_stat *)((const char *)s + rows[i].offset);
        summary_line(f, rows[i].label, &per_pool[SLIM_POOL_ALL], rows[i].bytes);
        summary_line(f, "   from large pool", &per_pool[SLIM_POOL_LARGE], rows[i].bytes);
        summary_line(f, "   from small pool", &per_pool[SLIM_POOL_SMALL], rows[i].bytes);
    }
    fputs(rule, f);
    char limit[32];
    fprintf(f, " cache hits %llu, alloc retries %llu, OOMs %llu, segments given back %llu\n",
            (unsigned long long)s->num_cache_hits, (unsigned long long)s->num_alloc_retries,
            (unsigned long long)s->num_ooms, (unsigned long long)s->num_device_frees);
    fprintf(f, " limit %s\n",
            s->limit_bytes ? slim_format_bytes(s->limit_bytes, limit, sizeof(limit)) : "none");
    fputs(rule, f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* One unit word, matched without regard to case. */
static bool unit_multiplier(const char *unit, size_t len, uint64_t *mult)
{
    static const struct { const char *name; uint64_t mult; } units[] = {
        {"", 1}, {"b", 1},
        {"k", 1ull << 10}, {"ki", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
        {"m", 1ull << 20}, {"mi", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
        {"g", 1ull << 30}, {"gi", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
        {"t", 1ull << 40}, {"ti", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
    };
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strlen(units[i].name) == len && strncasecmp(units[i].name, unit, len) == 0) {
            *mult = units[i].mult;
            return true;
        }
    }
    return false;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Parsed by hand rather than with strtod: no locale decimal comma, no
 * hex or exponents, and whole-byte arithmetic for whole numbers. */
bool slim_parse_bytes(const char *text, size_t *out, slim_err *err)
{
    if (!text) {
        slim_errf(err, SLIM_EINVAL, "no size given");
        return false;
    }
    const char *p = text;
    while (is_space(*p))
        p++;
    uint64_t whole = 0, frac = 0, frac_scale = 1;
    int n_whole = 0, n_frac = 0;
    for (; is_digit(*p); p++, n_whole++) {
        if (whole > (UINT64_MAX - 9) / 10)
            goto too_large;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        for (p++; is_digit(*p); p++, n_frac++) {
            if (n_frac < 18) {  /* finer digits cannot change a byte count */
                frac = frac * 10 + (uint64_t)(*p - '0');
                frac_scale *= 10;
            }
        }
    }
    if (n_whole + n_frac == 0) {
        slim_errf(err, SLIM_EINVAL, "\"%.200s\" is not a size: expected a number of bytes with an "
                  "optional unit, as in 1000000, 512Mi, 2GiB, 1.5g or 10MB", text);
        return false;
    }
    while (is_space(*p))
        p++;
    const char *unit = p;
    while (*p && !is_space(*p))
        p++;
    size_t unit_len = (size_t)(p - unit);
    while (is_space(*p))
        p++;
    uint64_t mult;
    if (*p || !unit_multiplier(unit, unit_len, &mult)) {
        slim_errf(err, SLIM_EINVAL, "\"%.200s\" is not a size: unknown unit \"%.*s\" (use B, "
                  "K/Ki/KiB, M/Mi/MiB, G/Gi/GiB, T/Ti/TiB, or KB/MB/GB/TB for powers of 1000)",
                  text, (int)(*p ? strlen(unit) : unit_len), unit);
        return false;
    }
    if (frac && mult == 1) {
        slim_errf(err, SLIM_EINVAL, "\"%.200s\" is not a size: a fraction of a byte", text);
        return false;
    }
    if (whole > SIZE_MAX / mult)
        goto too_large;
    uint64_t bytes = whole * mult;
    long double fraction = (long double)frac / (long double)frac_scale;
    uint64_t extra = (uint64_t)(fraction * (long double)mult + 0.5L);
    if (extra > SIZE_MAX - bytes)
        goto too_large;
    *out = (size_t)(bytes + extra);
    return true;

too_large:
    slim_errf(err, SLIM_EINVAL, "\"%.200s\" is too large a size", text);
    return false;
}
