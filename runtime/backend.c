/*
 * backend.c - the device registry: backends registered by name, devices
 * found by name, and backend libraries loaded at run time (device.h).
 *
 * Which backends exist is not decided here: slim_init (pipeline/devices.c)
 * registers the list. A library backend (CUDA's libslim_cuda.so links the
 * CUDA runtime and cuBLAS, which slim and slimserve never link) is opened
 * on the first request for one of its devices, once; what went wrong is
 * kept and given to every later request.
 */
#include "device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BACKENDS 8

typedef struct backend_entry {
    slim_backend_reg reg;
    pthread_once_t once;       /* the library's load */
    atomic_bool tried;         /* someone asked for it (or it is built in) */
    const slim_backend_iface *iface;
    slim_err why;              /* why there is no iface */
} backend_entry;

static backend_entry entries[MAX_BACKENDS];
static int n_entries;

slim_status slim_backend_register(const slim_backend_reg *reg, slim_err *err)
{
    if (!reg->name || !reg->name[0] || strchr(reg->name, ':') ||
        (!reg->iface && !reg->open && !reg->library))
        return slim_errf(err, SLIM_EINVAL, "a device backend needs a name without ':' and "
                         "an interface, an open function or a library");
    for (int i = 0; i < n_entries; i++)
        if (strcmp(entries[i].reg.name, reg->name) == 0)
            return slim_errf(err, SLIM_EINVAL, "device backend \"%s\" is registered twice",
                             reg->name);
    if (n_entries == MAX_BACKENDS)
        return slim_errf(err, SLIM_EINVAL, "at most %d device backends", MAX_BACKENDS);
    backend_entry *e = &entries[n_entries];
    *e = (backend_entry){.reg = *reg, .once = PTHREAD_ONCE_INIT};
    if (reg->iface) {
        e->iface = reg->iface;
        atomic_init(&e->tried, true);
        for (int i = 0; i < reg->iface->n_devices; i++)
            if (!reg->iface->devices[i]->backend)
                reg->iface->devices[i]->backend = reg->iface;
    }
    n_entries++;
    return SLIM_OK;
}

/* ---- loading a library backend ------------------------------------------ */

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

