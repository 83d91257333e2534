/* test_fp16.c - the half-precision pass (quant/fp16.c): what it converts,
 * what it leaves, and that converted models compute what fp32 ones do. */
#include "testutil.h"

#include "fp16.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* x[4,8] -> MatMul(w[8,5]) -> Add(b[5]) -> Relu -> y */
static slim_graph *mlp(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    const char *mm_in[] = {"x", "w"}, *mm_out[] = {"h"};
    const char *add_in[] = {"h", "b"}, *add_out[] = {"z"};
    const char *relu_in[] = {"z"}, *relu_out[] = {"y"};
    slim_graph_add_node(g, "mm", "MatMul", "", 2, mm_in, 1, mm_out);
    slim_graph_add_node(g, "add", "Add", "", 2, add_in, 1, add_out);
    slim_graph_add_node(g, "relu", "Relu", "", 1, relu_in, 1, relu_out);
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    g->values[x].info.ndim = 2;
    g->values[x].info.dims[0] = 4;
    g->values[x].info.dims[1] = 8;
    int y = slim_graph_find_value(g, "y");
    slim_graph_add_output(g, y);
    g->values[y].info.dtype = SLIM_F32;
    float wv[40], bv[5];
    for (int i = 0; i < 40; i++)
        wv[i] = sinf((float)i) * 0.5f;
    for (int i = 0; i < 5; i++)
        bv[i] = 0.1f * (float)i;
    int w = slim_graph_find_value(g, "w"), b = slim_graph_find_value(g, "b");
    g->values[w].kind = SLIM_VALUE_INITIALIZER;
    g->values[w].init = tu_f32(2, (int64_t[]){8, 5}, wv);
    g->values[b].kind = SLIM_VALUE_INITIALIZER;
    g->values[b].init = tu_f32(1, (int64_t[]){5}, bv);
    return g;
}

static slim_tensor run_mlp(slim_graph *g)
{
    float xv[32];
    for (int i = 0; i < 32; i++)
        xv[i] = cosf((float)i * 0.7f);
    slim_tensor in = tu_f32(2, (int64_t[]){4, 8}, xv);
    slim_model *m;
    slim_err err;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    slim_tensor *out;
    int n_out;
    const char *names[] = {"x"};
    ck_assert_msg(slim_model_run(m, 1, names, &in, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    slim_tensor y = out[0];
    free(out);
    slim_tensor_release(&in);
    slim_model_free(m);
    return y;
}

START_TEST(test_pass_converts_weights_and_keeps_interface)
{
    slim_graph *g = mlp();
    slim_fp16_report rep;
    slim_err err;
    ck_assert_int_eq(slim_quant_half(g, SLIM_F16, &rep, &err), SLIM_OK);
    ck_assert_int_eq(rep.n_weights, 2);
    ck_assert_uint_eq(rep.bytes_before, 45 * 4);
    ck_assert_uint_eq(rep.bytes_after, 45 * 2);
    ck_assert_int_eq(rep.n_casts, 2);
    ck_assert_int_eq(g->values[slim_graph_find_value(g, "w")].init.dtype, SLIM_F16);
    /* The interface keeps its names and types. */
    ck_assert_int_eq(g->values[g->inputs[0]].info.dtype, SLIM_F32);
    ck_assert_str_eq(g->values[g->outputs[0]].name, "y");
    slim_tensor y = run_mlp(g);
    ck_assert_int_eq(y.dtype, SLIM_F32);
    slim_tensor ref = run_mlp(mlp());
    const float *a = y.data, *r = ref.data;
    for (int i = 0; i < 20; i++)
        ck_assert_msg(fabsf(a[i] - r[i]) <= 1e-2f * (1 + fabsf(r[i])), "element %d: %g vs %g", i,
                      a[i], r[i]);
    slim_tensor_release(&y);
    slim_tensor_release(&ref);
}
END_TEST

START_TEST(test_pass_bf16)
{
    slim_graph *g = mlp();
    slim_err err;
    ck_assert_int_eq(slim_quant_half(g, SLIM_BF16, NULL, &err), SLIM_OK);
    ck_assert_int_eq(g->values[slim_graph_find_value(g, "b")].init.dtype, SLIM_BF16);
    slim_tensor y = run_mlp(g);
    slim_tensor ref = run_mlp(mlp());
    const float *a = y.data, *r = ref.data;
    for (int i = 0; i < 20; i++)
        ck_assert_msg(fabsf(a[i] - r[i]) <= 3e-2f * (1 + fabsf(r[i])), "element %d", i);
    slim_tensor_release(&y);
    slim_tensor_release(&ref);
}
END_TEST

START_TEST(test_resize_scales_stay_f32_and_bad_type_refused)
{
    slim_graph *g = slim_graph_new();
    g->opset = 13;
    const char *in[] = {"x", "", "scales"}, *out[] = {"y"};
    slim_graph_add_node(g, "resize", "Resize", "", 3, in, 1, out);
    int s = slim_graph_find_value(g, "scales");
    g->values[s].kind = SLIM_VALUE_INITIALIZER;
    g->values[s].init = tu_f32(1, (int64_t[]){4}, (float[]){1, 1, 2, 2});
    slim_err err;
    ck_assert_int_eq(slim_quant_half(g, SLIM_F16, NULL, &err), SLIM_OK);
    ck_assert_int_eq(g->values[s].init.dtype, SLIM_F32);
    ck_assert_int_eq(slim_quant_half(g, SLIM_I8, NULL, &err), SLIM_EINVAL);
    slim_graph_free(g);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("fp16");
    TCase *tc = tcase_create("pass");
    tcase_add_test(tc, test_pass_converts_weights_and_keeps_interface);
    tcase_add_test(tc, test_pass_bf16);
    tcase_add_test(tc, test_resize_scales_stay_f32_and_bad_type_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
