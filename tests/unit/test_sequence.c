/*
 * test_sequence.c - sequence and optional values (runtime/container.h,
 * kernels/cpu/sequence.c): the ops' results, containers as model inputs
 * and outputs, and the failure paths (an index out of range, tensors that
 * cannot be concatenated, an empty optional, a sequence fed to a tensor
 * op), each a clear error that leaves no block of the CPU allocator
 * behind. Under ASan a leak on any path fails the binary too.
 */
#include "container.h"
#include "device.h"
#include "slim_format.h"
#include "testutil.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int64_t cpu_blocks(void)
{
    slim_mem_stats s;
    slim_allocator_stats(slim_device_cpu()->alloc, &s);
    return s.allocation[SLIM_POOL_ALL].current;
}

static slim_node *add(slim_graph *g, const char *op, int opset, int n_in,
                      const char *const *ins, int n_out, const char *const *outs)
{
    int id = slim_graph_add_node(g, NULL, op, "", n_in, ins, n_out, outs);
    ck_assert_int_ge(id, 0);
    g->nodes[id].opset = opset;
    return &g->nodes[id];
}

static void set_attr_i(slim_node *n, const char *name, int64_t v)
{
    tu_attr_i(n, name, v);
}

static void input(slim_graph *g, const char *name, slim_kind kind)
{
    int v = slim_graph_value(g, name);
    ck_assert_int_ge(v, 0);
    g->values[v].info.kind = kind;
    g->values[v].info.ndim = -1;
    ck_assert_int_eq(slim_graph_add_input(g, v), SLIM_OK);
}

static void output(slim_graph *g, const char *name)
{
    ck_assert_int_eq(slim_graph_add_output(g, slim_graph_find_value(g, name)), SLIM_OK);
}

static void init_i64(slim_graph *g, const char *name, int64_t v)
{
    int id = slim_graph_value(g, name);
    g->values[id].kind = SLIM_VALUE_INITIALIZER;
    g->values[id].init = tu_i64(0, NULL, &v);
}

static slim_model *model(slim_graph *g)
{
    g->opset = 18;
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

/* x [3,2] -> SplitToSequence(axis 0, keepdims 0) -> s; outputs
 * SequenceLength(s), SequenceAt(s, -1), ConcatFromSequence(s, axis 0,
 * new_axis 1) and s itself. */
START_TEST(test_split_at_length_concat)
{
    int64_t base = cpu_blocks();
    slim_graph *g = slim_graph_new();
    input(g, "x", SLIM_KIND_TENSOR);
    init_i64(g, "last", -1);
    set_attr_i(add(g, "SplitToSequence", 11, 1, (const char *[]){"x"}, 1,
                   (const char *[]){"s"}), "keepdims", 0);
    add(g, "SequenceLength", 11, 1, (const char *[]){"s"}, 1, (const char *[]){"n"});
    add(g, "SequenceAt", 11, 2, (const char *[]){"s", "last"}, 1, (const char *[]){"a"});
    slim_node *c = add(g, "ConcatFromSequence", 11, 1, (const char *[]){"s"}, 1,
                       (const char *[]){"c"});
    set_attr_i(c, "axis", 0);
    set_attr_i(c, "new_axis", 1);
    output(g, "n");
    output(g, "a");
    output(g, "c");
    output(g, "s");
    slim_model *m = model(g);
    slim_tensor x = tu_f32(2, (int64_t[]){3, 2}, (float[]){1, 2, 3, 4, 5, 6});
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err) == SLIM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(n_out, 4);
    ck_assert_int_eq(out[0].dtype, SLIM_I64);
    ck_assert_int_eq(*(int64_t *)out[0].data, 3);
    tu_assert_close_f32(&out[1], (float[]){5, 6}, 2, 0);
    tu_assert_shape(&out[1], 1, (int64_t[]){2});
    tu_assert_shape(&out[2], 2, (int64_t[]){3, 2});
    tu_assert_close_f32(&out[2], (float[]){1, 2, 3, 4, 5, 6}, 6, 0);
    ck_assert_int_eq(out[3].kind, SLIM_KIND_SEQUENCE);
    ck_assert_int_eq(slim_container_len(&out[3]), 3);
    tu_assert_close_f32(slim_container_at(&out[3], 1), (float[]){3, 4}, 2, 0);
    slim_tensors_free(out, n_out);
    tu_free_inputs(&x, 1);
    slim_model_free(m);
    ck_assert_int_eq(cpu_blocks(), base);
}
END_TEST

