/*
 * shm.c - the table of shared memory regions clients registered, and the
 * spans of them that requests read their inputs from and write their
 * outputs to (shm.h).
 *
 * Why the bytes are read in place: a 4 MB input sent in a body is read from
 * the socket, copied into a tensor and freed; from a region it is never
 * copied at all, and charged to nobody's memory account (the client owns
 * it, and it is mapped, not allocated). A copy is still made when the
 * bytes are not aligned as the allocator would align them (a kernel may
 * use aligned vector loads), for CUDA regions (read back to the host: the
 * model's inputs are host tensors), and by the batcher when requests are
 * merged into one batch (batch_run.c gathers every request's rows).
 *
 * Lifetime: the table holds one reference to each region and every span a
 * request takes holds one more. Unregistering drops the table's: the name
 * is free at once and new requests naming it are refused, while requests
 * already holding it finish with the mapping intact; the last reference
 * unmaps. So a client that unregisters early never makes the server read
 * unmapped memory.
 *
 * What stays the client's responsibility (the same as with Triton): the
 * region's bytes must not change while a request uses them, and the object
 * must not shrink. Its size is checked again (fstat) each time a request
 * takes a span, which catches a truncation made between requests; one made
 * during a run would fault the server, as it would any process mapping the
 * object. Only clients that share the host and hold the API key can
 * register (docs/server.md).
 */
#include "shm.h"
#include "codec.h"

#include "device.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The allocator's alignment (runtime/tensor.c): bytes aligned like this
 * are read in place, others copied. */
#define SHM_IN_PLACE_ALIGN 64

typedef struct slim__shm_region {
    slim_server_shm_kind kind;
    char name[SLIM_SHM_NAME_MAX + 1];
    char key[SLIM_SHM_KEY_MAX + 1];
    uint64_t offset, byte_size;
    int64_t device_id;
    void *base;                     /* start of the registered range */
    void *map;                      /* system: the mapping (page-aligned) */
    size_t map_len;
    int fd;                         /* system: kept to check the object's size */
    bool writable;
    slim_device *dev;               /* CUDA: the device the handle was opened on */
    atomic_int refs;
} shm_region;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static shm_region *table[SLIM_SHM_MAX_REGIONS];

static const char *kind_title(slim_server_shm_kind kind)
{
    return kind == SLIM_SHM_CUDA ? "CUDA" : "system";
}

static void region_unref(shm_region *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    if (r->kind == SLIM_SHM_SYSTEM) {
        if (r->map)
            munmap(r->map, r->map_len);
        if (r->fd >= 0)
            close(r->fd);
    } else if (r->base && r->dev->backend->ipc_close) {
        r->dev->backend->ipc_close(r->dev, r->base);
    }
    free(r);
}

/* Names go into URLs (/v2/systemsharedmemory/region/NAME/status) and logs:
 * letters, digits and "_-." keep them unambiguous in both. */
static slim_status check_name(const char *name, slim_err *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > SLIM_SHM_NAME_MAX)
        return slim_errf(err, SLIM_EINVAL, "a shared memory region needs a name of 1 to %d "
                         "bytes", SLIM_SHM_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        if (!ok)
            return slim_errf(err, SLIM_EINVAL, "shared memory region name \"%s\": byte %zu "
                             "(0x%02x) is not a letter, digit, '_', '-' or '.'", name, i,
                             (unsigned char)c);
    }
    return SLIM_OK;
}

/* A POSIX shared memory name: one optional leading '/', then a file name
 * of /dev/shm (no other '/', not "." or ".."), printable ASCII. Anything
 * else could name a path outside /dev/shm on some systems. */
