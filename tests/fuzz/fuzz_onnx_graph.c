/*
 * fuzz_onnx_graph.c - the ONNX loader with a structure-aware mutator.
 *
 * Byte flips rarely get past protobuf parsing into a graph that loads, and
 * the crashes worth finding are in well-formed files whose graphs lie: a
 * node with too few inputs, an empty or undefined name, an extra output, an
 * attribute of the wrong type. So the mutator unpacks the ModelProto, makes
 * one such edit, and packs it again; libFuzzer's byte mutation runs when the
 * input does not parse. The harness is the byte target's (onnx_harness.c).
 *
 * Strings and arrays in an unpacked protobuf-c message are separately
 * malloc'ed and freed by free_unpacked, so edits replace them with malloc'ed
 * ones and free what they drop.
 */
#include "fuzz.h"
#include "onnx.pb-c.h"
#include "onnx_wire.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    slim_fuzz_onnx(data, size);
    return 0;
}

static unsigned rnd(unsigned *s, unsigned n)
{
    *s = *s * 1103515245u + 12345u;
    return n ? (*s >> 8) % n : 0;
}

/* A name some value in the graph already has, or a fresh one. */
static char *pick_name(const Onnx__GraphProto *g, unsigned *s)
{
    switch (rnd(s, 4)) {
    case 0:
        return strdup("");
    case 1:
        return strdup("ghost");
    default:
        if (g->n_node) {
            const Onnx__NodeProto *n = g->node[rnd(s, (unsigned)g->n_node)];
            if (n->n_output)
                return strdup(n->output[rnd(s, (unsigned)n->n_output)]);
        }
        if (g->n_input)
            return strdup(g->input[rnd(s, (unsigned)g->n_input)]->name);
        return strdup("x");
    }
}

static char **resize_names(char **arr, size_t n)
{
    return realloc(arr, sizeof(char *) * (n ? n : 1));
}

static const char *const OPS[] = {
    "Transpose", "Softmax", "MatMul", "Conv", "Resize", "Split", "Concat", "Gather",
    "Reshape", "Slice", "Pad", "Gemm", "LSTM", "TopK", "Expand", "Tile", "Where",
    "ReduceSum", "BatchNormalization", "LayerNormalization", "MaxPool", "Cast",
    "ConstantOfShape", "Range", "OneHot", "ScatterND", "GatherND", "Einsum",
};

static void mutate_attr(Onnx__AttributeProto *a, unsigned *s)
{
    switch (rnd(s, 4)) {
    case 0: /* the type changes, the payload stays */
        a->type = (Onnx__AttributeProto__AttributeType)rnd(s, 15);
        break;
    case 1: /* an int at an edge */
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        a->has_i = 1;
        a->i = (int64_t[]){0, -1, 1, 7, -7, INT64_MAX, INT64_MIN, 1 << 20}[rnd(s, 8)];
        break;
    case 2: /* an ints list with edge values */
        if (a->n_ints) {
            a->ints[rnd(s, (unsigned)a->n_ints)] =
                (int64_t[]){0, -1, 1, -100, 1 << 30, INT64_MAX}[rnd(s, 6)];
        } else {
            a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        }
        break;
    default: /* one element fewer */
        if (a->n_ints)
            a->n_ints--;
        else if (a->n_floats)
            a->n_floats--;
        break;
    }
}

/* One edit of the graph; returns 0 when there was nothing to edit. */
static int edit(Onnx__ModelProto *mp, unsigned *s)
{
    Onnx__GraphProto *g = mp->graph;
    if (!g || !g->n_node)
        return 0;
    Onnx__NodeProto *n = g->node[rnd(s, (unsigned)g->n_node)];
    switch (rnd(s, 10)) {
    case 0: /* drop an input */
        if (!n->n_input)
            return 0;
        free(n->input[--n->n_input]);
        return 1;
    case 1: /* an input slot names something else, or nothing */
        if (!n->n_input)
            return 0;
        {
            size_t k = rnd(s, (unsigned)n->n_input);
            char *name = pick_name(g, s); /* may copy the name it replaces */
            free(n->input[k]);
            n->input[k] = name;
        }
        return 1;
    case 2: /* one input more */
        n->input = resize_names(n->input, n->n_input + 1);
        n->input[n->n_input++] = pick_name(g, s);
        return 1;
    case 3: /* one output more */
        n->output = resize_names(n->output, n->n_output + 1);
        {
            char name[32];
            snprintf(name, sizeof(name), "extra%u", rnd(s, 1000));
            n->output[n->n_output++] = strdup(rnd(s, 4) ? name : "");
        }
        return 1;
    case 4: /* drop every input */
        for (size_t k = 0; k < n->n_input; k++)
            free(n->input[k]);
        n->n_input = 0;
        return 1;
    case 5: /* another operator on the same slots */
        free(n->op_type);
        n->op_type = strdup(OPS[rnd(s, sizeof(OPS) / sizeof(OPS[0]))]);
        return 1;
    case 6: /* an attribute changes */
        if (!n->n_attribute)
            return 0;
        mutate_attr(n->attribute[rnd(s, (unsigned)n->n_attribute)], s);
        return 1;
    case 7: /* an output renamed onto an existing value */
        if (!n->n_output)
            return 0;
        {
            size_t k = rnd(s, (unsigned)n->n_output);
            char *name = pick_name(g, s); /* may copy the name it replaces */
            free(n->output[k]);
            n->output[k] = name;
        }
        return 1;
    case 8: /* another opset */
        if (!mp->n_opset_import)
            return 0;
        mp->opset_import[0]->version = (int64_t[]){1, 7, 9, 11, 13, 17, 21, 99}[rnd(s, 8)];
        return 1;
    default: /* an initializer's dims change, its data does not */
        if (!g->n_initializer)
            return 0;
        {
            Onnx__TensorProto *t = g->initializer[rnd(s, (unsigned)g->n_initializer)];
            if (!t->n_dims)
                return 0;
            t->dims[rnd(s, (unsigned)t->n_dims)] = (int64_t[]){0, 1, 2, -1, 1 << 20}[rnd(s, 5)];
        }
        return 1;
    }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed)
{
    unsigned s = seed;
    /* The loader's own pre-scan first: unpacking a model nested thousands
     * deep would overflow the mutator's stack, not the code under test. */
    if (slim_onnx_wire_check_nesting(data, size, NULL) != SLIM_OK)
        return LLVMFuzzerMutate(data, size, max_size);
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, size, data);
    if (!mp)
        return LLVMFuzzerMutate(data, size, max_size);
    int edits = 0;
    for (int i = 0, want = 1 + (int)rnd(&s, 3); i < want * 4 && edits < want; i++)
        edits += edit(mp, &s);
    size_t out = 0;
    if (edits) {
        size_t packed = onnx__model_proto__get_packed_size(mp);
        if (packed <= max_size)
            out = onnx__model_proto__pack(mp, data);
    }
    onnx__model_proto__free_unpacked(mp, NULL);
    return out ? out : LLVMFuzzerMutate(data, size, max_size);
}