/* A caller's sequence: SequenceInsert at the front, SequenceErase of the
 * last, concatenated along an existing axis; the input is left intact. */
START_TEST(test_insert_erase_caller_sequence)
{
    int64_t base = cpu_blocks();
    slim_graph *g = slim_graph_new();
    input(g, "s", SLIM_KIND_SEQUENCE);
    input(g, "t", SLIM_KIND_TENSOR);
    init_i64(g, "zero", 0);
    add(g, "SequenceInsert", 11, 3, (const char *[]){"s", "t", "zero"}, 1,
        (const char *[]){"s2"});
    add(g, "SequenceErase", 11, 1, (const char *[]){"s2"}, 1, (const char *[]){"s3"});
    set_attr_i(add(g, "ConcatFromSequence", 11, 1, (const char *[]){"s3"}, 1,
                   (const char *[]){"c"}), "axis", 0);
    output(g, "c");
    output(g, "s2");
    slim_model *m = model(g);
    slim_err err = {0};
    slim_tensor in[2];
    ck_assert_int_eq(slim_container_new(SLIM_KIND_SEQUENCE, SLIM_F32, 2, &in[0], &err), SLIM_OK);
    slim_tensor a = tu_f32(1, (int64_t[]){2}, (float[]){1, 2});
    slim_tensor b = tu_f32(1, (int64_t[]){1}, (float[]){3});
    ck_assert_int_eq(slim_container_add_copy(&in[0], &a, &err), SLIM_OK);
    ck_assert_int_eq(slim_container_add_copy(&in[0], &b, &err), SLIM_OK);
    in[1] = tu_f32(1, (int64_t[]){3}, (float[]){7, 8, 9});
    slim_tensor *out;
    int n_out;
    ck_assert_msg(slim_model_run(m, 2, (const char *[]){"s", "t"}, in, &out, &n_out, &err) ==
                      SLIM_OK, "%s", err.msg);
    /* [7,8,9] + [1,2]; [3] erased */
    tu_assert_shape(&out[0], 1, (int64_t[]){5});
    tu_assert_close_f32(&out[0], (float[]){7, 8, 9, 1, 2}, 5, 0);
    ck_assert_int_eq(slim_container_len(&out[1]), 3);
    ck_assert_int_eq(slim_container_len(&in[0]), 2);
    tu_assert_close_f32(slim_container_at(&out[1], 2), (float[]){3}, 1, 0);
    slim_tensors_free(out, n_out);
    /* A dtype the sequence does not hold is refused. */
    slim_tensor_release(&in[1]);
    int64_t iv[3] = {1, 2, 3};
    in[1] = tu_i64(1, (int64_t[]){3}, iv);
    ck_assert_int_ne(slim_model_run(m, 2, (const char *[]){"s", "t"}, in, &out, &n_out, &err),
                     SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot hold"));
    tu_free_inputs(in, 2);
    tu_free_inputs(&a, 1);
    tu_free_inputs(&b, 1);
    slim_model_free(m);
    ck_assert_int_eq(cpu_blocks(), base);
}
END_TEST

/* x -> SplitToSequence -> s; SequenceAt(s, pos) with pos an input. */
static slim_model *at_model(void)
{
    slim_graph *g = slim_graph_new();
    input(g, "x", SLIM_KIND_TENSOR);
    input(g, "pos", SLIM_KIND_TENSOR);
    add(g, "SplitToSequence", 11, 1, (const char *[]){"x"}, 1, (const char *[]){"s"});
    add(g, "SequenceAt", 11, 2, (const char *[]){"s", "pos"}, 1, (const char *[]){"a"});
    output(g, "a");
    return model(g);
}

START_TEST(test_sequence_at_out_of_range)
{
    slim_model *m = at_model();
    int64_t base = cpu_blocks();
    slim_err err = {0};
    slim_tensor *out;
    int n_out;
    for (int64_t p = -4; p <= 3; p++) {
        slim_tensor in[2] = {tu_f32(1, (int64_t[]){3}, (float[]){1, 2, 3}),
                             tu_i64(0, NULL, &p)};
        slim_status st = slim_model_run(m, 2, (const char *[]){"x", "pos"}, in, &out, &n_out,
                                        &err);
        if (p < -3 || p > 2) {
            ck_assert_int_eq(st, SLIM_EINVAL);
            ck_assert_msg(strstr(err.msg, "out of range") && strstr(err.msg, "SequenceAt"),
                          "%s", err.msg);
        } else {
            ck_assert_msg(st == SLIM_OK, "%s", err.msg);
            tu_assert_close_f32(&out[0], (float[]){(float)(p < 0 ? p + 4 : p + 1)}, 1, 0);
            slim_tensors_free(out, n_out);
        }
        tu_free_inputs(in, 2);
    }
    ck_assert_int_eq(cpu_blocks(), base);
    slim_model_free(m);
}
END_TEST

START_TEST(test_concat_mismatched_shapes)
{
    slim_graph *g = slim_graph_new();
    input(g, "a", SLIM_KIND_TENSOR);
    input(g, "b", SLIM_KIND_TENSOR);
    add(g, "SequenceConstruct", 11, 2, (const char *[]){"a", "b"}, 1, (const char *[]){"s"});
    set_attr_i(add(g, "ConcatFromSequence", 11, 1, (const char *[]){"s"}, 1,
                   (const char *[]){"c"}), "axis", 1);
    output(g, "c");
    slim_model *m = model(g);
    int64_t base = cpu_blocks();
    slim_err err = {0};
    slim_tensor *out;
    int n_out;
    /* [2,1] and [3,1] differ on axis 0, not the concatenation axis 1. */
    slim_tensor in[2] = {tu_f32(2, (int64_t[]){2, 1}, (float[]){1, 2}),
                         tu_f32(2, (int64_t[]){3, 1}, (float[]){3, 4, 5})};
    ck_assert_int_eq(slim_model_run(m, 2, (const char *[]){"a", "b"}, in, &out, &n_out, &err),
                     SLIM_ESHAPE);
    ck_assert_msg(strstr(err.msg, "differ outside axis 1"), "%s", err.msg);
    tu_free_inputs(in, 2);
    /* [2,1] and [2,3] concatenate along axis 1. */
    slim_tensor ok[2] = {tu_f32(2, (int64_t[]){2, 1}, (float[]){1, 2}),
                         tu_f32(2, (int64_t[]){2, 3}, (float[]){3, 4, 5, 6, 7, 8})};
    ck_assert_int_eq(slim_model_run(m, 2, (const char *[]){"a", "b"}, ok, &out, &n_out, &err),
                     SLIM_OK);
    tu_assert_shape(&out[0], 2, (int64_t[]){2, 4});
    tu_assert_close_f32(&out[0], (float[]){1, 3, 4, 5, 2, 6, 7, 8}, 8, 0);
    slim_tensors_free(out, n_out);
    tu_free_inputs(ok, 2);
    ck_assert_int_eq(cpu_blocks(), base);
    slim_model_free(m);
}
END_TEST

START_TEST(test_optional_get_and_has)
{
    slim_graph *g = slim_graph_new();
    input(g, "o", SLIM_KIND_OPTIONAL);
    add(g, "OptionalHasElement", 18, 1, (const char *[]){"o"}, 1, (const char *[]){"h"});
    add(g, "OptionalGetElement", 18, 1, (const char *[]){"o"}, 1, (const char *[]){"v"});
    output(g, "h");
    output(g, "v");
    slim_model *m = model(g);
    int64_t base = cpu_blocks();
    slim_err err = {0};
    slim_tensor *out;
    int n_out;
    slim_tensor o;
    ck_assert_int_eq(slim_container_new(SLIM_KIND_OPTIONAL, SLIM_F32, 1, &o, &err), SLIM_OK);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"o"}, &o, &out, &n_out, &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "OptionalGetElement") && strstr(err.msg, "empty"), "%s",
                  err.msg);
    slim_tensor x = tu_f32(1, (int64_t[]){2}, (float[]){4, 5});
    ck_assert_int_eq(slim_container_add_copy(&o, &x, &err), SLIM_OK);
    /* An optional holds one value. */
    ck_assert_int_eq(slim_container_add_copy(&o, &x, &err), SLIM_EINTERNAL);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"o"}, &o, &out, &n_out, &err),
                     SLIM_OK);
    ck_assert_int_eq(*(uint8_t *)out[0].data, 1);
    tu_assert_close_f32(&out[1], (float[]){4, 5}, 2, 0);
    slim_tensors_free(out, n_out);
    /* A tensor stands for an optional holding it. */
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"o"}, &x, &out, &n_out, &err),
                     SLIM_OK);
    ck_assert_int_eq(*(uint8_t *)out[0].data, 1);
    tu_assert_close_f32(&out[1], (float[]){4, 5}, 2, 0);
    slim_tensors_free(out, n_out);
    /* A sequence does not: the optional holds tensors. */
    slim_tensor seq;
    ck_assert_int_eq(slim_container_new(SLIM_KIND_SEQUENCE, SLIM_F32, 0, &seq, &err), SLIM_OK);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"o"}, &seq, &out, &n_out, &err),
                     SLIM_ETYPE);
    ck_assert_msg(strstr(err.msg, "input \"o\" is a sequence, the model expects an optional"),
                  "%s", err.msg);
    slim_tensor_release(&seq);
    slim_tensor_release(&o);
    tu_free_inputs(&x, 1);
    ck_assert_int_eq(cpu_blocks(), base);
    slim_model_free(m);
}
END_TEST

