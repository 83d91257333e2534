/*
 * convert_cache.c - ONNX models converted once to .slim, served from a cache
 * folder after.
 *
 *     CACHE/<model>.<version>.<source hash>-<settings hash>.slim
 *
 * Parsing an ONNX file costs the weights in memory and seconds of CPU at
 * every load, on every replica; a .slim file maps in milliseconds and its
 * pages are shared through the page cache. So a model whose config.json says
 * "convert": true (or every ONNX model, with --convert-cache DIR) is written
 * as .slim the first time it loads, and later loads find the file by its key.
 *
 * The key hashes the source file's bytes (not its name or mtime: a model
 * copied back in place with the same bytes still hits, and one replaced
 * under the same name misses), and the settings that change what is written:
 * the precision, the int8 options, the format and server versions. Hashing
 * reads the whole file once per load; at several GB/s that is a small part
 * of what parsing it would cost.
 *
 * Writers are safe together: slim_format_write writes a temporary file and
 * renames it into place, so replicas sharing a cache folder each see either
 * no file or a whole one. After a conversion, this model version's entries
 * with other keys are removed; a process still mapping one keeps its pages
 * until it unmaps them.
 */
#include "file.h"
#include "pipeline.h" /* slim_model_file_is_slim */
#include "log.h"
#include "model.h"
#include "repository.h"
#include "slim_format.h"
#include "version.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

/* A 64-bit hash for cache keys (not for adversaries: a forged collision
 * would only make a model serve its own other conversion). Four lanes of
 * multiply-rotate over 8-byte words keep the multiplier busy, so it runs at
 * memory speed. */
static uint64_t hash_bytes(const unsigned char *p, size_t n, uint64_t seed)
{
    const uint64_t k1 = 0x9e3779b97f4a7c15ull, k2 = 0xc2b2ae3d27d4eb4full;
    uint64_t lane[4] = {seed ^ k1, seed ^ k2, seed + k1, seed - k2};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int j = 0; j < 4; j++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * j, 8);
            lane[j] = rotl64(lane[j] + w * k2, 31) * k1;
        }
    }
    uint64_t h = rotl64(lane[0], 1) + rotl64(lane[1], 7) + rotl64(lane[2], 12) +
                 rotl64(lane[3], 18) + n;
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return mix64(h);
}

static slim_status hash_file(const char *path, uint64_t *out, slim_err *err)
{
    int fd;
    size_t size;
    slim_status s = slim_file_open_regular(path, "model", &fd, &size, err);
    if (s)
        return s;
    if (size == 0) {
        close(fd);
        *out = hash_bytes(NULL, 0, 0);
        return SLIM_OK;
    }
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return slim_errf(err, SLIM_EIO, "%s: cannot map: %s", path, strerror(errno));
    madvise(p, size, MADV_SEQUENTIAL);
    *out = hash_bytes(p, size, 0);
    munmap(p, size);
    return SLIM_OK;
}

const char *slim_server_convert_cache_default(void)
{
    static char dir[4096];
    const char *e = getenv("SLIMSERVE_CACHE_DIR");
    if (e && *e)
        return e;
    if ((e = getenv("XDG_CACHE_HOME")) && *e)
        snprintf(dir, sizeof(dir), "%s/slimserve", e);
    else if ((e = getenv("HOME")) && *e && strcmp(e, "/") != 0)
        snprintf(dir, sizeof(dir), "%s/.cache/slimserve", e);
    else
        snprintf(dir, sizeof(dir), "/tmp/slimserve-cache");
    return dir;
}

/* mkdir -p, for the cache folder only (0755: replicas running as other
 * users of the same group may read it). */
static slim_status make_dirs(const char *dir, slim_err *err)
{
    char p[4096];
    if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p))
        return slim_errf(err, SLIM_EINVAL, "cache folder path too long");
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return slim_errf(err, SLIM_EIO, "cannot create cache folder %s: %s", p,
                                 strerror(errno));
            if (!c)
                break;
            *s = c;
        }
    }
    return SLIM_OK;
}

/* Removes CACHE/<model>.<version>.*.slim except keep. */
static void evict_others(const char *dir, const char *prefix, const char *keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t np = strlen(prefix);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (strncmp(de->d_name, prefix, np) != 0 || n < 5 ||
            strcmp(de->d_name + n - 5, ".slim") != 0 || strcmp(de->d_name, keep) == 0)
            continue;
        char path[4096 + 256];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (unlink(path) == 0)
            slim_server_log(SLIM_LOG_INFO, NULL, "removed stale conversion %s", path);
    }
    closedir(d);
}

