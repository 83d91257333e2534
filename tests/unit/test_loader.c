/* test_loader.c - the ONNX loader on models packed here with protobuf-c. */
#include "testutil.h"
#include "onnx.pb-c.h"
#include "onnx/onnx_wire.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A model: y = Relu(x + w), w a [2,2] float initializer. */
typedef struct proto_model {
    Onnx__ModelProto model;
    Onnx__OperatorSetIdProto opset;
    Onnx__OperatorSetIdProto *opsets[1];
    Onnx__GraphProto graph;
    Onnx__NodeProto add, relu;
    Onnx__NodeProto *nodes[2];
    char *add_in[2], *add_out[1], *relu_in[1], *relu_out[1];
    Onnx__TensorProto w;
    Onnx__TensorProto *inits[1];
    Onnx__StringStringEntryProto ext[3];
    Onnx__StringStringEntryProto *ext_ptrs[3];
    float w_data[4];
    Onnx__ValueInfoProto x_info, y_info;
    Onnx__ValueInfoProto *inputs[1], *outputs[1];
    Onnx__TypeProto x_type;
    Onnx__TypeProto__Tensor x_tensor;
    Onnx__TensorShapeProto x_shape;
    Onnx__TensorShapeProto__Dimension d0, d1;
    Onnx__TensorShapeProto__Dimension *dims[2];
} proto_model;

static void build_model(proto_model *p)
{
    memset(p, 0, sizeof(*p));
    onnx__model_proto__init(&p->model);
    onnx__operator_set_id_proto__init(&p->opset);
    onnx__graph_proto__init(&p->graph);
    onnx__node_proto__init(&p->add);
    onnx__node_proto__init(&p->relu);
    onnx__tensor_proto__init(&p->w);
    onnx__value_info_proto__init(&p->x_info);
    onnx__value_info_proto__init(&p->y_info);
    onnx__type_proto__init(&p->x_type);
    onnx__type_proto__tensor__init(&p->x_tensor);
    onnx__tensor_shape_proto__init(&p->x_shape);
    onnx__tensor_shape_proto__dimension__init(&p->d0);
    onnx__tensor_shape_proto__dimension__init(&p->d1);

    p->opset.domain = "";
    p->opset.has_version = 1;
    p->opset.version = 17;
    p->opsets[0] = &p->opset;
    p->model.n_opset_import = 1;
    p->model.opset_import = p->opsets;
    p->model.has_ir_version = 1;
    p->model.ir_version = 8;
    p->model.graph = &p->graph;

    p->add_in[0] = "x";
    p->add_in[1] = "w";
    p->add_out[0] = "s";
    p->add.op_type = "Add";
    p->add.name = "add0";
    p->add.n_input = 2;
    p->add.input = p->add_in;
    p->add.n_output = 1;
    p->add.output = p->add_out;
    p->relu_in[0] = "s";
    p->relu_out[0] = "y";
    p->relu.op_type = "Relu";
    p->relu.name = "relu0";
    p->relu.n_input = 1;
    p->relu.input = p->relu_in;
    p->relu.n_output = 1;
    p->relu.output = p->relu_out;
    p->nodes[0] = &p->add;
    p->nodes[1] = &p->relu;
    p->graph.n_node = 2;
    p->graph.node = p->nodes;

    static int64_t wdims[2] = {2, 2};
    p->w.name = "w";
    p->w.has_data_type = 1;
    p->w.data_type = 1; /* FLOAT */
    p->w.n_dims = 2;
    p->w.dims = wdims;
    p->w_data[0] = 1;
    p->w_data[1] = -2;
    p->w_data[2] = 3;
    p->w_data[3] = -4;
    p->w.has_raw_data = 1;
    p->w.raw_data.len = sizeof(p->w_data);
    p->w.raw_data.data = (uint8_t *)p->w_data;
    p->inits[0] = &p->w;
    p->graph.n_initializer = 1;
    p->graph.initializer = p->inits;

    p->d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
    p->d0.dim_param = "batch";
    p->d1.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    p->d1.dim_value = 2;
    p->dims[0] = &p->d0;
    p->dims[1] = &p->d1;
    p->x_shape.n_dim = 2;
    p->x_shape.dim = p->dims;
    p->x_tensor.has_elem_type = 1;
    p->x_tensor.elem_type = 1;
    p->x_tensor.shape = &p->x_shape;
    p->x_type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    p->x_type.tensor_type = &p->x_tensor;
    p->x_info.name = "x";
    p->x_info.type = &p->x_type;
    p->y_info.name = "y";
    p->inputs[0] = &p->x_info;
    p->outputs[0] = &p->y_info;
    p->graph.n_input = 1;
    p->graph.input = p->inputs;
    p->graph.n_output = 1;
    p->graph.output = p->outputs;
}

