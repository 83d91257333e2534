/* test_shape_movement.c - the view, shape and generator ops
 * (kernels/cpu/shape.c) and the data-movement ops (kernels/cpu/movement.c):
 * hand-computed cases, random cases checked against loops written from the
 * operator definitions, and bad inputs that must fail cleanly. */
#include "testutil.h"
#include "cuda/transpose_plan.h"
#include "slim_init.h"

#include <stdlib.h>
#include <string.h>

#define I64S(...) ((int64_t[]){__VA_ARGS__})
#define F32S(...) ((float[]){__VA_ARGS__})
#define NAMES(...) ((const char *[]){__VA_ARGS__})

static float *iota(int64_t n)
{
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)i;
    return v;
}

/* Runs g on in[0..n) and asserts success; the outputs are the caller's. */
static slim_tensor *run_ok(slim_graph *g, slim_tensor *in, int n, int *n_out)
{
    slim_tensor *out;
    slim_err err = {0};
    slim_status st = tu_run(g, in, n, &out, n_out, &err);
    ck_assert_msg(st == SLIM_OK, "run failed: %s", err.msg);
    tu_free_inputs(in, n);
    return out;
}

static slim_status run_status(slim_graph *g, slim_tensor *in, int n)
{
    slim_tensor *out = NULL;
    int n_out = 0;
    slim_err err = {0};
    slim_status st = tu_run(g, in, n, &out, &n_out, &err);
    if (st == SLIM_OK)
        slim_tensors_free(out, n_out);
    else
        ck_assert_msg(err.msg[0], "error without a message");
    tu_free_inputs(in, n);
    return st;
}

