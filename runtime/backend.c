/*
 * backend.c - finding devices: the CPU, and GPUs through a backend library
 * loaded at run time.
 *
 * The CUDA backend lives in libslim_cuda.so, which links the CUDA runtime
 * and cuBLAS. slim and slimserve never link them: they dlopen the library
 * on the first request for a GPU, so one build runs on machines with and
 * without a GPU (or a driver, or the toolkit's libraries), and reports
 * which of those is missing instead of failing to start. The library
 * resolves the runtime's symbols (allocator, errors, graph helpers) from
 * the executable, which exports them.
 */
#include "device.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef const slim_backend_iface *(*backend_open_fn)(int abi, slim_err *err);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const slim_backend_iface *cuda_backend;
static slim_err cuda_why; /* why there is no CUDA backend */

/* The directory of the running executable, for the library beside it. */
static bool exe_dir(char *buf, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash)
        return false;
    *slash = '\0';
    return true;
}

static void *open_library(char *tried, size_t cap)
{
    const char *env = getenv("SLIM_CUDA_BACKEND");
    char path[4096];
    void *h;
    tried[0] = '\0';
    if (env && env[0]) {
        h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(tried, cap, "%s", dlerror());
        return h;
    }
    char dir[3072];
    if (exe_dir(dir, sizeof(dir))) {
        static const char *const rel[] = {"libslim_cuda.so", "../lib/libslim_cuda.so",
                                          "../lib/slimserve/libslim_cuda.so"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            snprintf(path, sizeof(path), "%s/%s", dir, rel[i]);
            if (access(path, F_OK) != 0)
                continue;
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h)
                return h;
            /* It exists but does not load: its dependencies are missing
             * (no CUDA runtime or cuBLAS on this machine). Say that. */
            snprintf(tried, cap, "%s", dlerror());
            return NULL;
        }
    }
    h = dlopen("libslim_cuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        snprintf(tried, cap, "libslim_cuda.so not found beside the executable or on the "
                 "library path (built without nvcc?)");
    return h;
}

static void cuda_load(void)
{
    char why[1024];
    void *h = open_library(why, sizeof(why));
    if (!h) {
        slim_errf(&cuda_why, SLIM_ENOTFOUND, "no CUDA backend: %s", why);
        return;
    }
    backend_open_fn open_fn = (backend_open_fn)dlsym(h, "slim_cuda_backend_open");
    if (!open_fn) {
        slim_errf(&cuda_why, SLIM_ENOTFOUND, "no CUDA backend: libslim_cuda.so has no "
                  "slim_cuda_backend_open");
        dlclose(h);
        return;
    }
    slim_err err = {0};
    const slim_backend_iface *b = open_fn(SLIM_BACKEND_ABI, &err);
    if (!b) {
        cuda_why = err;
        cuda_why.status = SLIM_ENOTFOUND;
        /* Kept loaded: the CUDA runtime may have started threads. */
        return;
    }
    cuda_backend = b;
}

static atomic_bool cuda_tried;

static const slim_backend_iface *cuda(slim_err *err)
{
    atomic_store(&cuda_tried, true);
    pthread_once(&cuda_once, cuda_load);
    if (!cuda_backend && err)
        *err = cuda_why;
    return cuda_backend;
}

slim_status slim_device_get(const char *name, slim_device **out, slim_err *err)
{
    *out = NULL;
    if (!name || !name[0] || strcmp(name, "cpu") == 0) {
        *out = slim_device_cpu();
        return SLIM_OK;
    }
    if (strcmp(name, "emul:0") == 0) { /* for tests: device_emul.c */
        *out = slim_device_emul();
        return SLIM_OK;
    }
    int ordinal = 0;
    if (strncmp(name, "cuda", 4) != 0)
        return slim_errf(err, SLIM_EINVAL, "unknown device \"%s\" (expected cpu, cuda or "
                         "cuda:N)", name);
    if (name[4] == ':') {
        char *end;
        long v = strtol(name + 5, &end, 10);
        if (end == name + 5 || *end || v < 0 || v > 1024)
            return slim_errf(err, SLIM_EINVAL, "unknown device \"%s\" (expected cuda:N with N "
                             "a device number)", name);
        ordinal = (int)v;
    } else if (name[4]) {
        return slim_errf(err, SLIM_EINVAL, "unknown device \"%s\" (expected cpu, cuda or "
                         "cuda:N)", name);
    }
    const slim_backend_iface *b = cuda(err);
    if (!b)
        return err ? err->status : SLIM_ENOTFOUND;
    if (ordinal >= b->n_devices)
        return slim_errf(err, SLIM_ENOTFOUND, "no device %s: this machine has %d CUDA "
                         "device%s", name, b->n_devices, b->n_devices == 1 ? "" : "s");
    *out = b->devices[ordinal];
    return SLIM_OK;
}

slim_device *slim_device_pinned_host(void)
{
    const slim_backend_iface *b = atomic_load(&cuda_tried) ? cuda(NULL) : NULL;
    return b ? b->pinned_host : NULL;
}

int slim_device_list(slim_device **out, int cap, bool load, const char **why_none)
{
    int n = 0;
    if (n < cap)
        out[n] = slim_device_cpu();
    n++;
    const slim_backend_iface *b = load || atomic_load(&cuda_tried) ? cuda(NULL) : NULL;
    if (why_none)
        *why_none = b ? NULL : cuda_why.msg;
    for (int i = 0; b && i < b->n_devices; i++, n++)
        if (n < cap)
            out[n] = b->devices[i];
    return n;
}
