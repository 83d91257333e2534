/*
 * strings_case.c - UTF-8 case change for StringNormalizer: Unicode's simple
 * (one code point to one) mappings for Basic Latin, Latin-1, Latin
 * Extended-A, Greek, Cyrillic and the fullwidth letters, as glibc's
 * towlower/towupper under a UTF-8 locale give them (which onnxruntime's
 * StringNormalizer uses). Other scripts pass unchanged. No locale is read:
 * tailorings (Turkish dotless i) are not applied.
 */
#include "strings_impl.h"
#include "strings_case.h"

/* Pairs laid out upper, lower, upper, lower... from `first` to `last`. */
static bool in_pairs(uint32_t c, uint32_t first, uint32_t last)
{
    return c >= first && c <= last;
}

uint32_t slim_case_lower(uint32_t c)
{
    if (c < 0x80)
        return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7)
        return c + 32;
    if (c == 0x130)
        return 'i';
    if ((in_pairs(c, 0x100, 0x12F) || in_pairs(c, 0x132, 0x137) || in_pairs(c, 0x14A, 0x177)) &&
        c % 2 == 0)
        return c + 1;
    if ((in_pairs(c, 0x139, 0x148) || in_pairs(c, 0x179, 0x17E)) && c % 2 == 1)
        return c + 1;
    if (c == 0x178)
        return 0xFF;
    /* The digraphs: DŽ Dž dž, LJ Lj lj, NJ Nj nj, DZ Dz dz (title to lower too). */
    if (c == 0x1C4 || c == 0x1C7 || c == 0x1CA || c == 0x1F1)
        return c + 2;
    if (c == 0x1C5 || c == 0x1C8 || c == 0x1CB || c == 0x1F2)
        return c + 1;
    if (c == 0x386)
        return 0x3AC;
    if (c >= 0x388 && c <= 0x38A)
        return c + 37;
    if (c == 0x38C)
        return 0x3CC;
    if (c == 0x38E || c == 0x38F)
        return c + 63;
    if (c >= 0x391 && c <= 0x3AB && c != 0x3A2)
        return c + 32;
    if (c >= 0x400 && c <= 0x40F)
        return c + 80;
    if (c >= 0x410 && c <= 0x42F)
        return c + 32;
    if ((in_pairs(c, 0x460, 0x481) || in_pairs(c, 0x48A, 0x4BF)) && c % 2 == 0)
        return c + 1;
    if (c >= 0xFF21 && c <= 0xFF3A)
        return c + 32;
    return c;
}

uint32_t slim_case_upper(uint32_t c)
{
    if (c < 0x80)
        return c >= 'a' && c <= 'z' ? c - 32 : c;
    if (c == 0xB5)
        return 0x39C;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7)
        return c - 32;
    if (c == 0xFF)
        return 0x178;
    if (c == 0x131)
        return 'I';
    if (c == 0x17F)
        return 'S';
    if ((in_pairs(c, 0x100, 0x12F) || in_pairs(c, 0x132, 0x137) || in_pairs(c, 0x14A, 0x177)) &&
        c % 2 == 1)
        return c - 1;
    if ((in_pairs(c, 0x139, 0x148) || in_pairs(c, 0x179, 0x17E)) && c % 2 == 0)
        return c - 1;
    if (c == 0x1C6 || c == 0x1C9 || c == 0x1CC || c == 0x1F3)
        return c - 2;
    if (c == 0x1C5 || c == 0x1C8 || c == 0x1CB || c == 0x1F2)
        return c - 1;
    if (c == 0x3AC)
        return 0x386;
    if (c >= 0x3AD && c <= 0x3AF)
        return c - 37;
    if (c == 0x3CC)
        return 0x38C;
    if (c == 0x3CD || c == 0x3CE)
        return c - 63;
    if (c == 0x3C2)
        return 0x3A3;
    if (c >= 0x3B1 && c <= 0x3CB)
        return c - 32;
    if (c >= 0x430 && c <= 0x44F)
        return c - 32;
    if (c >= 0x450 && c <= 0x45F)
        return c - 80;
    if ((in_pairs(c, 0x460, 0x481) || in_pairs(c, 0x48A, 0x4BF)) && c % 2 == 1)
        return c - 1;
    if (c >= 0xFF41 && c <= 0xFF5A)
        return c - 32;
    return c;
}

/* One code point from s[*i], or -1 for a malformed, overlong or
 * surrogate sequence. */
static int32_t utf8_next(const unsigned char *s, size_t n, size_t *i)
{
    unsigned char c = s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? (c < 0xF0 ? 3 : 0) : c >= 0xC2 ? 2 : 0;
    if (!len || *i + (size_t)len > n)
        return -1;
    uint32_t cp = c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[*i + k] & 0xC0) != 0x80)
            return -1;
        cp = cp << 6 | (s[*i + k] & 0x3F);
    }
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_of[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *i += (size_t)len;
    return (int32_t)cp;
}

static size_t utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

slim_status slim_utf8_case(const char *s, size_t n, slim_case mode, slim_strbuf *out,
                           slim_err *err)
{
    out->len = 0;
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t at = i;
        int32_t cp = utf8_next(u, n, &i);
        if (cp < 0)
            return slim_errf(err, SLIM_EINVAL, "input holds invalid UTF-8 at byte %zu of a "
                             "%zu-byte string", at, n);
        uint32_t m = mode == SLIM_CASE_LOWER ? slim_case_lower((uint32_t)cp)
                   : mode == SLIM_CASE_UPPER ? slim_case_upper((uint32_t)cp) : (uint32_t)cp;
        char enc[4];
        slim_status st = slim_strbuf_put(out, enc, utf8_put(m, enc), err);
        if (st)
            return st;
    }
    return SLIM_OK;
}