static void assert_i64(const slim_tensor *t, const int64_t *want, int64_t n)
{
    ck_assert_int_eq(t->dtype, SLIM_I64);
    ck_assert_int_eq(slim_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(((const int64_t *)t->data)[i] == want[i], "element %lld: got %lld, want %lld",
                      (long long)i, (long long)((const int64_t *)t->data)[i], (long long)want[i]);
}

/* ---- views --------------------------------------------------------------- */

START_TEST(test_reshape_zero_and_infer)
{
    slim_graph *g = tu_graph("Reshape", 14, 2, NAMES("x", "s"), 1);
    float *x = iota(24);
    slim_tensor in[2] = {tu_f32(3, I64S(2, 3, 4), x), tu_i64(1, I64S(3), I64S(0, -1, 2))};
    int n;
    slim_tensor *out = run_ok(g, in, 2, &n);
    tu_assert_shape(&out[0], 3, I64S(2, 6, 2));
    tu_assert_close_f32(&out[0], x, 24, 0);
    slim_tensors_free(out, n);
    free(x);
}
END_TEST

START_TEST(test_reshape_bad)
{
    /* 24 elements cannot become 5 x anything */
    slim_graph *g = tu_graph("Reshape", 14, 2, NAMES("x", "s"), 1);
    slim_tensor in[2] = {tu_f32(3, I64S(2, 3, 4), NULL), tu_i64(1, I64S(2), I64S(5, -1))};
    ck_assert_int_eq(run_status(g, in, 2), SLIM_ESHAPE);
    /* two -1 */
    g = tu_graph("Reshape", 14, 2, NAMES("x", "s"), 1);
    slim_tensor in2[2] = {tu_f32(1, I64S(4), NULL), tu_i64(1, I64S(2), I64S(-1, -1))};
    ck_assert_int_eq(run_status(g, in2, 2), SLIM_EINVAL);
}
END_TEST

START_TEST(test_squeeze_unsqueeze)
{
    slim_graph *g = tu_graph("Unsqueeze", 13, 2, NAMES("x", "a"), 1);
    slim_tensor in[2] = {tu_f32(2, I64S(3, 4), NULL), tu_i64(1, I64S(2), I64S(-1, 0))};
    int n;
    slim_tensor *out = run_ok(g, in, 2, &n);
    tu_assert_shape(&out[0], 4, I64S(1, 3, 4, 1));
    slim_tensors_free(out, n);

    g = tu_graph("Squeeze", 11, 1, NAMES("x"), 1); /* axes as an attribute */
    tu_attr_ints(tu_node0(g), "axes", 1, I64S(2));
    slim_tensor in2[1] = {tu_f32(4, I64S(1, 3, 1, 5), NULL)};
    out = run_ok(g, in2, 1, &n);
    tu_assert_shape(&out[0], 3, I64S(1, 3, 5));
    slim_tensors_free(out, n);

    g = tu_graph("Squeeze", 13, 1, NAMES("x"), 1); /* no axes: every unit dim */
    slim_tensor in3[1] = {tu_f32(4, I64S(1, 3, 1, 5), NULL)};
    out = run_ok(g, in3, 1, &n);
    tu_assert_shape(&out[0], 2, I64S(3, 5));
    slim_tensors_free(out, n);

    g = tu_graph("Squeeze", 13, 2, NAMES("x", "a"), 1); /* axis 1 has size 3 */
    slim_tensor in4[2] = {tu_f32(2, I64S(1, 3), NULL), tu_i64(1, I64S(1), I64S(1))};
    ck_assert_int_eq(run_status(g, in4, 2), SLIM_ESHAPE);
}
END_TEST

START_TEST(test_flatten_dropout)
{
    slim_graph *g = tu_graph("Flatten", 13, 1, NAMES("x"), 1);
    tu_attr_i(tu_node0(g), "axis", -1);
    slim_tensor in[1] = {tu_f32(3, I64S(2, 3, 4), NULL)};
    int n;
    slim_tensor *out = run_ok(g, in, 1, &n);
    tu_assert_shape(&out[0], 2, I64S(6, 4));
    slim_tensors_free(out, n);

    g = tu_graph("Dropout", 13, 1, NAMES("x"), 2);
    float x[3] = {1, -2, 3};
    slim_tensor in2[1] = {tu_f32(1, I64S(3), x)};
    out = run_ok(g, in2, 1, &n);
    tu_assert_close_f32(&out[0], x, 3, 0);
    ck_assert_int_eq(out[1].dtype, SLIM_BOOL);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(((uint8_t *)out[1].data)[i], 1);
    slim_tensors_free(out, n);

    /* training_mode = true is refused, not silently ignored */
    g = tu_graph("Dropout", 13, 3, NAMES("x", "r", "t"), 1);
    uint8_t yes = 1;
    slim_tensor in3[3] = {tu_f32(1, I64S(3), x), tu_f32(0, NULL, F32S(0.5f)),
                          tu_tensor(SLIM_BOOL, 0, NULL, &yes)};
    ck_assert_int_eq(run_status(g, in3, 3), SLIM_EUNSUPPORTED);
}
END_TEST

/* ---- shapes and generators ------------------------------------------------ */

START_TEST(test_shape_size)
{
    slim_graph *g = tu_graph("Shape", 15, 1, NAMES("x"), 1);
    tu_attr_i(tu_node0(g), "start", -2);
    slim_tensor in[1] = {tu_f32(3, I64S(3, 4, 5), NULL)};
    int n;
    slim_tensor *out = run_ok(g, in, 1, &n);
    assert_i64(&out[0], I64S(4, 5), 2);
    slim_tensors_free(out, n);

    g = tu_graph("Size", 13, 1, NAMES("x"), 1);
    slim_tensor in2[1] = {tu_f32(3, I64S(3, 4, 5), NULL)};
    out = run_ok(g, in2, 1, &n);
    ck_assert_int_eq(out[0].ndim, 0);
    assert_i64(&out[0], I64S(60), 1);
    slim_tensors_free(out, n);
}
END_TEST

START_TEST(test_constant_forms)
{
    slim_graph *g = tu_graph("Constant", 13, 0, NULL, 1);
    tu_attr_ints(tu_node0(g), "value_ints", 3, I64S(7, -1, 9));
    int n;
    slim_tensor *out = run_ok(g, NULL, 0, &n);
    tu_assert_shape(&out[0], 1, I64S(3));
    assert_i64(&out[0], I64S(7, -1, 9), 3);
    slim_tensors_free(out, n);

    g = tu_graph("ConstantOfShape", 13, 1, NAMES("s"), 1);
    slim_tensor in[1] = {tu_i64(1, I64S(2), I64S(2, 3))};
    out = run_ok(g, in, 1, &n);
    tu_assert_close_f32(&out[0], F32S(0, 0, 0, 0, 0, 0), 6, 0);
    slim_tensors_free(out, n);

    g = tu_graph("Constant", 13, 0, NULL, 1);
    tu_attr_s(tu_node0(g), "value_string", "hello");
    ck_assert_int_eq(run_status(g, NULL, 0), SLIM_EUNSUPPORTED);
}
END_TEST

START_TEST(test_range_trilu_eyelike)
{
    slim_graph *g = tu_graph("Range", 11, 3, NAMES("a", "b", "c"), 1);
    slim_tensor in[3] = {tu_i64(0, NULL, I64S(10)), tu_i64(0, NULL, I64S(3)),
                         tu_i64(0, NULL, I64S(-3))};
    int n;
    slim_tensor *out = run_ok(g, in, 3, &n);
    assert_i64(&out[0], I64S(10, 7, 4), 3);
    slim_tensors_free(out, n);

    g = tu_graph("Range", 11, 3, NAMES("a", "b", "c"), 1);
    slim_tensor in0[3] = {tu_i64(0, NULL, I64S(0)), tu_i64(0, NULL, I64S(5)),
                          tu_i64(0, NULL, I64S(0))};
    ck_assert_int_eq(run_status(g, in0, 3), SLIM_EINVAL); /* delta 0 */

    g = tu_graph("Trilu", 14, 2, NAMES("x", "k"), 1);
    tu_attr_i(tu_node0(g), "upper", 0);
    float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    slim_tensor in2[2] = {tu_f32(2, I64S(3, 4), x), tu_i64(0, NULL, I64S(1))};
    out = run_ok(g, in2, 2, &n);
    tu_assert_close_f32(&out[0], F32S(1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12), 12, 0);
    slim_tensors_free(out, n);

    g = tu_graph("EyeLike", 9, 1, NAMES("x"), 1);
    tu_attr_i(tu_node0(g), "k", -1);
    slim_tensor in3[1] = {tu_f32(2, I64S(3, 2), NULL)};
    out = run_ok(g, in3, 1, &n);
    tu_assert_close_f32(&out[0], F32S(0, 0, 1, 0, 0, 1), 6, 0);
    slim_tensors_free(out, n);
}
END_TEST

START_TEST(test_onehot_nonzero)
{
    slim_graph *g = tu_graph("OneHot", 11, 3, NAMES("i", "d", "v"), 1);
    tu_attr_i(tu_node0(g), "axis", 0);
    slim_tensor in[3] = {tu_i64(1, I64S(3), I64S(0, -1, 5)), tu_f32(0, NULL, F32S(3)),
                         tu_f32(1, I64S(2), F32S(-1, 2))};
    int n;
    slim_tensor *out = run_ok(g, in, 3, &n);
    /* [depth, 3]: index 5 is out of range and stays all off */
    tu_assert_shape(&out[0], 2, I64S(3, 3));
    tu_assert_close_f32(&out[0], F32S(2, -1, -1, -1, -1, -1, -1, 2, -1), 9, 0);
    slim_tensors_free(out, n);

    g = tu_graph("NonZero", 13, 1, NAMES("x"), 1);
    slim_tensor in2[1] = {tu_f32(2, I64S(2, 3), F32S(0, 1, 0, -0.0f, 2, 3))};
    out = run_ok(g, in2, 1, &n);
    tu_assert_shape(&out[0], 2, I64S(2, 3));
    assert_i64(&out[0], I64S(0, 1, 1, 1, 1, 2), 6);
    slim_tensors_free(out, n);
}
END_TEST

/* ---- Transpose and friends: random against the definition ---------------- */

static void check_transpose(int rank, const int64_t *dims, const int64_t *perm)
{
    slim_graph *g = tu_graph("Transpose", 13, 1, NAMES("x"), 1);
    tu_attr_ints(tu_node0(g), "perm", rank, perm);
    int64_t numel = slim_shape_numel(rank, dims);
    float *x = iota(numel), *want = malloc(sizeof(float) * (size_t)numel);
    int64_t od[SLIM_MAX_DIMS], is[SLIM_MAX_DIMS], idx[SLIM_MAX_DIMS] = {0};
    slim_contiguous_strides(rank, dims, is);
    for (int i = 0; i < rank; i++)
        od[i] = dims[perm[i]];
    for (int64_t o = 0; o < numel; o++) {
        int64_t src = 0;
        for (int i = 0; i < rank; i++)
            src += idx[i] * is[perm[i]];
        want[o] = x[src];
        for (int i = rank - 1; i >= 0 && ++idx[i] == od[i]; i--)
            idx[i] = 0;
    }
    slim_tensor in[1] = {tu_f32(rank, dims, x)};
    int n;
    slim_tensor *out = run_ok(g, in, 1, &n);
    tu_assert_shape(&out[0], rank, od);
    tu_assert_close_f32(&out[0], want, numel, 0);
    slim_tensors_free(out, n);
    free(x);
    free(want);
}

START_TEST(test_transpose_paths)
{
    check_transpose(3, I64S(2, 3, 4), I64S(1, 2, 0));
    check_transpose(2, I64S(67, 129), I64S(1, 0));            /* tiled 2-D */
    check_transpose(4, I64S(3, 40, 5, 33), I64S(0, 2, 3, 1)); /* NCHW -> NHWC */
    check_transpose(4, I64S(3, 5, 33, 40), I64S(0, 3, 1, 2)); /* NHWC -> NCHW */
    check_transpose(5, I64S(2, 1, 3, 1, 4), I64S(4, 3, 2, 1, 0));
    check_transpose(4, I64S(2, 3, 4, 5), I64S(0, 1, 2, 3));   /* identity: one memcpy */

    slim_graph *g = tu_graph("Transpose", 13, 1, NAMES("x"), 1);
    tu_attr_ints(tu_node0(g), "perm", 3, I64S(0, 0, 1));
    slim_tensor in[1] = {tu_f32(3, I64S(2, 3, 4), NULL)};
    ck_assert_int_eq(run_status(g, in, 1), SLIM_EINVAL);
}
END_TEST

START_TEST(test_depth_space_roundtrip)
{
    /* DCR: y[n, c, h*b+i, w*b+j] = x[n, (i*b+j)*C' + c, h, w] */
    slim_graph *g = tu_graph("DepthToSpace", 13, 1, NAMES("x"), 1);
    tu_attr_i(tu_node0(g), "blocksize", 2);
    float *x = iota(1 * 8 * 2 * 3);
    slim_tensor in[1] = {tu_f32(4, I64S(1, 8, 2, 3), x)};
    int n;
    slim_tensor *out = run_ok(g, in, 1, &n);
    tu_assert_shape(&out[0], 4, I64S(1, 2, 4, 6));
    const float *y = out[0].data;
    for (int c = 0; c < 2; c++)
        for (int h = 0; h < 4; h++)
            for (int w = 0; w < 6; w++) {
                int i = h % 2, j = w % 2, src_c = (i * 2 + j) * 2 + c;
                ck_assert_float_eq(y[(c * 4 + h) * 6 + w], x[(src_c * 2 + h / 2) * 3 + w / 2]);
            }
    /* SpaceToDepth undoes DepthToSpace (both DCR ordering) */
    g = tu_graph("SpaceToDepth", 13, 1, NAMES("x"), 1);
    tu_attr_i(tu_node0(g), "blocksize", 2);
    slim_tensor in2[1] = {tu_f32(4, I64S(1, 2, 4, 6), y)};
    int n2;
    slim_tensor *back = run_ok(g, in2, 1, &n2);
    tu_assert_close_f32(&back[0], x, 48, 0);
    slim_tensors_free(back, n2);
    slim_tensors_free(out, n);
    free(x);
}
END_TEST

START_TEST(test_slice_negative_steps)
{
    slim_graph *g = tu_graph("Slice", 13, 5, NAMES("x", "s", "e", "a", "p"), 1);
    float *x = iota(20);
    /* x[4,5]: rows 3..0 step -2, cols from 1 to the end */
    slim_tensor in[5] = {tu_f32(2, I64S(4, 5), x), tu_i64(1, I64S(2), I64S(-1, 1)),
                         tu_i64(1, I64S(2), I64S(INT64_MIN, 1000)), tu_i64(1, I64S(2), I64S(0, 1)),
                         tu_i64(1, I64S(2), I64S(-2, 1))};
    int n;
    slim_tensor *out = run_ok(g, in, 5, &n);
    tu_assert_shape(&out[0], 2, I64S(2, 4));
    tu_assert_close_f32(&out[0], F32S(16, 17, 18, 19, 6, 7, 8, 9), 8, 0);
    slim_tensors_free(out, n);
    free(x);

    g = tu_graph("Slice", 13, 5, NAMES("x", "s", "e", "a", "p"), 1);
    slim_tensor bad[5] = {tu_f32(1, I64S(4), NULL), tu_i64(1, I64S(1), I64S(0)),
                          tu_i64(1, I64S(1), I64S(2)), tu_i64(1, I64S(1), I64S(0)),
                          tu_i64(1, I64S(1), I64S(0))};
    ck_assert_int_eq(run_status(g, bad, 5), SLIM_EINVAL); /* step 0 */
}
END_TEST

START_TEST(test_expand_tile)
{
    slim_graph *g = tu_graph("Expand", 13, 2, NAMES("x", "s"), 1);
    slim_tensor in[2] = {tu_f32(2, I64S(3, 1), F32S(1, 2, 3)), tu_i64(1, I64S(3), I64S(2, 1, 2))};
    int n;
    slim_tensor *out = run_ok(g, in, 2, &n);
    tu_assert_shape(&out[0], 3, I64S(2, 3, 2));
    tu_assert_close_f32(&out[0], F32S(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3), 12, 0);
    slim_tensors_free(out, n);

    g = tu_graph("Tile", 13, 2, NAMES("x", "r"), 1);
    slim_tensor in2[2] = {tu_f32(2, I64S(2, 2), F32S(1, 2, 3, 4)), tu_i64(1, I64S(2), I64S(2, 3))};
    out = run_ok(g, in2, 2, &n);
    tu_assert_shape(&out[0], 2, I64S(4, 6));
    tu_assert_close_f32(&out[0], F32S(1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,
                                      1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4), 24, 0);
    slim_tensors_free(out, n);

    g = tu_graph("Expand", 13, 2, NAMES("x", "s"), 1);
    slim_tensor bad[2] = {tu_f32(1, I64S(3), NULL), tu_i64(1, I64S(1), I64S(4))};
    ck_assert_int_eq(run_status(g, bad, 2), SLIM_ESHAPE);
}
END_TEST

START_TEST(test_concat_split)
{
    slim_graph *g = tu_graph("Concat", 13, 3, NAMES("a", "b", "c"), 1);
    tu_attr_i(tu_node0(g), "axis", -1);
    slim_tensor in[3] = {tu_f32(2, I64S(2, 1), F32S(1, 2)), tu_f32(2, I64S(2, 0), NULL),
                         tu_f32(2, I64S(2, 2), F32S(3, 4, 5, 6))};
    int n;
    slim_tensor *out = run_ok(g, in, 3, &n);
    tu_assert_shape(&out[0], 2, I64S(2, 3));
    tu_assert_close_f32(&out[0], F32S(1, 3, 4, 2, 5, 6), 6, 0);
    slim_tensors_free(out, n);

    g = tu_graph("Split", 18, 1, NAMES("x"), 3);
    tu_attr_i(tu_node0(g), "axis", 1);
    tu_attr_i(tu_node0(g), "num_outputs", 3);
    float *x = iota(14);
    slim_tensor in2[1] = {tu_f32(2, I64S(2, 7), x)};
    out = run_ok(g, in2, 1, &n);
    ck_assert_int_eq(n, 3);
    tu_assert_shape(&out[2], 2, I64S(2, 1));
    tu_assert_close_f32(&out[0], F32S(0, 1, 2, 7, 8, 9), 6, 0);
    tu_assert_close_f32(&out[1], F32S(3, 4, 5, 10, 11, 12), 6, 0);
    tu_assert_close_f32(&out[2], F32S(6, 13), 2, 0);
    slim_tensors_free(out, n);
    free(x);

    g = tu_graph("Split", 13, 2, NAMES("x", "s"), 2);
    slim_tensor bad[2] = {tu_f32(1, I64S(5), NULL), tu_i64(1, I64S(2), I64S(2, 2))};
    ck_assert_int_eq(run_status(g, bad, 2), SLIM_ESHAPE);
    /* Sizes whose sum overflows int64 (a fuzzed file's) are refused, not
     * added up (the fuzzer's UBSan report). */
    g = tu_graph("Split", 13, 2, NAMES("x", "s"), 2);
    slim_tensor huge[2] = {tu_f32(1, I64S(5), NULL),
                           tu_i64(1, I64S(2), I64S(INT64_MAX - 2, INT64_MAX - 2))};
    ck_assert_int_eq(run_status(g, huge, 2), SLIM_ESHAPE);
    g = tu_graph("Split", 13, 2, NAMES("x", "s"), 2);
    slim_tensor neg[2] = {tu_f32(1, I64S(5), NULL), tu_i64(1, I64S(2), I64S(7, -2))};
    ck_assert_int_eq(run_status(g, neg, 2), SLIM_ESHAPE);

    g = tu_graph("Concat", 13, 2, NAMES("a", "b"), 1);
    tu_attr_i(tu_node0(g), "axis", 0);
    slim_tensor bad2[2] = {tu_f32(2, I64S(1, 2), NULL), tu_f32(2, I64S(1, 3), NULL)};
    ck_assert_int_eq(run_status(g, bad2, 2), SLIM_ESHAPE);
}
END_TEST

START_TEST(test_pad_modes)
{
    static const struct {
        const char *mode;
        float want[8];
    } cases[] = {
        {"constant", {9, 9, 1, 2, 3, 9, 9, 9}},
        {"reflect", {3, 2, 1, 2, 3, 2, 1, 2}},
        {"edge", {1, 1, 1, 2, 3, 3, 3, 3}},
        {"wrap", {2, 3, 1, 2, 3, 1, 2, 3}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        slim_graph *g = tu_graph("Pad", 19, 3, NAMES("x", "p", "v"), 1);
        tu_attr_s(tu_node0(g), "mode", cases[c].mode);
        slim_tensor in[3] = {tu_f32(2, I64S(1, 3), F32S(1, 2, 3)),
                             tu_i64(1, I64S(4), I64S(0, 2, 0, 3)), tu_f32(0, NULL, F32S(9))};
        int n;
        slim_tensor *out = run_ok(g, in, 3, &n);
        tu_assert_shape(&out[0], 2, I64S(1, 8));
        tu_assert_close_f32(&out[0], cases[c].want, 8, 0);
        slim_tensors_free(out, n);
    }
    /* negative pads crop; constant rows above */
    slim_graph *g = tu_graph("Pad", 13, 2, NAMES("x", "p"), 1);
    slim_tensor in[2] = {tu_f32(2, I64S(2, 3), F32S(1, 2, 3, 4, 5, 6)),
                         tu_i64(1, I64S(4), I64S(1, -1, 0, 0))};
    int n;
    slim_tensor *out = run_ok(g, in, 2, &n);
    tu_assert_shape(&out[0], 2, I64S(3, 2));
    tu_assert_close_f32(&out[0], F32S(0, 0, 2, 3, 5, 6), 6, 0);
    slim_tensors_free(out, n);

    g = tu_graph("Pad", 13, 2, NAMES("x", "p"), 1);
    slim_tensor bad[2] = {tu_f32(1, I64S(3), NULL), tu_i64(1, I64S(2), I64S(-2, -2))};
    ck_assert_int_eq(run_status(g, bad, 2), SLIM_ESHAPE);
}
END_TEST

/* ---- Gather / Scatter ---------------------------------------------------- */

START_TEST(test_gather_family)
{
    slim_graph *g = tu_graph("Gather", 13, 2, NAMES("x", "i"), 1);
    tu_attr_i(tu_node0(g), "axis", 1);
    float *x = iota(6);
    slim_tensor in[2] = {tu_f32(2, I64S(2, 3), x), tu_i64(2, I64S(2, 1), I64S(-1, 0))};
    int n;
    slim_tensor *out = run_ok(g, in, 2, &n);
    tu_assert_shape(&out[0], 3, I64S(2, 2, 1));
    tu_assert_close_f32(&out[0], F32S(2, 0, 5, 3), 4, 0);
    slim_tensors_free(out, n);

    g = tu_graph("Gather", 13, 2, NAMES("x", "i"), 1);
    slim_tensor bad[2] = {tu_f32(2, I64S(2, 3), x), tu_i64(1, I64S(1), I64S(2))};
    ck_assert_int_eq(run_status(g, bad, 2), SLIM_EINVAL);

    g = tu_graph("GatherElements", 13, 2, NAMES("x", "i"), 1);
    tu_attr_i(tu_node0(g), "axis", 1);
    slim_tensor in2[2] = {tu_f32(2, I64S(2, 3), x), tu_i64(2, I64S(2, 2), I64S(2, 0, -1, 1))};
    out = run_ok(g, in2, 2, &n);
    tu_assert_close_f32(&out[0], F32S(2, 0, 5, 4), 4, 0);
    slim_tensors_free(out, n);

    g = tu_graph("GatherND", 13, 2, NAMES("x", "i"), 1);
    tu_attr_i(tu_node0(g), "batch_dims", 1);
    slim_tensor in3[2] = {tu_f32(2, I64S(2, 3), x), tu_i64(2, I64S(2, 1), I64S(2, 0))};
    out = run_ok(g, in3, 2, &n);
    tu_assert_shape(&out[0], 1, I64S(2));
    tu_assert_close_f32(&out[0], F32S(2, 3), 2, 0);
    slim_tensors_free(out, n);
    free(x);
}
END_TEST

START_TEST(test_scatter_family)
{
    slim_graph *g = tu_graph("ScatterElements", 18, 3, NAMES("x", "i", "u"), 1);
    tu_attr_i(tu_node0(g), "axis", 1);
    tu_attr_s(tu_node0(g), "reduction", "add");
    slim_tensor in[3] = {tu_f32(2, I64S(1, 4), F32S(1, 1, 1, 1)),
                         tu_i64(2, I64S(1, 3), I64S(1, -1, 1)), tu_f32(2, I64S(1, 3), F32S(5, 6, 7))};
    int n;
    slim_tensor *out = run_ok(g, in, 3, &n);
    tu_assert_close_f32(&out[0], F32S(1, 13, 1, 7), 4, 0);
    slim_tensors_free(out, n);

    g = tu_graph("ScatterND", 18, 3, NAMES("x", "i", "u"), 1);
    tu_attr_s(tu_node0(g), "reduction", "max");
    slim_tensor in2[3] = {tu_f32(2, I64S(2, 2), F32S(1, 5, 1, 5)),
                          tu_i64(2, I64S(1, 1), I64S(1)), tu_f32(2, I64S(1, 2), F32S(3, 3))};
    out = run_ok(g, in2, 3, &n);
    tu_assert_close_f32(&out[0], F32S(1, 5, 3, 5), 4, 0);
    slim_tensors_free(out, n);

    g = tu_graph("ScatterND", 18, 3, NAMES("x", "i", "u"), 1);
    slim_tensor bad[3] = {tu_f32(1, I64S(4), NULL), tu_i64(2, I64S(1, 1), I64S(4)),
                          tu_f32(1, I64S(1), F32S(0))};
    ck_assert_int_eq(run_status(g, bad, 3), SLIM_EINVAL);

    g = tu_graph("ScatterElements", 18, 3, NAMES("x", "i", "u"), 1);
    tu_attr_s(tu_node0(g), "reduction", "xor");
    slim_tensor bad2[3] = {tu_f32(1, I64S(4), NULL), tu_i64(1, I64S(1), I64S(0)),
                           tu_f32(1, I64S(1), F32S(0))};
    ck_assert_int_eq(run_status(g, bad2, 3), SLIM_EUNSUPPORTED);
}
END_TEST

START_TEST(test_legacy_attribute_forms)
{
    /* before opset 10 Slice takes starts/ends/axes as attributes */
    slim_graph *g = tu_graph("Slice", 9, 1, NAMES("x"), 1);
    tu_attr_ints(tu_node0(g), "starts", 1, I64S(1));
    tu_attr_ints(tu_node0(g), "ends", 1, I64S(-1));
    tu_attr_ints(tu_node0(g), "axes", 1, I64S(1));
    float *x = iota(8);
    slim_tensor in[1] = {tu_f32(2, I64S(2, 4), x)};
    int n;
    slim_tensor *out = run_ok(g, in, 1, &n);
    tu_assert_close_f32(&out[0], F32S(1, 2, 5, 6), 4, 0);
    slim_tensors_free(out, n);

    /* before opset 11 Pad takes pads and value as attributes */
    g = tu_graph("Pad", 2, 1, NAMES("x"), 1);
    tu_attr_ints(tu_node0(g), "pads", 2, I64S(1, 2));
    tu_attr_f(tu_node0(g), "value", -1.0f);
    slim_tensor in2[1] = {tu_f32(1, I64S(2), F32S(4, 5))};
    out = run_ok(g, in2, 1, &n);
    tu_assert_close_f32(&out[0], F32S(-1, 4, 5, -1, -1), 5, 0);
    slim_tensors_free(out, n);

    /* before opset 13 Split takes split as an attribute */
    g = tu_graph("Split", 11, 1, NAMES("x"), 2);
    tu_attr_ints(tu_node0(g), "split", 2, I64S(3, 5));
    slim_tensor in3[1] = {tu_f32(1, I64S(8), x)};
    out = run_ok(g, in3, 1, &n);
    tu_assert_close_f32(&out[0], F32S(0, 1, 2), 3, 0);
    tu_assert_close_f32(&out[1], F32S(3, 4, 5, 6, 7), 5, 0);
    slim_tensors_free(out, n);

    /* and Unsqueeze its axes */
    g = tu_graph("Unsqueeze", 11, 1, NAMES("x"), 1);
    tu_attr_ints(tu_node0(g), "axes", 2, I64S(0, 3));
    slim_tensor in4[1] = {tu_f32(2, I64S(2, 4), x)};
    out = run_ok(g, in4, 1, &n);
    tu_assert_shape(&out[0], 4, I64S(1, 2, 4, 1));
    slim_tensors_free(out, n);
    free(x);
}
END_TEST

START_TEST(test_center_crop_pad)
{
    /* rows 5 -> 3 crops one off each side; cols 2 -> 5 pads 1 before, 2 after */
    slim_graph *g = tu_graph("CenterCropPad", 18, 2, NAMES("x", "s"), 1);
    float *x = iota(10);
    slim_tensor in[2] = {tu_f32(2, I64S(5, 2), x), tu_i64(1, I64S(2), I64S(3, 5))};
    int n;
    slim_tensor *out = run_ok(g, in, 2, &n);
    tu_assert_shape(&out[0], 2, I64S(3, 5));
    tu_assert_close_f32(&out[0], F32S(0, 2, 3, 0, 0, 0, 4, 5, 0, 0, 0, 6, 7, 0, 0), 15, 0);
    slim_tensors_free(out, n);
    free(x);
}
END_TEST

/* ---- the GPU's transpose plan (kernels/cuda/transpose_plan.h) ---------------- */

/* Moves x by the plan, element by element, as the GPU kernels do. */
static void plan_apply(const slim_transpose_plan *p, const uint8_t *x, uint8_t *y)
{
    for (int64_t i = 0; i < p->n; i++) {
        int64_t rem = i, off = 0;
        for (int d = p->ndim - 1; d >= 0; d--) {
            off += rem % p->dims[d] * p->strides[d];
            rem /= p->dims[d];
        }
        memcpy(y + i * (int64_t)p->es, x + off * (int64_t)p->es, p->es);
    }
}

/* Random shapes (size-1 axes, runs that merge), permutations, element sizes
 * and alignments: the plan moves exactly what the definition does. */
START_TEST(test_transpose_plan_random)
{
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    for (int iter = 0; iter < 3000; iter++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int ndim = 1 + (int)((rng >> 33) % 6);
        int64_t dims[8], perm[8], out_dims[8], in_str[8], n = 1;
        for (int d = 0; d < ndim; d++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            dims[d] = (int64_t)((rng >> 35) % 5) + ((rng >> 20) % 3 == 0 ? 0 : 1);
            if (dims[d] == 0)
                dims[d] = 1;
            if ((rng >> 50) % 7 == 0)
                dims[d] *= 8; /* runs long enough to widen */
            if (n * dims[d] > 4096)
                dims[d] = 1;
            perm[d] = d;
            n *= dims[d];
        }
        for (int d = ndim - 1; d > 0; d--) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int j = (int)((rng >> 33) % (uint64_t)(d + 1));
            int64_t t = perm[d];
            perm[d] = perm[j];
            perm[j] = t;
        }
        size_t es = (size_t)1 << ((rng >> 40) % 4);
        size_t align = (size_t)1 << ((rng >> 44) % 6);
        int64_t s = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            in_str[d] = s;
            s *= dims[d];
        }
        for (int d = 0; d < ndim; d++)
            out_dims[d] = dims[perm[d]];
        uint8_t *x = malloc((size_t)n * es), *want = malloc((size_t)n * es),
                *got = malloc((size_t)n * es);
        for (int64_t i = 0; i < n * (int64_t)es; i++)
            x[i] = (uint8_t)(i * 131 + iter);
        for (int64_t i = 0; i < n; i++) { /* the definition */
            int64_t rem = i, off = 0;
            for (int d = ndim - 1; d >= 0; d--) {
                off += rem % out_dims[d] * in_str[perm[d]];
                rem /= out_dims[d];
            }
            memcpy(want + i * (int64_t)es, x + off * (int64_t)es, es);
        }
        slim_transpose_plan p;
        slim_transpose_plan_make(ndim, dims, perm, es, align, &p);
        ck_assert_int_ge(p.ndim, 1);
        ck_assert_int_le(p.ndim, ndim);
        ck_assert_int_eq(p.n * (int64_t)p.es, n * (int64_t)es);
        ck_assert_uint_le(p.es, align > es ? align : es);
        memset(got, 0xAB, (size_t)n * es);
        plan_apply(&p, x, got);
        ck_assert_msg(memcmp(got, want, (size_t)n * es) == 0, "iteration %d: ndim %d, es %zu",
                      iter, ndim, es);
        free(x);
        free(want);
        free(got);
    }
}
END_TEST