static slim_status check_key(const char *key, slim_err *err)
{
    size_t n = key ? strlen(key) : 0;
    const char *s = key && key[0] == '/' ? key + 1 : key;
    size_t m = s ? strlen(s) : 0;
    if (n == 0 || n > SLIM_SHM_KEY_MAX || m == 0)
        return slim_errf(err, SLIM_EINVAL, "a shared memory key needs 1 to %d bytes (\"/name\")",
                         SLIM_SHM_KEY_MAX);
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return slim_errf(err, SLIM_EINVAL, "shared memory key \"%s\" is not a name", key);
    for (size_t i = 0; i < m; i++)
        if (s[i] == '/' || s[i] <= ' ' || s[i] > '~')
            return slim_errf(err, SLIM_EINVAL, "shared memory key \"%s\": only a leading '/' "
                             "and printable characters other than space and '/' are allowed",
                             key);
    return SLIM_OK;
}

/* Under table_lock: the slot of name (any kind), or -1. */
static int find_locked(const char *name)
{
    for (int i = 0; i < SLIM_SHM_MAX_REGIONS; i++)
        if (table[i] && strcmp(table[i]->name, name) == 0)
            return i;
    return -1;
}

/* Puts r in the table, or says why not (its name taken, the table full). */
static slim_status table_add(shm_region *r, slim_err *err)
{
    pthread_mutex_lock(&table_lock);
    int free_slot = -1;
    for (int i = 0; i < SLIM_SHM_MAX_REGIONS && free_slot < 0; i++)
        if (!table[i])
            free_slot = i;
    slim_status s = SLIM_OK;
    int taken = find_locked(r->name);
    if (taken >= 0)
        s = slim_errf(err, SLIM_EINVAL, "a %s shared memory region named \"%s\" is already "
                      "registered; unregister it first", kind_title(table[taken]->kind), r->name);
    else if (free_slot < 0)
        s = slim_errf(err, SLIM_EINVAL, "%d shared memory regions are registered, the most "
                      "the server keeps; unregister some first", SLIM_SHM_MAX_REGIONS);
    else
        table[free_slot] = r;
    pthread_mutex_unlock(&table_lock);
    return s;
}

static shm_region *region_new(slim_server_shm_kind kind, const char *name, uint64_t byte_size,
                              slim_err *err)
{
    if (check_name(name, err) != SLIM_OK)
        return NULL;
    if (byte_size == 0) {
        slim_errf(err, SLIM_EINVAL, "shared memory region \"%s\": byte_size must be more than 0",
                  name);
        return NULL;
    }
    shm_region *r = calloc(1, sizeof(*r));
    if (!r) {
        slim_errf(err, SLIM_ENOMEM, "out of memory");
        return NULL;
    }
    r->kind = kind;
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->byte_size = byte_size;
    r->fd = -1;
    atomic_init(&r->refs, 1);
    return r;
}

/* Maps [offset, offset + byte_size) of r->fd, after checking it lies in
 * the object: a mapping past its end would fault on first touch. */
