/*
 * devices.c - the list of device backends, and slim_init, which registers
 * them with the runtime's device registry (runtime/device.h).
 *
 * The CPU is built in and always first. CUDA is a library beside the
 * executable (or the path in SLIM_CUDA_BACKEND), opened only when a GPU is
 * asked for. emul:0 is the host dressed as a device for tests
 * (runtime/device_emul.c): started when asked for, never listed. A new device adds
 * one entry here (docs/architecture.md).
 */
#include "slim_init.h"

#include "cpu_backend.h"
#include "device.h"
#include "op_registry.h"

#include <pthread.h>
#include <stdio.h>

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_once_fn(void)
{
    slim_err err = {0};
    size_t n_tables;
    const slim_op_table *tables = slim_cpu_op_tables(&n_tables);
    const slim_backend_reg backends[] = {
        {.name = "cpu", .title = "CPU", .iface = slim_cpu_backend()},
        {.name = "cuda", .title = "CUDA", .library = "libslim_cuda.so",
         .library_env = "SLIM_CUDA_BACKEND", .open_symbol = "slim_cuda_backend_open",
         .missing_hint = "built without nvcc?"},
        {.name = "emul", .title = "emul", .open = slim_emul_backend_open, .unlisted = true},
    };
    slim_status st = slim_op_registry_add(tables, n_tables, &err);
    for (size_t i = 0; !st && i < sizeof(backends) / sizeof(backends[0]); i++)
        st = slim_backend_register(&backends[i], &err);
    if (st)
        fprintf(stderr, "slim_init: %s\n", err.msg);
}

void slim_init(void)
{
    pthread_once(&init_once, init_once_fn);
}