/* The attention head moves become the copies movement.cu has fast paths for. */
START_TEST(test_transpose_plan_shapes)
{
    slim_transpose_plan p;
    /* K: [B,S,12,64] by [0,2,3,1] is a batch of [S,768] -> [768,S]. */
    slim_transpose_plan_make(4, (int64_t[]){8, 128, 12, 64}, (int64_t[]){0, 2, 3, 1}, 2, 256, &p);
    ck_assert_int_eq(p.ndim, 3);
    ck_assert_int_eq(p.dims[0], 8);
    ck_assert_int_eq(p.dims[1], 768);
    ck_assert_int_eq(p.dims[2], 128);
    ck_assert_int_eq(p.strides[0], 128 * 768);
    ck_assert_int_eq(p.strides[1], 1);
    ck_assert_int_eq(p.strides[2], 768);
    ck_assert_uint_eq(p.es, 2);
    /* Q: [B,S,12,64] by [0,2,1,3]: rows of 64 fp16 move as 8 16-byte values. */
    slim_transpose_plan_make(4, (int64_t[]){8, 128, 12, 64}, (int64_t[]){0, 2, 1, 3}, 2, 256, &p);
    ck_assert_int_eq(p.ndim, 4);
    ck_assert_uint_eq(p.es, 16);
    ck_assert_int_eq(p.dims[3], 8);
    ck_assert_int_eq(p.strides[1], 8);
    ck_assert_int_eq(p.strides[2], 12 * 8);
    /* Misaligned buffers keep the element size. */
    slim_transpose_plan_make(4, (int64_t[]){8, 128, 12, 64}, (int64_t[]){0, 2, 1, 3}, 2, 2, &p);
    ck_assert_uint_eq(p.es, 2);
    /* Batch 1 and the identity: one plain copy. */
    slim_transpose_plan_make(3, (int64_t[]){1, 5, 7}, (int64_t[]){1, 0, 2}, 4, 16, &p);
    ck_assert_int_eq(p.ndim, 1);
    ck_assert_int_eq(p.strides[0], 1);
    ck_assert_int_eq(p.n * (int64_t)p.es, 35 * 4);
}
END_TEST