/* A sequence wired into a tensor op, and a tensor into SequenceAt. */
START_TEST(test_kinds_checked_per_op)
{
    slim_graph *g = slim_graph_new();
    input(g, "s", SLIM_KIND_SEQUENCE);
    add(g, "Relu", 14, 1, (const char *[]){"s"}, 1, (const char *[]){"r"});
    output(g, "r");
    slim_model *m = model(g);
    slim_err err = {0};
    slim_tensor s, *out;
    int n_out;
    ck_assert_int_eq(slim_container_new(SLIM_KIND_SEQUENCE, SLIM_F32, 0, &s, &err), SLIM_OK);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"s"}, &s, &out, &n_out, &err),
                     SLIM_ETYPE);
    ck_assert_msg(strstr(err.msg, "is a sequence; the operator takes tensors"), "%s", err.msg);
    slim_model_free(m);

    g = slim_graph_new();
    input(g, "x", SLIM_KIND_TENSOR);
    init_i64(g, "zero", 0);
    add(g, "SequenceAt", 11, 2, (const char *[]){"x", "zero"}, 1, (const char *[]){"a"});
    output(g, "a");
    m = model(g);
    slim_tensor x = tu_f32(1, (int64_t[]){1}, (float[]){1});
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_ETYPE);
    ck_assert_msg(strstr(err.msg, "must be a sequence, it is a tensor"), "%s", err.msg);
    /* Concatenating an empty sequence is an error, not a crash. */
    slim_model_free(m);
    g = slim_graph_new();
    input(g, "s", SLIM_KIND_SEQUENCE);
    set_attr_i(add(g, "ConcatFromSequence", 11, 1, (const char *[]){"s"}, 1,
                   (const char *[]){"c"}), "axis", 0);
    output(g, "c");
    m = model(g);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"s"}, &s, &out, &n_out, &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "empty sequence"), "%s", err.msg);
    slim_model_free(m);
    slim_tensor_release(&s);
    tu_free_inputs(&x, 1);
}
END_TEST

