/*
 * cpu_backend.h - the CPU as a device backend (cpu_backend.c) and its
 * operator tables (kernels/registry.c), for slim_init to register.
 *
 *     slim_op_registry_add(slim_cpu_op_tables(&n), n, &err);
 *     slim_backend_register(&(slim_backend_reg){.name = "cpu",
 *                                               .iface = slim_cpu_backend()}, &err);
 */
#ifndef SLIM_CPU_BACKEND_H
#define SLIM_CPU_BACKEND_H

#include "device.h"
#include "op_registry.h"

/* The CPU's backend: its one device is slim_device_cpu(). */
const slim_backend_iface *slim_cpu_backend(void);
/* Every CPU operator table under its domain. */
const slim_op_table *slim_cpu_op_tables(size_t *n);

#endif
