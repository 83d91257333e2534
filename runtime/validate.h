/*
 * validate.h - checks a node against its operator's schema before any kernel
 * sees it.
 *
 * Kernels index their inputs, outputs and attributes as the operator's
 * definition says they exist; a model file is untrusted, so a node with too
 * few inputs, an empty name in a required slot, one output too many or an
 * attribute of the wrong type must be refused at load, with a message that
 * names the node, the slot and the problem, not discovered by a kernel at
 * the first request. The rules are ONNX's own (OpSchema::Verify): counts
 * within [min, max], a required ("single") slot is never empty, attributes
 * have the declared type, required attributes are present.
 */
#ifndef SLIM_VALIDATE_H
#define SLIM_VALIDATE_H

#include "graph.h"

/* One version of an operator. Slot kinds are one letter per formal
 * parameter: 'S' required, 'O' optional, 'V' variadic (this and every later
 * slot). attrs is "name=t name=t ...", '!' before a required one; the type
 * letters are f i s t g p y (one float/int/string/tensor/graph/sparse
 * tensor/type) and F I S T G P Y (lists of them). */
typedef struct slim_op_schema {
    const char *op_type;
    int since;
    int min_in, max_in, min_out, max_out;
    const char *in_kinds, *out_kinds;
    const char *attrs;
} slim_op_schema;

/* The schema of op_type at this opset of its domain: the version with the
 * highest since <= opset; NULL when there is none. */
const slim_op_schema *slim_op_schema_find(const char *domain, const char *op_type, int opset);

/* Checks node n of g against its schema; EPARSE naming the node, the slot
 * and the problem, or EUNSUPPORTED when the operator has no schema. */
slim_status slim_node_validate(const slim_graph *g, const slim_node *n, slim_err *err);

/* Generated from onnx (runtime/op_schema_data.c), terminated by a NULL
 * op_type. */
extern const slim_op_schema slim__onnx_schemas[];

#endif