/* SplitToSequence with a scalar split: the last piece is shorter. */
START_TEST(test_split_scalar_uneven)
{
    slim_graph *g = slim_graph_new();
    input(g, "x", SLIM_KIND_TENSOR);
    init_i64(g, "two", 2);
    add(g, "SplitToSequence", 11, 2, (const char *[]){"x", "two"}, 1, (const char *[]){"s"});
    output(g, "s");
    slim_model *m = model(g);
    slim_err err = {0};
    slim_tensor *out;
    int n_out;
    slim_tensor x = tu_f32(1, (int64_t[]){5}, (float[]){1, 2, 3, 4, 5});
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_OK);
    ck_assert_int_eq(slim_container_len(&out[0]), 3);
    tu_assert_shape(slim_container_at(&out[0], 2), 1, (int64_t[]){1});
    tu_assert_close_f32(slim_container_at(&out[0], 2), (float[]){5}, 1, 0);
    tu_assert_close_f32(slim_container_at(&out[0], 1), (float[]){3, 4}, 2, 0);
    slim_tensors_free(out, n_out);
    tu_free_inputs(&x, 1);
    slim_model_free(m);
}
END_TEST

/* A model with an optional sequence input and a sequence output written
 * to .slim (version 3) and read back keeps its value types and runs. */