static slim_status map_system(shm_region *r, slim_err *err)
{
    struct stat st;
    if (fstat(r->fd, &st) != 0)
        return slim_errf(err, SLIM_EIO, "shared memory key \"%s\": %s", r->key, strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    if (r->offset > size || r->byte_size > size - r->offset)
        return slim_errf(err, SLIM_EINVAL, "shared memory region \"%s\": offset %llu + "
                         "byte_size %llu runs past the end of \"%s\" (%llu bytes)", r->name,
                         (unsigned long long)r->offset, (unsigned long long)r->byte_size, r->key,
                         (unsigned long long)size);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t start = r->offset / page * page;
    r->map_len = (size_t)(r->offset - start + r->byte_size);
    int prot = PROT_READ | (r->writable ? PROT_WRITE : 0);
    void *p = mmap(NULL, r->map_len, prot, MAP_SHARED, r->fd, (off_t)start);
    if (p == MAP_FAILED)
        return slim_errf(err, SLIM_EIO, "cannot map %llu bytes of shared memory key \"%s\": %s",
                         (unsigned long long)r->map_len, r->key, strerror(errno));
    r->map = p;
    r->base = (char *)p + (r->offset - start);
    return SLIM_OK;
}

slim_status slim_server_shm_register_system(const char *name, const char *key, uint64_t offset,
                                            uint64_t byte_size, slim_err *err)
{
    slim_status s;
    if ((s = check_key(key, err)) != SLIM_OK)
        return s;
    shm_region *r = region_new(SLIM_SHM_SYSTEM, name, byte_size, err);
    if (!r)
        return err ? err->status : SLIM_EINVAL;
    snprintf(r->key, sizeof(r->key), "%s", key);
    r->offset = offset;
    /* Outputs are written into regions, so read-write when the client's
     * object allows it; a read-only object still serves inputs. */
    r->writable = true;
    r->fd = shm_open(key, O_RDWR, 0);
    if (r->fd < 0 && (errno == EACCES || errno == EROFS)) {
        r->writable = false;
        r->fd = shm_open(key, O_RDONLY, 0);
    }
    if (r->fd < 0) {
        int e = errno;
        region_unref(r);
        return slim_errf(err, e == ENOENT ? SLIM_ENOTFOUND : SLIM_EINVAL,
                         "cannot open shared memory key \"%s\" for region \"%s\": %s%s", key, name,
                         strerror(e), e == ENOENT ? " (the server must share the client's IPC "
                         "namespace and /dev/shm)" : "");
    }
    if ((s = map_system(r, err)) != SLIM_OK || (s = table_add(r, err)) != SLIM_OK) {
        region_unref(r);
        return s;
    }
    return SLIM_OK;
}

/* The CUDA device of device_id, started on demand; NULL with err saying
 * why (no library, no driver, no such device). */
static slim_device *cuda_device(int64_t device_id, slim_err *err)
{
    char dev_name[32];
    slim_device *dev = NULL;
    if (device_id < 0 || device_id > 1024) {
        slim_errf(err, SLIM_EINVAL, "device_id %lld is not a CUDA device number",
                  (long long)device_id);
        return NULL;
    }
    snprintf(dev_name, sizeof(dev_name), "cuda:%lld", (long long)device_id);
    if (slim_device_get(dev_name, &dev, err) != SLIM_OK) {
        slim_err_prefix(err, "CUDA shared memory is not available: ");
        return NULL;
    }
    return dev;
}

slim_status slim_server_shm_register_cuda(const char *name, const void *raw_handle,
                                          size_t handle_len, int64_t device_id,
                                          uint64_t byte_size, slim_err *err)
{
    slim_device *dev = cuda_device(device_id, err);
    if (!dev)
        return err ? err->status : SLIM_ENOTFOUND;
    if (!dev->backend->ipc_open)
        return slim_errf(err, SLIM_EUNSUPPORTED, "device %s cannot open CUDA IPC handles",
                         dev->name);
    shm_region *r = region_new(SLIM_SHM_CUDA, name, byte_size, err);
    if (!r)
        return err ? err->status : SLIM_EINVAL;
    r->device_id = device_id;
    r->dev = dev;
    r->writable = true;
    slim_status s = dev->backend->ipc_open(dev, raw_handle, handle_len, &r->base, err);
    if (s == SLIM_OK)
        s = table_add(r, err);
    if (s != SLIM_OK)
        region_unref(r);
    return s;
}

slim_status slim_server_shm_unregister(slim_server_shm_kind kind, const char *name, slim_err *err)
{
    shm_region *gone[SLIM_SHM_MAX_REGIONS];
    int n = 0;
    bool all = !name || !name[0];
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < SLIM_SHM_MAX_REGIONS; i++)
        if (table[i] && table[i]->kind == kind && (all || strcmp(table[i]->name, name) == 0)) {
            gone[n++] = table[i];
            table[i] = NULL;
        }
    pthread_mutex_unlock(&table_lock);
    for (int i = 0; i < n; i++)
        region_unref(gone[i]); /* unmapped now, or when its last request is done */
    if (!all && n == 0)
        return slim_errf(err, SLIM_ENOTFOUND, "no %s shared memory region is registered as "
                         "\"%s\"", kind_title(kind), name);
    return SLIM_OK;
}