static void *open_library(const slim_backend_reg *reg, char *tried, size_t cap)
{
    const char *env = reg->library_env ? getenv(reg->library_env) : NULL;
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
        static const char *const rel[] = {"", "../lib/", "../lib/slimserve/"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            snprintf(path, sizeof(path), "%s/%s%s", dir, rel[i], reg->library);
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
    h = dlopen(reg->library, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        snprintf(tried, cap, "%s not found beside the executable or on the library path%s%s%s",
                 reg->library, reg->missing_hint ? " (" : "",
                 reg->missing_hint ? reg->missing_hint : "", reg->missing_hint ? ")" : "");
    return h;
}

static void entry_load(backend_entry *e)
{
    const slim_backend_reg *reg = &e->reg;
    const char *title = reg->title ? reg->title : reg->name;
    slim_backend_open_fn open_fn = reg->open;
    if (!open_fn) {
        char why[1024];
        void *h = open_library(reg, why, sizeof(why));
        if (!h) {
            slim_errf(&e->why, SLIM_ENOTFOUND, "no %s backend: %s", title, why);
            return;
        }
        open_fn = (slim_backend_open_fn)dlsym(h, reg->open_symbol);
        if (!open_fn) {
            slim_errf(&e->why, SLIM_ENOTFOUND, "no %s backend: %s has no %s", title,
                      reg->library, reg->open_symbol);
            dlclose(h);
            return;
        }
    }
    slim_err err = {0};
    const slim_backend_iface *b = open_fn(SLIM_BACKEND_ABI, &err);
    if (!b) {
        e->why = err;
        e->why.status = SLIM_ENOTFOUND;
        /* Kept loaded: the CUDA runtime may have started threads. */
        return;
    }
    for (int i = 0; i < b->n_devices; i++)
        if (!b->devices[i]->backend)
            b->devices[i]->backend = b;
    e->iface = b;
}

/* pthread_once takes no argument: one trampoline per slot. */
#define SLIM__LOAD_SLOT(i) static void load_##i(void) { entry_load(&entries[i]); }
SLIM__LOAD_SLOT(0) SLIM__LOAD_SLOT(1) SLIM__LOAD_SLOT(2) SLIM__LOAD_SLOT(3)
SLIM__LOAD_SLOT(4) SLIM__LOAD_SLOT(5) SLIM__LOAD_SLOT(6) SLIM__LOAD_SLOT(7)
#undef SLIM__LOAD_SLOT
static void (*const loaders[MAX_BACKENDS])(void) = {load_0, load_1, load_2, load_3,
                                                    load_4, load_5, load_6, load_7};

/* The entry's backend, loading a library backend on first use; NULL with
 * *err (may be NULL) saying why. */
static const slim_backend_iface *entry_backend(backend_entry *e, slim_err *err)
{
    if (!e->reg.iface) {
        atomic_store(&e->tried, true);
        pthread_once(&e->once, loaders[e - entries]);
    }
    if (!e->iface && err)
        *err = e->why;
    return e->iface;
}

/* ---- finding devices ------------------------------------------------------ */

static backend_entry *find_entry(const char *name, size_t len)
{
    for (int i = 0; i < n_entries; i++)
        if (strlen(entries[i].reg.name) == len && strncmp(entries[i].reg.name, name, len) == 0)
            return &entries[i];
    return NULL;
}

/* "unknown device" with what would have been known: "cpu, cuda or cuda:N". */
static slim_status unknown_device(const char *name, slim_err *err)
{
    char list[256] = "";
    size_t used = 0;
    const char *last = NULL;
    for (int i = 0; i < n_entries; i++) {
        if (entries[i].reg.unlisted)
            continue;
        used += (size_t)snprintf(list + used, used < sizeof(list) ? sizeof(list) - used : 0,
                                 "%s%s", used ? ", " : "", entries[i].reg.name);
        if (used >= sizeof(list))
            used = sizeof(list) - 1;
        last = entries[i].reg.name;
    }
    if (!last)
        return slim_errf(err, SLIM_EINVAL, "unknown device \"%s\" (no device backends "
                         "registered: the program must call slim_init first)", name);
    return slim_errf(err, SLIM_EINVAL, "unknown device \"%s\" (expected %s or %s:N)", name, list,
                     last);
}

slim_status slim_device_get(const char *name, slim_device **out, slim_err *err)
{
    *out = NULL;
    if (!name || !name[0])
        name = "cpu";
    const char *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    backend_entry *e = find_entry(name, len);
    if (!e)
        return unknown_device(name, err);
    int ordinal = 0;
    if (colon) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || *end || v < 0 || v > 1024)
            return slim_errf(err, SLIM_EINVAL, "unknown device \"%s\" (expected %s:N with N "
                             "a device number)", name, e->reg.name);
        ordinal = (int)v;
    }
    const slim_backend_iface *b = entry_backend(e, err);
    if (!b)
        return err ? err->status : SLIM_ENOTFOUND;
    if (ordinal >= b->n_devices)
        return slim_errf(err, SLIM_ENOTFOUND, "no device %s: this machine has %d %s "
                         "device%s", name, b->n_devices, e->reg.title ? e->reg.title : e->reg.name,
                         b->n_devices == 1 ? "" : "s");
    *out = b->devices[ordinal];
    return SLIM_OK;
}

slim_device *slim_device_pinned_host(void)
{
    for (int i = 0; i < n_entries; i++) {
        backend_entry *e = &entries[i];
        const slim_backend_iface *b = atomic_load(&e->tried) ? entry_backend(e, NULL) : NULL;
        if (b && b->pinned_host)
            return b->pinned_host;
    }
    return NULL;
}

int slim_device_list(slim_device **out, int cap, bool load, const char **why_none)
{
    int n = 0;
    if (why_none)
        *why_none = NULL;
    for (int i = 0; i < n_entries; i++) {
        backend_entry *e = &entries[i];
        if (e->reg.unlisted)
            continue;
        const slim_backend_iface *b = load || atomic_load(&e->tried) ? entry_backend(e, NULL)
                                                                     : NULL;
        if (!b && why_none)
            *why_none = e->why.msg;
        for (int d = 0; b && d < b->n_devices; d++, n++)
            if (n < cap)
                out[n] = b->devices[d];
    }
    return n;
}