START_TEST(test_slim_format_round_trip)
{
    slim_graph *g = slim_graph_new();
    input(g, "o", SLIM_KIND_OPTIONAL);
    g->values[slim_graph_find_value(g, "o")].info.elem_kind = SLIM_KIND_SEQUENCE;
    g->values[slim_graph_find_value(g, "o")].info.dtype = SLIM_F32;
    add(g, "OptionalGetElement", 18, 1, (const char *[]){"o"}, 1, (const char *[]){"s"});
    add(g, "SequenceLength", 11, 1, (const char *[]){"s"}, 1, (const char *[]){"n"});
    output(g, "n");
    output(g, "s");
    slim_model *m = model(g);
    char path[] = "/tmp/test_sequence_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    slim_err err = {0};
    ck_assert_msg(slim_format_write(m->graph, path, &err) == SLIM_OK, "%s", err.msg);
    slim_model_free(m);
    FILE *f = fopen(path, "rb");
    unsigned char hdr[12];
    ck_assert_int_eq(fread(hdr, 1, sizeof(hdr), f), sizeof(hdr));
    fclose(f);
    uint32_t version;
    memcpy(&version, hdr + 8, 4);
    /* Sequence values need version 3; a data section this small makes it
     * 4 (64-byte aligned, docs/format.md). */
    ck_assert_int_eq(version, 4);
    ck_assert_msg(slim_model_load(path, NULL, &m, &err) == SLIM_OK, "%s", err.msg);
    unlink(path);
    ck_assert_int_eq(slim_model_input(m, 0)->kind, SLIM_KIND_OPTIONAL);
    ck_assert_int_eq(slim_model_input(m, 0)->elem_kind, SLIM_KIND_SEQUENCE);
    ck_assert_int_eq(slim_model_input(m, 0)->dtype, SLIM_F32);
    slim_tensor o, s;
    ck_assert_int_eq(slim_container_new(SLIM_KIND_OPTIONAL, SLIM_F32, 1, &o, &err), SLIM_OK);
    ck_assert_int_eq(slim_container_new(SLIM_KIND_SEQUENCE, SLIM_F32, 2, &s, &err), SLIM_OK);
    slim_tensor x = tu_f32(1, (int64_t[]){1}, (float[]){1});
    ck_assert_int_eq(slim_container_add_copy(&s, &x, &err), SLIM_OK);
    ck_assert_int_eq(slim_container_add_copy(&s, &x, &err), SLIM_OK);
    ck_assert_int_eq(slim_container_take(&o, &s, &err), SLIM_OK);
    slim_tensor *out;
    int n_out;
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"o"}, &o, &out, &n_out, &err) ==
                      SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(*(int64_t *)out[0].data, 2);
    ck_assert_int_eq(out[1].kind, SLIM_KIND_SEQUENCE);
    ck_assert_int_eq(slim_container_len(&out[1]), 2);
    slim_tensors_free(out, n_out);
    slim_tensor_release(&o);
    tu_free_inputs(&x, 1);
    slim_model_free(m);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("sequence");
    TCase *tc = tcase_create("sequence");
    tcase_add_test(tc, test_split_at_length_concat);
    tcase_add_test(tc, test_insert_erase_caller_sequence);
    tcase_add_test(tc, test_sequence_at_out_of_range);
    tcase_add_test(tc, test_concat_mismatched_shapes);
    tcase_add_test(tc, test_optional_get_and_has);
    tcase_add_test(tc, test_kinds_checked_per_op);
    tcase_add_test(tc, test_split_scalar_uneven);
    tcase_add_test(tc, test_slim_format_round_trip);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