slim_status slim_server_shm_status(slim_server_shm_kind kind, const char *name,
                                   slim_server_shm_info **out, int *n, slim_err *err)
{
    bool all = !name || !name[0];
    *n = 0;
    if (!(*out = calloc(SLIM_SHM_MAX_REGIONS, sizeof(**out))))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < SLIM_SHM_MAX_REGIONS; i++) {
        const shm_region *r = table[i];
        if (!r || r->kind != kind || (!all && strcmp(r->name, name) != 0))
            continue;
        slim_server_shm_info *s = &(*out)[(*n)++];
        memcpy(s->name, r->name, sizeof(s->name));
        memcpy(s->key, r->key, sizeof(s->key));
        s->offset = r->offset;
        s->byte_size = r->byte_size;
        s->device_id = r->device_id;
    }
    pthread_mutex_unlock(&table_lock);
    if (!all && *n == 0) {
        free(*out);
        *out = NULL;
        return slim_errf(err, SLIM_ENOTFOUND, "no %s shared memory region is registered as "
                         "\"%s\"", kind_title(kind), name);
    }
    return SLIM_OK;
}

static bool cuda_ok;

static void cuda_probe(void)
{
    slim_device *dev = NULL;
    cuda_ok = slim_device_get("cuda:0", &dev, NULL) == SLIM_OK && dev->backend->ipc_open;
}

/* Asked once: a build without the CUDA library answers at once; with it,
 * the first server metadata request starts the backend (as registering a
 * CUDA region or placing a model on a GPU would). */
bool slim_server_shm_cuda_available(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, cuda_probe);
    return cuda_ok;
}

int slim_server_shm_extension_names(const char **out)
{
    int n = 0;
    out[n++] = "system_shared_memory";
    if (slim_server_shm_cuda_available())
        out[n++] = "cuda_shared_memory";
    return n;
}

void slim_server_shm_add_extensions(cJSON *list)
{
    const char *names[2];
    int n = slim_server_shm_extension_names(names);
    for (int i = 0; list && i < n; i++)
        cJSON_AddItemToArray(list, cJSON_CreateString(names[i]));
}

/* ---- spans ---------------------------------------------------------------- */

bool slim_server_shm_params_given(const slim_server_shm_params *p)
{
    return p->region || p->has_offset || p->has_size;
}

/* Whether the system object behind r still holds the registered range. */
static bool still_mapped(const shm_region *r)
{
    struct stat st;
    return r->kind != SLIM_SHM_SYSTEM ||
           (fstat(r->fd, &st) == 0 && (uint64_t)st.st_size >= r->offset + r->byte_size);
}

