/*
 * op_registry.h - finding an operator's entry by (domain, op type, opset).
 *
 * One mechanism for every table of operators: the CPU's slim_op_defs
 * (kernels/registry.c lists them) and a device backend's kernel entries
 * (kernels/cuda/backend.c). An entry of any table starts with the two
 * fields of slim_op_key; the rule is ONNX's: of the entries with the
 * node's domain and op type, the one with the highest `since` <= the
 * node's opset (the first such in table order on a tie).
 *
 *     static const slim_op_table tables[] = {
 *         SLIM_OP_TABLE("", slim__ops_elementwise),
 *         SLIM_OP_TABLE("com.microsoft", slim__ops_microsoft),
 *     };
 *     const slim_op_def *d = slim_op_tables_find(tables, 2, "", "Add", 17);
 *
 * The process's operator contract (the defs whose prepare and infer serve
 * every device, and whose exec is the CPU's) is one set of such tables,
 * registered at start-up by slim_init (pipeline/slim_init.h) before any
 * graph is finalized; slim_graph_finalize looks nodes up there.
 */
#ifndef SLIM_OP_REGISTRY_H
#define SLIM_OP_REGISTRY_H

#include "op.h"

#include <stddef.h>

/* The leading fields of every table entry; a table ends with op_type NULL. */
typedef struct slim_op_key {
    const char *op_type;
    int since;                 /* lowest opset the entry implements */
} slim_op_key;

typedef struct slim_op_table {
    const char *domain;        /* "" for ONNX's default domain (also NULL, "ai.onnx") */
    const void *entries;
    size_t stride;             /* sizeof one entry */
    /* Entries match whatever the node's opset (the partition pass's
     * copies, which have one version only). */
    bool any_opset;
} slim_op_table;

#define SLIM_OP_TABLE(domain, array) {(domain), (array), sizeof((array)[0]), false}
/* Whether entry type T starts as slim_op_key does; for a static_assert. */
#define SLIM_OP_KEY_LAYOUT_OK(T)                                                \
    (offsetof(T, op_type) == offsetof(slim_op_key, op_type) &&                 \
     offsetof(T, since) == offsetof(slim_op_key, since))

/* The entry for (domain, op_type, opset) among n tables, or NULL. */
const void *slim_op_tables_find(const slim_op_table *tables, size_t n, const char *domain,
                                const char *op_type, int opset);
/* Calls fn for every entry of the tables of one domain, in order. */
void slim_op_tables_foreach(const slim_op_table *tables, size_t n, const char *domain,
                            void (*fn)(const void *entry, void *user), void *user);

/* Adds a set of slim_op_def tables (static storage, kept by pointer) to
 * the process's registry. Sets are searched in the order added; the first
 * that has the operator answers. Not thread-safe against lookups: call it
 * from slim_init, before graphs are finalized. SLIM_ENOMEM past a few sets. */
slim_status slim_op_registry_add(const slim_op_table *tables, size_t n, slim_err *err);
/* The registered def for (domain, op_type, opset), or NULL. */
const slim_op_def *slim_op_registry_find(const char *domain, const char *op_type, int opset);
/* Whether nothing is registered yet (a program that did not call slim_init). */
bool slim_op_registry_empty(void);

#endif
