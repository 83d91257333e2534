/* model.h - the model object (internal): a finalized graph plus run state. */
#ifndef SLIM_MODEL_H
#define SLIM_MODEL_H

#include "alloc.h"
#include "graph.h"

#include <stdio.h>

struct slim_plan_cache;

struct slim_model {
    slim_graph *graph;
    char *path;
    slim_io_info *inputs;   /* views into graph values */
    slim_io_info *outputs;
    size_t weight_bytes;
    size_t weight_bytes_by_dtype[SLIM_DTYPE_COUNT]; /* the same bytes split by dtype */
    int64_t param_count;
    /* Weights (when loaded from a file) and every run's memory are charged
     * here; its limit is the model's memory limit. */
    slim_mem_account *account;
    struct slim_plan_cache *plans;  /* arena plans per input signature (plan.c) */
    /* Matrix products compute each row the same way whatever rows share the
     * call, so a request's answer does not depend on its batch (set by
     * servers that merge requests; costs some speed on small batches). */
    bool batch_invariant;
    /* Precision "fp32-strict": float32 products on a GPU compute in
     * float32 rather than TF32 (slim_gemm_set_fp32_strict). */
    bool fp32_strict;
    /* Where the model was placed (partition.c); NULL: all on the CPU. */
    struct slim_device *device;
    /* A subgraph's model (If/Loop/Scan bodies, kernels/cpu/control.c): its
     * graph belongs to the node's GRAPH attribute, and its runs happen
     * inside the parent's, charging the parent's account and keeping its
     * GEMM mode. */
    bool nested;
};

/* Places the model's nodes on a device ("cpu", "cuda:N"; partition.c): each
 * node runs there when the device has a kernel for it, copies are inserted
 * between devices, and weights read there are uploaded once. Call before
 * the first run. */
slim_status slim_model_set_device(slim_model *m, const char *device, slim_err *err);
slim_status slim_model_place(slim_model *m, struct slim_device *dev, slim_err *err);
/* Counts nodes by placement (copies apart). */
void slim_model_placement(const slim_model *m, int *on_device, int *on_cpu, int *copies);
/* One line per node: where it runs (for slim inspect --device). */
void slim_model_print_placement(const slim_model *m, FILE *f);
/* Remakes what the model derives from its graph (io infos, weight bytes)
 * after a pass replaced the graph (model.c). */
slim_status slim__model_refresh(slim_model *m, slim_err *err);

/* Caps what the model may hold at once (weights included); 0 removes the
 * cap. Fails with SLIM_EOOM when the weights alone are over it. */
slim_status slim_model_set_memory_limit(slim_model *m, size_t bytes, slim_err *err);
void slim_model_set_batch_invariant(slim_model *m, bool on);
/* Precision "fp32-strict" after load (tests; loads take it from opts). */
void slim_model_set_fp32_strict(slim_model *m, bool on);

/* Takes ownership of g (also on failure): finalizes it and wraps it. */
slim_status slim_model_from_graph(slim_graph *g, slim_model **out, slim_err *err);

/* Finalizes subgraph g and wraps it in a nested model (above) that
 * borrows it: freeing the model leaves g to its attribute. Runs of the
 * model plan its activations in an arena of its own per input signature,
 * taken and dropped within each run. */
slim_status slim__model_from_subgraph(slim_graph *g, slim_model **out, slim_err *err);

/* Loader entry points (loaders/onnx/onnx_loader.c). */
slim_status slim_onnx_load_file(const char *path, slim_graph **out, slim_err *err);
slim_status slim_onnx_load_buffer(const void *data, size_t size, const char *base_dir,
                                  slim_graph **out, slim_err *err);
/* Parses a serialized onnx TensorProto (test data files) into a host tensor. */
slim_status slim_onnx_load_tensor_file(const char *path, slim_tensor *out,
                                       char *name, size_t name_cap, slim_err *err);
/* Parses a serialized TensorProto held in memory (loaders/onnx). */
slim_status slim__onnx_tensor_from_bytes(const uint8_t *data, size_t size, const char *base_dir,
                                         slim_tensor *out, slim_err *err);
/* Test data of any value kind (loaders/onnx/onnx_value.c): a TensorProto
 * for a tensor, a SequenceProto for a sequence, an OptionalProto for an
 * optional (kind as in slim_io_info). *out is a new tensor or container. */
slim_status slim_onnx_load_value_file(const char *path, slim_kind kind, slim_tensor *out,
                                      slim_err *err);

/* Infers every value's shape for the given input shapes without running
 * (shape-only and small constant subgraphs are evaluated). shapes[v] is
 * filled for each value id; values whose shape depends on runtime data get
 * ndim -1. Returns the first hard error. */
slim_status slim_model_infer_shapes(const slim_model *m, const slim_tensor *input_shapes,
                                    slim_tensor *shapes, slim_err *err);

#endif