slim_status slim_server_shm_span_get(slim_server_shm_span **list, const slim_server_shm_params *p,
                                     const char *what, const char *name,
                                     slim_server_shm_span **out, slim_err *err)
{
    *out = NULL;
    if (!p->region || !p->has_size)
        return slim_errf(err, SLIM_EINVAL, "%s '%s': shared memory needs both "
                         "\"shared_memory_region\" (a string) and \"shared_memory_byte_size\" "
                         "(an integer); \"shared_memory_offset\" is optional", what, name);
    if (p->offset < 0 || p->byte_size < 0)
        return slim_errf(err, SLIM_EINVAL, "%s '%s': shared_memory_offset and "
                         "shared_memory_byte_size must not be negative", what, name);
    pthread_mutex_lock(&table_lock);
    int i = find_locked(p->region);
    shm_region *r = i >= 0 ? table[i] : NULL;
    if (r)
        atomic_fetch_add(&r->refs, 1);
    pthread_mutex_unlock(&table_lock);
    if (!r)
        return slim_errf(err, SLIM_EINVAL, "%s '%s': no shared memory region is registered as "
                         "\"%s\"", what, name, p->region);
    uint64_t off = (uint64_t)p->offset, size = (uint64_t)p->byte_size;
    slim_status s = SLIM_OK;
    if (off > r->byte_size || size > r->byte_size - off)
        s = slim_errf(err, SLIM_EINVAL, "%s '%s': shared_memory_offset %llu + byte_size %llu "
                      "runs past the end of region \"%s\" (%llu bytes)", what, name,
                      (unsigned long long)off, (unsigned long long)size, r->name,
                      (unsigned long long)r->byte_size);
    else if (!still_mapped(r))
        s = slim_errf(err, SLIM_EINVAL, "%s '%s': shared memory key \"%s\" of region \"%s\" "
                      "has shrunk below the registered range; register it again", what, name,
                      r->key, r->name);
    slim_server_shm_span *sp = s ? NULL : calloc(1, sizeof(*sp));
    if (!s && (!sp || !(sp->name = strdup(r->name)))) {
        free(sp);
        s = slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    if (s) {
        region_unref(r);
        return s;
    }
    sp->region = r;
    sp->ptr = (char *)r->base + off;
    sp->offset = off;
    sp->size = size;
    sp->next = *list;
    *list = sp;
    *out = sp;
    return SLIM_OK;
}

void slim_server_shm_spans_free(slim_server_shm_span *list)
{
    while (list) {
        slim_server_shm_span *next = list->next;
        region_unref(list->region);
        free(list->name);
        free(list);
        list = next;
    }
}

/* A BYTES input from a region: the region holds its wire form (a 4-byte
 * little-endian length, then the bytes, per element), as Triton's clients
 * write it; the elements are copied out, since a string tensor's slots
 * point at bytes of its own. A CUDA region comes to the host first. */
static slim_status string_input(const slim_server_shm_span *span, slim_tensor *t,
                                const char *name, slim_err *err)
{
    const shm_region *r = span->region;
    if (r->kind == SLIM_SHM_SYSTEM)
        return slim_server_bytes_from_wire(span->ptr, (size_t)span->size, t, name,
                                           "shared memory", err);
    void *host = malloc(span->size ? (size_t)span->size : 1);
    if (!host)
        return slim_errf(err, SLIM_ENOMEM, "input '%s': out of memory reading %llu bytes of "
                         "CUDA region \"%s\"", name, (unsigned long long)span->size, r->name);
    slim_status s = r->dev->backend->copy(r->dev, host, span->ptr, (size_t)span->size,
                                          SLIM_COPY_D2H, err);
    if (s == SLIM_OK)
        s = slim_server_bytes_from_wire(host, (size_t)span->size, t, name, "shared memory", err);
    free(host);
    return s;
}

/* A BYTES output into a region, in wire form. */
static slim_status string_output(const slim_server_shm_span *span, const slim_tensor *t,
                                 const char *name, slim_err *err)
{
    size_t n = slim_server_bytes_wire_size(t);
    const shm_region *r = span->region;
    if (n > span->size)
        return slim_errf(err, SLIM_EINVAL, "output '%s' takes %zu bytes (BYTES wire form) but "
                         "its shared_memory_byte_size in region \"%s\" is %llu", name, n,
                         span->name, (unsigned long long)span->size);
    if (!n)
        return SLIM_OK;
    if (r->kind == SLIM_SHM_SYSTEM) {
        slim_server_bytes_to_wire(t, span->ptr);
        return SLIM_OK;
    }
    void *host = malloc(n);
    if (!host)
        return slim_errf(err, SLIM_ENOMEM, "output '%s': out of memory", name);
    slim_server_bytes_to_wire(t, host);
    slim_status s = r->dev->backend->copy(r->dev, span->ptr, host, n, SLIM_COPY_H2D, err);
    if (s == SLIM_OK)
        s = r->dev->backend->sync(r->dev, err);
    free(host);
    return s;
}

slim_status slim_server_shm_input(const slim_server_shm_span *span, slim_tensor *t,
                                  const char *name, slim_err *err)
{
    if (t->dtype == SLIM_STRING)
        return string_input(span, t, name, err);
    /* In a double: the dims are the client's (up to 10^12 each), and their
     * product may not fit an int64. */
    double bytes = (double)slim_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
        bytes *= (double)t->dims[d];
    if (bytes != (double)span->size) {
        char shape[128];
        slim_shape_str(t->ndim, t->dims, shape, sizeof(shape));
        return slim_errf(err, SLIM_EINVAL, "input '%s': shared_memory_byte_size is %llu bytes "
                         "but shape %s needs %.0f", name, (unsigned long long)span->size, shape,
                         bytes);
    }
    size_t need = (size_t)span->size;
    const shm_region *r = span->region;
    if (r->kind == SLIM_SHM_SYSTEM && (uintptr_t)span->ptr % SHM_IN_PLACE_ALIGN == 0) {
        t->data = need ? span->ptr : NULL;
        t->buf = NULL; /* borrowed: the request's span keeps the mapping */
        return SLIM_OK;
    }
    slim_status s = slim_tensor_alloc(t, err);
    if (s != SLIM_OK || !need)
        return s;
    if (r->kind == SLIM_SHM_SYSTEM) {
        memcpy(t->data, span->ptr, need);
        return SLIM_OK;
    }
    s = r->dev->backend->copy(r->dev, t->data, span->ptr, need, SLIM_COPY_D2H, err);
    if (s != SLIM_OK) {
        slim_tensor_release(t);
        slim_err_prefix(err, "input '%s' from CUDA region \"%s\": ", name, r->name);
    }
    return s;
}

slim_status slim_server_shm_output_check(const slim_server_shm_span *span, slim_dtype dtype,
                                         int ndim, const int64_t *dims, int64_t rows,
                                         const char *name, slim_err *err)
{
    if (!span->region->writable)
        return slim_errf(err, SLIM_EINVAL, "output '%s': region \"%s\" is mapped read-only "
                         "(its key could not be opened for writing)", name, span->name);
    if (dtype == SLIM_DTYPE_UNDEFINED || dtype == SLIM_STRING || ndim < 0)
        return SLIM_OK; /* not known before the run (BYTES: their lengths): checked when written */
    double bytes = (double)slim_dtype_size(dtype) * (double)(rows > 0 ? rows : 1);
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0)
            return SLIM_OK;
        bytes *= (double)dims[d];
    }
    if (bytes > (double)span->size)
        return slim_errf(err, SLIM_EINVAL, "output '%s' takes %.0f bytes but its "
                         "shared_memory_byte_size in region \"%s\" is %llu", name, bytes,
                         span->name, (unsigned long long)span->size);
    return SLIM_OK;
}

