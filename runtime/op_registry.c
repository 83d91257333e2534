/*
 * op_registry.c - operator lookup by (domain, op type, opset) over tables
 * of any entry type (op_registry.h).
 *
 * Lookups happen at graph finalize and placement, once per node, so a
 * linear scan of a few hundred entries is all it takes.
 */
#include "op_registry.h"

#include <string.h>

/* The two key fields of the entry at p, read by offset: the entry's own
 * type (slim_op_def, a backend's kernel struct) is not known here. */
static slim_op_key entry_key(const char *p)
{
    slim_op_key k;
    memcpy(&k.op_type, p + offsetof(slim_op_key, op_type), sizeof(k.op_type));
    memcpy(&k.since, p + offsetof(slim_op_key, since), sizeof(k.since));
    return k;
}

static bool is_default_domain(const char *domain)
{
    return !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
}

static bool same_domain(const char *a, const char *b)
{
    bool da = is_default_domain(a), db = is_default_domain(b);
    return da || db ? da && db : strcmp(a, b) == 0;
}

const void *slim_op_tables_find(const slim_op_table *tables, size_t n, const char *domain,
                                const char *op_type, int opset)
{
    const char *best = NULL;
    int best_since = 0;
    for (size_t t = 0; t < n; t++) {
        if (!same_domain(tables[t].domain, domain))
            continue;
        for (const char *p = tables[t].entries;; p += tables[t].stride) {
            slim_op_key k = entry_key(p);
            if (!k.op_type)
                break;
            if (strcmp(k.op_type, op_type) != 0 || (!tables[t].any_opset && k.since > opset))
                continue;
            if (!best || k.since > best_since) {
                best = p;
                best_since = k.since;
            }
        }
    }
    return best;
}

void slim_op_tables_foreach(const slim_op_table *tables, size_t n, const char *domain,
                            void (*fn)(const void *entry, void *user), void *user)
{
    for (size_t t = 0; t < n; t++) {
        if (!same_domain(tables[t].domain, domain))
            continue;
        for (const char *p = tables[t].entries; entry_key(p).op_type; p += tables[t].stride)
            fn(p, user);
    }
}

/* ---- the process's registry ---------------------------------------------- */

#define MAX_SETS 8

static struct {
    const slim_op_table *tables;
    size_t n;
} sets[MAX_SETS];
static int n_sets;

slim_status slim_op_registry_add(const slim_op_table *tables, size_t n, slim_err *err)
{
    if (n_sets == MAX_SETS)
        return slim_errf(err, SLIM_ENOMEM, "the operator registry holds at most %d sets of "
                         "tables", MAX_SETS);
    sets[n_sets].tables = tables;
    sets[n_sets].n = n;
    n_sets++;
    return SLIM_OK;
}

const slim_op_def *slim_op_registry_find(const char *domain, const char *op_type, int opset)
{
    for (int s = 0; s < n_sets; s++) {
        const slim_op_def *d = slim_op_tables_find(sets[s].tables, sets[s].n, domain, op_type,
                                                   opset);
        if (d)
            return d;
    }
    return NULL;
}

bool slim_op_registry_empty(void)
{
    return n_sets == 0;
}
