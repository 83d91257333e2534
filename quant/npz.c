/* npz.c - reading .npz archives (see npz.h). Only what np.savez and
 * np.savez_compressed write is accepted: one disk, members stored (0) or
 * deflated (8), not encrypted, zip64 sizes where the writer used them. */
#include "npz.h"

#include "file.h"
#include "npy.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

typedef struct {
    char *name;          /* without ".npy" */
    uint64_t offset;     /* of the local header */
    uint64_t csize, usize;
    uint32_t crc;
    int method;
} member;

struct slim_npz {
    char *path;
    unsigned char *data;
    size_t size;
    int n;
    member *m;
};

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

void slim_npz_close(slim_npz *z)
{
    if (!z)
        return;
    for (int i = 0; i < z->n; i++)
        free(z->m[i].name);
    free(z->m);
    free(z->data);
    free(z->path);
    free(z);
}

static slim_status read_all(const char *path, slim_npz *z, slim_err *err)
{
    char *data;
    /* Through file.h: a mask file that is a FIFO must not hang the load. */
    slim_status st = slim_file_read_all(path, "mask file", &data, &z->size, err);
    if (st)
        return st;
    z->data = (unsigned char *)data;
    return SLIM_OK;
}

/* The zip64 fields of a central directory entry's extra data, in the order
 * the format gives them, for each field that was 0xFFFFFFFF. */
static bool zip64_extra(const unsigned char *e, size_t len, member *m, bool need_u, bool need_c,
                        bool need_o)
{
    while (len >= 4) {
        uint16_t id = rd16(e), sz = rd16(e + 2);
        if ((size_t)sz + 4 > len)
            return false;
        if (id == 1) {
            size_t off = 4, end = 4 + (size_t)sz;
            if (need_u) {
                if (off + 8 > end)
                    return false;
                m->usize = rd64(e + off);
                off += 8;
            }
            if (need_c) {
                if (off + 8 > end)
                    return false;
                m->csize = rd64(e + off);
                off += 8;
            }
            if (need_o) {
                if (off + 8 > end)
                    return false;
                m->offset = rd64(e + off);
            }
            return true;
        }
        e += 4 + sz;
        len -= 4 + (size_t)sz;
    }
    return !need_u && !need_c && !need_o;
}

static slim_status parse(slim_npz *z, slim_err *err)
{
    const unsigned char *d = z->data;
    size_t size = z->size;
    const char *p = z->path;
    if (size < 22)
        return slim_errf(err, SLIM_EPARSE, "%s: not a .npz file (too short for a zip archive)", p);
    size_t eocd = size - 22, stop = size > 22 + 65535 ? size - 22 - 65535 : 0;
    while (rd32(d + eocd) != 0x06054b50) {
        if (eocd == stop)
            return slim_errf(err, SLIM_EPARSE, "%s: not a .npz file (no zip directory)", p);
        eocd--;
    }
    uint64_t count = rd16(d + eocd + 10), cd_size = rd32(d + eocd + 12),
             cd_off = rd32(d + eocd + 16);
    if (rd16(d + eocd + 4) != 0 || rd16(d + eocd + 6) != 0)
        return slim_errf(err, SLIM_EPARSE, "%s: multi-disk zip archives are not supported", p);
    if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
        /* zip64: the locator sits right before the classic record. */
        if (eocd < 20 || rd32(d + eocd - 20) != 0x07064b50)
            return slim_errf(err, SLIM_EPARSE, "%s: zip64 directory locator missing", p);
        uint64_t r = rd64(d + eocd - 12);
        if (r > size || size - r < 56 || rd32(d + r) != 0x06064b50)
            return slim_errf(err, SLIM_EPARSE, "%s: zip64 directory record out of the file", p);
        count = rd64(d + r + 32);
        cd_size = rd64(d + r + 40);
        cd_off = rd64(d + r + 48);
    }
    if (cd_off > size || cd_size > size - cd_off)
        return slim_errf(err, SLIM_EPARSE, "%s: zip directory lies outside the file", p);
    if (count > cd_size / 46)
        return slim_errf(err, SLIM_EPARSE, "%s: zip directory claims %llu entries in %llu "
                         "bytes", p, (unsigned long long)count, (unsigned long long)cd_size);
    z->m = calloc(count ? count : 1, sizeof(member));
    if (!z->m)
        return slim_errf(err, SLIM_ENOMEM, "%s: out of memory", p);
    const unsigned char *e = d + cd_off, *end = d + cd_off + cd_size;
    for (uint64_t i = 0; i < count; i++) {
        if (end - e < 46 || rd32(e) != 0x02014b50)
            return slim_errf(err, SLIM_EPARSE, "%s: zip directory entry %llu is damaged", p,
                             (unsigned long long)i);
        member *m = &z->m[z->n];
        uint16_t flags = rd16(e + 8), nlen = rd16(e + 28), xlen = rd16(e + 30),
                 clen = rd16(e + 32);
        m->method = rd16(e + 10);
        m->crc = rd32(e + 16);
        m->csize = rd32(e + 20);
        m->usize = rd32(e + 24);
        m->offset = rd32(e + 42);
        if ((size_t)(end - e) < 46u + nlen + xlen + clen)
            return slim_errf(err, SLIM_EPARSE, "%s: zip directory entry %llu runs past the "
                             "directory", p, (unsigned long long)i);
        if (!zip64_extra(e + 46 + nlen, xlen, m, m->usize == 0xFFFFFFFF,
                         m->csize == 0xFFFFFFFF, m->offset == 0xFFFFFFFF))
            return slim_errf(err, SLIM_EPARSE, "%s: zip directory entry %llu has a damaged "
                             "zip64 field", p, (unsigned long long)i);
        size_t base = nlen >= 4 && memcmp(e + 46 + nlen - 4, ".npy", 4) == 0 ? nlen - 4u : nlen;
        m->name = malloc(base + 1);
        if (!m->name)
            return slim_errf(err, SLIM_ENOMEM, "%s: out of memory", p);
        memcpy(m->name, e + 46, base);
        m->name[base] = '\0';
        z->n++;
        if (strlen(m->name) != base || base == 0)
            return slim_errf(err, SLIM_EPARSE, "%s: zip entry %llu has an empty or binary name",
                             p, (unsigned long long)i);
        if (flags & 1)
            return slim_errf(err, SLIM_EUNSUPPORTED, "%s: \"%s\" is encrypted", p, m->name);
        if (m->method != 0 && m->method != 8)
            return slim_errf(err, SLIM_EUNSUPPORTED, "%s: \"%s\" is compressed with zip method "
                             "%d (only stored and deflate are read)", p, m->name, m->method);
        for (int j = 0; j < z->n - 1; j++)
            if (strcmp(z->m[j].name, m->name) == 0)
                return slim_errf(err, SLIM_EPARSE, "%s: \"%s\" appears twice", p, m->name);
        e += 46 + nlen + xlen + clen;
    }
    return SLIM_OK;
}