slim_status slim_server_shm_output(const slim_server_shm_span *span, const slim_tensor *t,
                                   const char *name, slim_err *err)
{
    if (t->dtype == SLIM_STRING)
        return string_output(span, t, name, err);
    size_t n = slim_tensor_nbytes(t);
    const shm_region *r = span->region;
    if (n > span->size)
        return slim_errf(err, SLIM_EINVAL, "output '%s' takes %zu bytes but its "
                         "shared_memory_byte_size in region \"%s\" is %llu", name, n, span->name,
                         (unsigned long long)span->size);
    if (!n)
        return SLIM_OK;
    if (t->device && t->device != slim_device_cpu())
        return slim_errf(err, SLIM_EINTERNAL, "output '%s' is on %s, not on the host", name,
                         t->device->name);
    if (r->kind == SLIM_SHM_SYSTEM) {
        memcpy(span->ptr, t->data, n);
        return SLIM_OK;
    }
    slim_status s = r->dev->backend->copy(r->dev, span->ptr, t->data, n, SLIM_COPY_H2D, err);
    if (s == SLIM_OK)
        s = r->dev->backend->sync(r->dev, err); /* landed before the client is answered */
    if (s != SLIM_OK)
        slim_err_prefix(err, "output '%s' into CUDA region \"%s\": ", name, r->name);
    return s;
}