slim_status slim_server_convert_cached(const char *cache_dir, const char *model,
                                       int64_t version, const char *src,
                                       const slim_load_opts *opts, char *out, size_t cap,
                                       bool *converted, slim_err *err)
{
    *converted = false;
    uint64_t src_hash = 0;
    slim_status s = hash_file(src, &src_hash, err);
    if (s != SLIM_OK)
        return s;
    /* Everything that changes what is written, hashed in order. */
    char set[512];
    const slim_compress_opts *co = &opts->compress;
    /* fp16 / bf16 without activations means the whole graph in half on
     * CUDA, half weights elsewhere: the conversion follows the target. */
    bool whole = opts->place.device && strncmp(opts->place.device, "cuda", 4) == 0;
    /* MatMul weights packed for this CPU (passes/fuse_matmul.c) when the
     * CPU will run them; a GPU would only unpack them again. */
    const char *fmm = getenv("SLIM_FUSE_MATMUL");
    bool pack = !whole && !(fmm && strcmp(fmm, "0") == 0);
    snprintf(set, sizeof(set), "format %d; slimserve %s; precision %s; int8 max_error %.17g; "
             "activations %s; int8 fallback %s; whole %d%s; pack %d; int8 exclude",
             SLIM_FORMAT_VERSION, SLIM_SERVER_VERSION,
             co->precision ? co->precision : "fp32", co->int8.max_error,
             co->half.activations ? co->half.activations : "-",
             co->int8.fallback ? co->int8.fallback : "-", whole,
             /* files written before the GPU's passes ran ahead of the half
              * pass hold unfused chains: convert those again */
             whole ? " fused" : "", pack);
    uint64_t set_hash = hash_bytes((const unsigned char *)set, strlen(set), 1);
    for (int i = 0; i < co->int8.n_exclude; i++)
        set_hash = hash_bytes((const unsigned char *)co->int8.exclude[i],
                              strlen(co->int8.exclude[i]) + 1, set_hash);
    set_hash = hash_bytes((const unsigned char *)"half exclude", 13, set_hash);
    for (int i = 0; i < co->half.n_exclude; i++)
        set_hash = hash_bytes((const unsigned char *)co->half.exclude[i],
                              strlen(co->half.exclude[i]) + 1, set_hash);
    char prefix[300], name[400];
    snprintf(prefix, sizeof(prefix), "%s.%lld.", model, (long long)version);
    snprintf(name, sizeof(name), "%s%016llx-%08llx.slim", prefix, (unsigned long long)src_hash,
             (unsigned long long)(set_hash >> 32));
    if ((size_t)snprintf(out, cap, "%s/%s", cache_dir, name) >= cap)
        return slim_errf(err, SLIM_EINVAL, "cache path too long");
    if (slim_model_file_is_slim(out))
        return SLIM_OK;
    if ((s = make_dirs(cache_dir, err)) != SLIM_OK)
        return s;

    /* Convert on the CPU: the device placement happens when the cached file
     * is loaded to serve. */
    slim_load_opts lo = {.compress = {.precision = co->precision,
                                      .int8 = {.exclude = co->int8.exclude,
                                               .n_exclude = co->int8.n_exclude,
                                               .max_error = co->int8.max_error,
                                               .fallback = co->int8.fallback},
                                      .half = {.activations = co->half.activations,
                                               .exclude = co->half.exclude,
                                               .n_exclude = co->half.n_exclude,
                                               .whole_graph = whole}},
                         .optimize = {.no_passes = true, .pack_matmul = pack}};
    slim_model *m = NULL;
    if ((s = slim_model_load(src, &lo, &m, err)) != SLIM_OK)
        return s;
    s = slim_format_write(m->graph, out, err);
    if (s == SLIM_OK) {
        /* Read it back before anything serves it, as `slim convert` does. */
        slim_graph *back = NULL;
        char why[512];
        if ((s = slim_format_load_file(out, &back, err)) != SLIM_OK) {
            unlink(out);
        } else if (slim_format_verify(m->graph, back, why, sizeof(why))) {
            s = slim_errf(err, SLIM_EIO, "%s does not match %s: %s", out, src, why);
            unlink(out);
        }
        slim_graph_free(back);
    }
    slim_model_free(m);
    if (s != SLIM_OK)
        return s;
    *converted = true;
    evict_others(cache_dir, prefix, name);
    return SLIM_OK;
}