static Suite *shape_movement_suite(void)
{
    Suite *s = suite_create("shape_movement");
    TCase *tc = tcase_create("views");
    tcase_add_test(tc, test_reshape_zero_and_infer);
    tcase_add_test(tc, test_reshape_bad);
    tcase_add_test(tc, test_squeeze_unsqueeze);
    tcase_add_test(tc, test_flatten_dropout);
    suite_add_tcase(s, tc);
    tc = tcase_create("generators");
    tcase_add_test(tc, test_shape_size);
    tcase_add_test(tc, test_constant_forms);
    tcase_add_test(tc, test_range_trilu_eyelike);
    tcase_add_test(tc, test_onehot_nonzero);
    suite_add_tcase(s, tc);
    tc = tcase_create("movement");
    tcase_add_test(tc, test_transpose_paths);
    tcase_add_test(tc, test_depth_space_roundtrip);
    tcase_add_test(tc, test_slice_negative_steps);
    tcase_add_test(tc, test_expand_tile);
    tcase_add_test(tc, test_concat_split);
    tcase_add_test(tc, test_pad_modes);
    tcase_add_test(tc, test_gather_family);
    tcase_add_test(tc, test_scatter_family);
    tcase_add_test(tc, test_legacy_attribute_forms);
    tcase_add_test(tc, test_center_crop_pad);
    tcase_add_test(tc, test_transpose_plan_random);
    tcase_add_test(tc, test_transpose_plan_shapes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(shape_movement_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