slim_status slim_npz_open(const char *path, slim_npz **out, slim_err *err)
{
    *out = NULL;
    slim_npz *z = calloc(1, sizeof(*z));
    if (!z || !(z->path = strdup(path))) {
        free(z);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    slim_status st = read_all(path, z, err);
    if (!st)
        st = parse(z, err);
    if (st) {
        slim_npz_close(z);
        return st;
    }
    *out = z;
    return SLIM_OK;
}

int slim_npz_count(const slim_npz *z) { return z->n; }
const char *slim_npz_name(const slim_npz *z, int i) { return z->m[i].name; }

slim_status slim_npz_load(slim_npz *z, int i, size_t max_bytes, slim_tensor *out, slim_err *err)
{
    memset(out, 0, sizeof(*out));
    const member *m = &z->m[i];
    const char *p = z->path;
    if (m->usize > max_bytes)
        return slim_errf(err, SLIM_ESHAPE, "%s: \"%s\" is %llu bytes, more than a mask of its "
                         "weight can be", p, m->name, (unsigned long long)m->usize);
    if (m->offset > z->size || z->size - m->offset < 30 || rd32(z->data + m->offset) != 0x04034b50)
        return slim_errf(err, SLIM_EPARSE, "%s: \"%s\": local zip header missing", p, m->name);
    const unsigned char *lh = z->data + m->offset;
    uint64_t start = m->offset + 30 + rd16(lh + 26) + rd16(lh + 28);
    if (start > z->size || m->csize > z->size - start)
        return slim_errf(err, SLIM_EPARSE, "%s: \"%s\": data runs past the end of the file", p,
                         m->name);
    const unsigned char *src = z->data + start;
    unsigned char *buf = NULL;
    if (m->method == 8) {
        buf = malloc(m->usize ? m->usize : 1);
        if (!buf)
            return slim_errf(err, SLIM_ENOMEM, "%s: out of memory inflating \"%s\"", p, m->name);
        z_stream zs = {0};
        if (inflateInit2(&zs, -15) != Z_OK) {
            free(buf);
            return slim_errf(err, SLIM_ENOMEM, "%s: zlib init failed", p);
        }
        /* Fed in pieces: zlib's counts are 32-bit. */
        uint64_t in_left = m->csize, out_left = m->usize;
        zs.next_in = (unsigned char *)src;
        zs.next_out = buf;
        int zr = Z_OK;
        while (zr == Z_OK) {
            bool fed = false;
            if (zs.avail_in == 0 && in_left) {
                zs.avail_in = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
                in_left -= zs.avail_in;
                fed = true;
            }
            if (zs.avail_out == 0 && out_left) {
                zs.avail_out = out_left > (1u << 30) ? (1u << 30) : (uInt)out_left;
                out_left -= zs.avail_out;
                fed = true;
            }
            zr = inflate(&zs, Z_NO_FLUSH);
            /* No progress without more room or input: go on only after
             * feeding (each feed shrinks what is left, so this ends; a
             * stream longer than its declared size stops here). */
            if (zr == Z_BUF_ERROR && fed)
                zr = Z_OK;
        }
        uint64_t total = zs.total_out;
        inflateEnd(&zs);
        if (zr != Z_STREAM_END || total != m->usize) {
            free(buf);
            return slim_errf(err, SLIM_EPARSE, "%s: \"%s\": corrupt deflate data", p, m->name);
        }
        src = buf;
    } else if (m->csize != m->usize) {
        return slim_errf(err, SLIM_EPARSE, "%s: \"%s\": stored sizes disagree", p, m->name);
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t o = 0; o < m->usize; o += 1u << 30) {
        uint64_t n = m->usize - o > (1u << 30) ? (1u << 30) : m->usize - o;
        crc = crc32(crc, src + o, (uInt)n);
    }
    slim_status st = SLIM_OK;
    if ((uint32_t)crc != m->crc)
        st = slim_errf(err, SLIM_EPARSE, "%s: \"%s\": CRC mismatch (damaged file)", p, m->name);
    else {
        char what[512];
        snprintf(what, sizeof(what), "%s: \"%s\"", p, m->name);
        st = slim_npy_parse(src, (size_t)m->usize, what, out, err);
    }
    free(buf);
    return st;
}