static uint8_t *pack(proto_model *p, size_t *len)
{
    *len = onnx__model_proto__get_packed_size(&p->model);
    uint8_t *buf = malloc(*len);
    onnx__model_proto__pack(&p->model, buf);
    return buf;
}

static slim_status load(proto_model *p, const char *dir, slim_model **m, slim_err *err)
{
    size_t len;
    uint8_t *buf = pack(p, &len);
    slim_graph *g;
    slim_status st = slim_onnx_load_buffer(buf, len, dir, &g, err);
    free(buf);
    if (st)
        return st;
    return slim_model_from_graph(g, m, err);
}

START_TEST(loads_and_runs_a_small_model)
{
    proto_model p;
    build_model(&p);
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(load(&p, NULL, &m, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(slim_model_num_inputs(m), 1);
    const slim_io_info *x = slim_model_input(m, 0);
    ck_assert_str_eq(x->name, "x");
    ck_assert_int_eq(x->dtype, SLIM_F32);
    ck_assert_int_eq(x->ndim, 2);
    ck_assert_int_eq(x->dims[0], -1);
    ck_assert_str_eq(x->dim_names[0], "batch");
    ck_assert_int_eq(x->dims[1], 2);
    ck_assert_int_eq(m->param_count, 4);
    ck_assert_int_eq(m->weight_bytes, 16);
    ck_assert_int_eq(m->graph->opset, 17);

    slim_tensor in = tu_f32(2, (int64_t[]){2, 2}, (float[]){0.5f, 0.5f, 0.5f, 0.5f});
    slim_tensor *out;
    int n_out;
    const char *names[] = {"x"};
    ck_assert_msg(slim_model_run(m, 1, names, &in, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    tu_assert_close_f32(&out[0], (float[]){1.5f, 0, 3.5f, 0}, 4, 1e-6);
    slim_tensors_free(out, n_out);
    slim_tensor_release(&in);
    slim_model_free(m);
}
END_TEST

START_TEST(typed_float_data_is_read)
{
    proto_model p;
    build_model(&p);
    float vals[4] = {9, 8, 7, 6};
    p.w.has_raw_data = 0;
    p.w.n_float_data = 4;
    p.w.float_data = vals;
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(load(&p, NULL, &m, &err) == SLIM_OK, "%s", err.msg);
    int v = slim_graph_find_value(m->graph, "w");
    ck_assert_int_ge(v, 0);
    ck_assert_float_eq(((float *)m->graph->values[v].init.data)[3], 6.0f);
    slim_model_free(m);
}
END_TEST

START_TEST(truncated_and_garbage_files_are_errors)
{
    proto_model p;
    build_model(&p);
    size_t len;
    uint8_t *buf = pack(&p, &len);
    slim_graph *g;
    slim_err err = {0};
    for (size_t cut = 1; cut < len; cut += 7) {
        slim_status st = slim_onnx_load_buffer(buf, len - cut, NULL, &g, &err);
        if (st == SLIM_OK) /* a cut on a field boundary can still parse */
            slim_graph_free(g);
        else
            ck_assert_int_eq(st, SLIM_EPARSE);
    }
    memset(buf, 0xff, len);
    ck_assert_int_eq(slim_onnx_load_buffer(buf, len, NULL, &g, &err), SLIM_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a valid ONNX model"));
    free(buf);
    ck_assert_int_eq(slim_model_load("/nonexistent/model.onnx", NULL, &(slim_model *){0}, &err),
                     SLIM_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/model.onnx"));
}
END_TEST

START_TEST(unknown_op_names_node_and_op)
{
    proto_model p;
    build_model(&p);
    p.relu.op_type = "FancyNewOp";
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(load(&p, NULL, &m, &err), SLIM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "relu0"));
    ck_assert_ptr_nonnull(strstr(err.msg, "FancyNewOp"));
}
END_TEST

START_TEST(raw_data_size_mismatch_names_tensor)
{
    proto_model p;
    build_model(&p);
    p.w.raw_data.len = 12;
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(load(&p, NULL, &m, &err), SLIM_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"w\""));
}
END_TEST

START_TEST(dangling_input_is_an_error)
{
    proto_model p;
    build_model(&p);
    p.relu_in[0] = "nowhere";
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(load(&p, NULL, &m, &err), SLIM_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "nowhere"));
}
END_TEST

static void use_external(proto_model *p, const char *location, const char *length)
{
    p->w.has_raw_data = 0;
    p->w.has_data_location = 1;
    p->w.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    for (int i = 0; i < 3; i++) {
        onnx__string_string_entry_proto__init(&p->ext[i]);
        p->ext_ptrs[i] = &p->ext[i];
    }
    p->ext[0].key = "location";
    p->ext[0].value = (char *)location;
    p->ext[1].key = "offset";
    p->ext[1].value = "4";
    p->ext[2].key = "length";
    p->ext[2].value = (char *)length;
    p->w.n_external_data = 3;
    p->w.external_data = p->ext_ptrs;
}

START_TEST(external_data_inside_the_folder_only)
{
    char dir[] = "/tmp/slim-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof(path), "%s/weights.bin", dir);
    FILE *f = fopen(path, "wb");
    float data[5] = {0, 1, 2, 3, 4}; /* offset 4 skips the first */
    fwrite(data, sizeof(float), 5, f);
    fclose(f);

    proto_model p;
    build_model(&p);
    use_external(&p, "weights.bin", "16");
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(load(&p, dir, &m, &err) == SLIM_OK, "%s", err.msg);
    int v = slim_graph_find_value(m->graph, "w");
    ck_assert_float_eq(((float *)m->graph->values[v].init.data)[0], 1.0f);
    ck_assert_float_eq(((float *)m->graph->values[v].init.data)[3], 4.0f);
    slim_model_free(m);

    build_model(&p);
    use_external(&p, "../etc/passwd", "16");
    ck_assert_int_eq(load(&p, dir, &m, &err), SLIM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "inside the model's folder"));

    build_model(&p);
    use_external(&p, "/etc/passwd", "16");
    ck_assert_int_eq(load(&p, dir, &m, &err), SLIM_EINVAL);

    build_model(&p);
    use_external(&p, "weights.bin", "32"); /* wrong length */
    ck_assert_int_eq(load(&p, dir, &m, &err), SLIM_EPARSE);

    unlink(path);
    rmdir(dir);
}
END_TEST

/* A FIFO named as external data blocked open() for ever (issue 29): the
 * load must fail at once, naming the file and what it is. */
START_TEST(external_data_fifo_is_refused)
{
    char dir[] = "/tmp/slim-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof(path), "%s/zero", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    proto_model p;
    build_model(&p);
    use_external(&p, "zero", "16");
    slim_model *m;
    slim_err err = {0};
    time_t t0 = time(NULL);
    ck_assert_int_eq(load(&p, dir, &m, &err), SLIM_EIO);
    ck_assert_msg(time(NULL) - t0 < 5, "the load waited on the FIFO");
    ck_assert_msg(strstr(err.msg, "zero") && strstr(err.msg, "is a FIFO, not a regular file"),
                  "%s", err.msg);
    unlink(path);

    /* A regular file too short for the tensor: named, not a short read. */
    snprintf(path, sizeof(path), "%s/short.bin", dir);
    FILE *f = fopen(path, "wb");
    fwrite((float[2]){1, 2}, sizeof(float), 2, f);
    fclose(f);
    build_model(&p);
    use_external(&p, "short.bin", "16");
    ck_assert_int_eq(load(&p, dir, &m, &err), SLIM_EPARSE);
    ck_assert_msg(strstr(err.msg, "truncated") && strstr(err.msg, "the file has 8"), "%s",
                  err.msg);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* Prepends a protobuf key and length before *start (the buffer fills from
 * its end, so a message nested n deep is built in O(n)). */
static void wrap(uint8_t **start, uint32_t field, size_t len)
{
    uint8_t tmp[16];
    size_t k = 0;
    for (uint64_t v = len;; v >>= 7) {
        tmp[k++] = (uint8_t)((v & 0x7F) | (v >> 7 ? 0x80 : 0));
        if (!(v >> 7))
            break;
    }
    *start -= k;
    memcpy(*start, tmp, k);
    *--*start = (uint8_t)(field << 3 | 2);
}

/* A graph input typed sequence(sequence(...tensor(float)...)) `depth`
 * deep: protobuf-c's unpack recursed once per level and overflowed the
 * stack (SIGSEGV); the wire walk refuses it first. */
START_TEST(deep_nesting_is_refused_before_unpacking)
{
    const int depth = 5000;
    size_t cap = 64 + (size_t)depth * 8;
    uint8_t *buf = malloc(cap), *end = buf + cap, *start = end;
    const uint8_t tensor[] = {0x0a, 0x02, 0x08, 0x01}; /* tensor_type { elem_type: 1 } */
    start -= sizeof(tensor);
    memcpy(start, tensor, sizeof(tensor));
    for (int i = 0; i < depth; i++) {
        wrap(&start, 1, (size_t)(end - start)); /* Sequence.elem_type */
        wrap(&start, 4, (size_t)(end - start)); /* TypeProto.sequence_type */
    }
    wrap(&start, 2, (size_t)(end - start));     /* ValueInfoProto.type */
    start -= 3;
    memcpy(start, (uint8_t[]){0x0a, 0x01, 'x'}, 3);
    wrap(&start, 11, (size_t)(end - start));    /* GraphProto.input */
    wrap(&start, 7, (size_t)(end - start));     /* ModelProto.graph */
    start -= 2;
    memcpy(start, (uint8_t[]){0x08, 0x08}, 2);  /* ir_version 8 */
    slim_graph *g = NULL;
    slim_err err = {0};
    ck_assert_int_eq(slim_onnx_load_buffer(start, (size_t)(end - start), NULL, &g, &err),
                     SLIM_EUNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "nest more than 100 deep") && strstr(err.msg, "TypeProto"),
                  "%s", err.msg);
    free(buf);
}
END_TEST

/* Opset versions are int64 in the file: 2^62 was shown as opset 0. */
/* The weightless read (slim_onnx_load_file_shapes): a weight over the
 * threshold comes as its type and shape only, its bytes never read (an
 * external file need not exist), and the read's account peaks far below
 * the weight's bytes, where the full read holds all of them. */
static void write_model(proto_model *p, const char *path)
{
    size_t len;
    uint8_t *buf = pack(p, &len);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
}

static size_t read_peak(const char *path, size_t keep, slim_graph **g)
{
    slim_mem_account *acct = slim_mem_account_new("weightless", 0);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    slim_err err = {0};
    slim_status st = keep ? slim_onnx_load_file_shapes(path, keep, g, &err)
                          : slim_onnx_load_file(path, g, &err);
    ck_assert_msg(st == SLIM_OK, "%s", err.msg);
    size_t peak = atomic_load(&acct->peak);
    slim_mem_account_enter(prev);
    slim_mem_account_unref(acct);
    return peak;
}

START_TEST(weightless_read_keeps_shapes_not_bytes)
{
    char dir[] = "/tmp/slim-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    enum { N = 256 };
    static float big[N * N];
    static int64_t dims[2] = {N, N};
    for (int i = 0; i < N * N; i++)
        big[i] = (float)(i % 7);
    proto_model p;
    build_model(&p);
    p.w.dims = dims;
    p.w.raw_data.len = sizeof(big);
    p.w.raw_data.data = (uint8_t *)big;
    write_model(&p, path);

    slim_graph *full, *shapes;
    size_t full_peak = read_peak(path, 0, &full);
    size_t shapes_peak = read_peak(path, 1024, &shapes);
    ck_assert_uint_ge(full_peak, sizeof(big));
    ck_assert_uint_lt(shapes_peak, sizeof(big) / 4);
    const slim_tensor *fw = &full->values[slim_graph_find_value(full, "w")].init;
    const slim_tensor *sw = &shapes->values[slim_graph_find_value(shapes, "w")].init;
    ck_assert_int_eq(shapes->values[slim_graph_find_value(shapes, "w")].kind,
                     SLIM_VALUE_INITIALIZER);
    ck_assert_ptr_null(sw->data);
    ck_assert_int_eq(sw->dtype, fw->dtype);
    ck_assert_int_eq(sw->ndim, 2);
    ck_assert_int_eq(sw->dims[0], N);
    ck_assert_int_eq(sw->dims[1], N);
    ck_assert_uint_eq(slim_tensor_nbytes(sw), sizeof(big));
    ck_assert_int_eq(shapes->n_nodes, full->n_nodes);
    slim_graph_free(full);
    slim_graph_free(shapes);

    /* Under the threshold it is read as always. */
    read_peak(path, sizeof(big), &shapes);
    sw = &shapes->values[slim_graph_find_value(shapes, "w")].init;
    ck_assert_ptr_nonnull(sw->data);
    ck_assert_float_eq(((float *)sw->data)[8], 1.0f);
    slim_graph_free(shapes);

    /* External data: named, never opened. */
    build_model(&p);
    use_external(&p, "absent.bin", "16");
    write_model(&p, path);
    read_peak(path, 8, &shapes);
    ck_assert_ptr_null(shapes->values[slim_graph_find_value(shapes, "w")].init.data);
    slim_graph_free(shapes);

    /* Raw data that does not match the shape is still an error. */
    build_model(&p);
    p.w.raw_data.len = 12;
    write_model(&p, path);
    slim_err err = {0};
    ck_assert_int_eq(slim_onnx_load_file_shapes(path, 8, &shapes, &err), SLIM_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"w\""));
    unlink(path);
    rmdir(dir);
}
END_TEST

/* A large weight stored as raw_data is copied straight from the file
 * (no unpacked copy first): the same bytes as one stored as float_data,
 * a doc_string beside it changes nothing, and raw data whose length does
 * not match the shape is the same error as before. */
START_TEST(large_raw_weight_read_from_the_file)
{
    char dir[] = "/tmp/slim-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    enum { N = 256 }; /* 256 KiB: over the loader's direct-read threshold */
    static float big[N * N + 1];
    static int64_t dims[2] = {N, N};
    for (int i = 0; i < N * N + 1; i++)
        big[i] = (float)i * 0.25f - 7.0f;
    slim_graph *raw, *typed;
    proto_model p;
    build_model(&p);
    p.w.dims = dims;
    p.w.raw_data.len = sizeof(float) * N * N;
    p.w.raw_data.data = (uint8_t *)big;
    p.w.doc_string = "a weight";
    write_model(&p, path);
    read_peak(path, 0, &raw);
    build_model(&p);
    p.w.dims = dims;
    p.w.has_raw_data = 0;
    p.w.n_float_data = N * N;
    p.w.float_data = big;
    write_model(&p, path);
    read_peak(path, 0, &typed);
    const slim_tensor *rw = &raw->values[slim_graph_find_value(raw, "w")].init;
    const slim_tensor *tw = &typed->values[slim_graph_find_value(typed, "w")].init;
    ck_assert_uint_eq(slim_tensor_nbytes(rw), sizeof(float) * N * N);
    ck_assert_int_eq(rw->dtype, tw->dtype);
    ck_assert_int_eq(rw->dims[0], N);
    ck_assert_int_eq(rw->dims[1], N);
    ck_assert_int_eq(memcmp(rw->data, big, sizeof(float) * N * N), 0);
    ck_assert_int_eq(memcmp(rw->data, tw->data, sizeof(float) * N * N), 0);
    slim_graph_free(raw);
    slim_graph_free(typed);

    build_model(&p);
    p.w.dims = dims;
    p.w.raw_data.len = sizeof(big); /* one float too many */
    p.w.raw_data.data = (uint8_t *)big;
    write_model(&p, path);
    slim_err err = {0};
    ck_assert_int_eq(slim_onnx_load_file(path, &raw, &err), SLIM_EPARSE);
    ck_assert_msg(strstr(err.msg, "262148 bytes of raw data"), "%s", err.msg);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(opset_out_of_range_is_named)
{
    proto_model p;
    build_model(&p);
    p.opset.version = (int64_t)1 << 62;
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(load(&p, NULL, &m, &err), SLIM_EUNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "4611686018427387904"), "%s", err.msg);
}
END_TEST

/* A STRING attribute with no payload (Resize mode="" as onnx.helper writes
 * it) reaches the loader with no data pointer: it must load as "" and the
 * operator then refuses it by name, with no undefined behaviour on the way
 * (UBSan once flagged the copy). */
START_TEST(empty_string_attribute_is_refused_by_name)
{
    static const unsigned char model[] = {
    0x08, 0x0d, 0x3a, 0x68, 0x0a, 0x20, 0x0a, 0x01, 0x78, 0x0a, 0x00, 0x0a, 0x01, 0x73, 0x12,
    0x01, 0x79, 0x22, 0x06, 0x52, 0x65, 0x73, 0x69, 0x7a, 0x65, 0x2a, 0x0b, 0x0a, 0x04, 0x6d,
    0x6f, 0x64, 0x65, 0x22, 0x00, 0xa0, 0x01, 0x03, 0x12, 0x01, 0x67, 0x2a, 0x19, 0x08, 0x04,
    0x10, 0x01, 0x22, 0x10, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00,
    0x40, 0x00, 0x00, 0x00, 0x40, 0x42, 0x01, 0x73, 0x5a, 0x1b, 0x0a, 0x01, 0x78, 0x12, 0x16,
    0x0a, 0x14, 0x08, 0x01, 0x12, 0x10, 0x0a, 0x02, 0x08, 0x01, 0x0a, 0x02, 0x08, 0x01, 0x0a,
    0x02, 0x08, 0x02, 0x0a, 0x02, 0x08, 0x02, 0x62, 0x09, 0x0a, 0x01, 0x79, 0x12, 0x04, 0x0a,
    0x02, 0x08, 0x01, 0x42, 0x04, 0x0a, 0x00, 0x10, 0x0d
    };
    slim_graph *g = NULL;
    slim_err err;
    ck_assert_int_eq(slim_onnx_load_buffer(model, sizeof(model), NULL, &g, &err), SLIM_OK);
    ck_assert_str_eq(slim_attr_str(&g->nodes[0], "mode", "?"), "");
    slim_model *m;
    ck_assert_int_ne(slim_model_from_graph(g, &m, &err), SLIM_OK);
    ck_assert_msg(strstr(err.msg, "mode"), "%s", err.msg);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("onnx");
    tcase_add_test(tc, loads_and_runs_a_small_model);
    tcase_add_test(tc, typed_float_data_is_read);
    tcase_add_test(tc, large_raw_weight_read_from_the_file);
    tcase_add_test(tc, truncated_and_garbage_files_are_errors);
    tcase_add_test(tc, unknown_op_names_node_and_op);
    tcase_add_test(tc, raw_data_size_mismatch_names_tensor);
    tcase_add_test(tc, dangling_input_is_an_error);
    tcase_add_test(tc, external_data_inside_the_folder_only);
    tcase_add_test(tc, empty_string_attribute_is_refused_by_name);
    tcase_add_test(tc, external_data_fifo_is_refused);
    tcase_add_test(tc, deep_nesting_is_refused_before_unpacking);
    tcase_add_test(tc, opset_out_of_range_is_named);
    tcase_add_test(tc, weightless_read_keeps_shapes_not_bytes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
