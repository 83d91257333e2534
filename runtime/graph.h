/*
 * graph.h - slimserve's graph IR, shared by loaders, the executor and kernels.
 *
 * A graph owns values (named tensors: inputs, initializers, intermediates,
 * outputs) and nodes (one operator application each). Value and node ids are
 * indices into the graph's arrays. Loaders build a graph with the
 * slim_graph_add_* calls; slim_graph_finalize() sorts it topologically,
 * resolves each node's operator and counts consumers. After that the graph
 * is read-only and shared by every run.
 */
#ifndef SLIM_GRAPH_H
#define SLIM_GRAPH_H

#include "slim.h"

typedef enum {
    SLIM_ATTR_UNDEFINED = 0,
    SLIM_ATTR_FLOAT,
    SLIM_ATTR_INT,
    SLIM_ATTR_STRING,
    SLIM_ATTR_TENSOR,
    SLIM_ATTR_FLOATS,
    SLIM_ATTR_INTS,
    SLIM_ATTR_STRINGS,
    SLIM_ATTR_GRAPH, /* a subgraph in g; a GRAPHS list keeps g NULL (unsupported) */
} slim_attr_type;

struct slim_graph;

typedef struct slim_attr {
    char *name;
    slim_attr_type type;
    float f;
    int64_t i;
    char *s;               /* STRING (NUL-terminated copy) */
    int n;                 /* element count of FLOATS / INTS / STRINGS */
    float *floats;
    int64_t *ints;
    char **strings;
    slim_tensor *t;        /* TENSOR, host memory owned by the attribute */
    struct slim_graph *g;  /* GRAPH, owned by the attribute (see below) */
} slim_attr;

struct slim_op_def;

typedef struct slim_node {
    char *name;            /* never NULL: loaders synthesize "Op_12" */
    char *op_type;
    char *domain;          /* "" for the default ONNX domain */
    int opset;             /* opset version of the node's domain */
    int n_in, n_out;
    int *in;               /* value ids; -1 for an absent optional input */
    /* The last n_implicit inputs are outer-scope values that the node's
     * subgraphs read (slim_graph_capture_outer); the schema's arity covers
     * the others. Listing them as inputs keeps them alive, and ordered
     * before the node, like any other input. */
    int n_implicit;
    int *out;              /* value ids; -1 for an unused optional output */
    int n_attrs;
    slim_attr *attrs;
    const struct slim_op_def *op; /* set by slim_graph_finalize */
    void *op_state;        /* parsed attributes, from op->prepare */
    /* Placement (partition.c): the device that runs it, NULL for the CPU,
     * that device's kernel for it, and the inputs it reads on the host. */
    struct slim_device *device;
    const void *dev_kernel;
    unsigned host_inputs;
} slim_node;

typedef enum {
    SLIM_VALUE_INTERMEDIATE = 0,
    SLIM_VALUE_INPUT,
    SLIM_VALUE_INITIALIZER,
} slim_value_kind;

typedef struct slim_value {
    char *name;
    slim_value_kind kind;
    slim_io_info info;     /* declared dtype/shape (from value_info), if any */
    slim_tensor init;      /* INITIALIZER: data, read-only, shared by runs */
    int producer;          /* node id, or -1 */
    int n_consumers;       /* node input slots reading it, set by finalize */
    bool is_output;
} slim_value;

typedef struct slim_graph {
    char *name;
    int n_values, cap_values;
    slim_value *values;
    int n_nodes, cap_nodes;
    slim_node *nodes;      /* topologically sorted after finalize */
    int n_inputs, n_outputs;
    int *inputs;           /* value ids of graph inputs (not initializers) */
    int *outputs;          /* value ids of graph outputs */
    int *name_index;       /* open-addressing hash of value names -> id */
    int name_index_cap;
    int opset;             /* default-domain opset */
    int64_t ir_version;
    char *producer_name;
} slim_graph;

slim_graph *slim_graph_new(void);
void slim_graph_free(slim_graph *g);
/* Frees what a node owns (attributes, names, slots), not its kernel state. */
void slim_node_clear(slim_node *n);
/* Removes the nodes marked dead (one flag per node), clearing each, and
 * keeps the others in order; for passes, before finalize. */
void slim_graph_remove_nodes(slim_graph *g, const bool *dead);

/* Returns the id of the value with this name, creating it if needed; -1 on
 * allocation failure. */
int slim_graph_value(slim_graph *g, const char *name);
/* A new initializer named base + suffix (made unique with _1, _2...)
 * holding t, which it takes (t is cleared; released on failure). Its id, or
 * -1 when out of memory. The passes that rewrite weights add theirs so. */
int slim_graph_add_initializer(slim_graph *g, const char *base, const char *suffix,
                               slim_tensor *t, slim_err *err);
int slim_graph_find_value(const slim_graph *g, const char *name); /* or -1 */
/* Appends a node; strings are copied; returns node id or -1. */
int slim_graph_add_node(slim_graph *g, const char *name, const char *op_type,
                        const char *domain, int n_in, const char *const *in,
                        int n_out, const char *const *out);
slim_status slim_graph_add_input(slim_graph *g, int value_id);
slim_status slim_graph_add_output(slim_graph *g, int value_id);

/* Sorts nodes, checks every input has a producer, looks up operators
 * (unknown ops are an EUNSUPPORTED error naming node and op), prepares
 * their state, counts consumers. */
slim_status slim_graph_finalize(slim_graph *g, slim_err *err);

void slim_attr_clear(slim_attr *a);

/* Subgraphs (If, Loop, Scan bodies) are slim_graphs held by GRAPH
 * attributes. A name a subgraph reads but does not define is an outer-scope
 * value: this call gathers those of node node_id's subgraphs (after their
 * own nodes were added, inner subgraphs first), appends them to the node's
 * inputs as implicit inputs, and makes each of them an input of every one
 * of the node's subgraphs, after its formal inputs and in the same order.
 * A subgraph is finalized by its operator's prepare. */
slim_status slim_graph_capture_outer(slim_graph *g, int node_id, slim_err *err);

/* ---- attribute lookup used by kernels ---------------------------------- */

const slim_attr *slim_node_attr(const slim_node *n, const char *name);
int64_t slim_attr_int(const slim_node *n, const char *name, int64_t dflt);
float slim_attr_float(const slim_node *n, const char *name, float dflt);
const char *slim_attr_str(const slim_node *n, const char *name, const char *dflt);
/* Copies up to cap ints into out; returns the count found, or -1 if absent. */
int slim_attr_ints(const slim_node *n, const char *name, int64_t *out, int cap);

/* Names a node in messages: node "conv1" (Conv). */
#define SLIM_NODE_FMT "node \"%s\" (%s)"
#define SLIM_NODE_ARGS(n) (n)->name, (n)->op_type

#endif
