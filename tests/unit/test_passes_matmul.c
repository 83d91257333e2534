/*
 * test_passes_matmul.c - the FusedMatMul pass (passes/) on a small MLP:
 * MatMul + Add + activation fused, its rows and column parts, weights
 * packed once, packed weights in a .slim file (run in place, repacked,
 * undone, refused when damaged) and unpacking. Each compares a graph's
 * outputs with and without the pass. Without oneDNN it runs no case.
 */
#include "testutil.h"
#include "test_passes_util.h"

#include "pass.h"
#include "slim_format.h"
#include "pipeline.h"
#ifdef SLIM_HAVE_DNNL
#include "matmul_dnnl.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SLIM_HAVE_DNNL
/* x[N,3,64] -> MatMul(w1[64,128]) + b1 -> GELU (erf form, as exported)
 *   -> MatMul(w2[128,64]) + b2 -> Relu -> y */
static slim_graph *small_mlp(void)
{
    return tp_mlp(&(tp_mlp_spec){.seed = 11, .k = 64, .h = 128, .no = 64, .w = 0.3f, .b1 = 0.2f,
                                 .bias_first = true});
}

static slim_model *load_mlp(bool passes)
{
    return tu_model(small_mlp(), passes);
}

static slim_tensor mlp_input(int64_t n, uint32_t seed)
{
    return tp_input(seed, 3, (int64_t[]){n, 3, 64});
}

START_TEST(fuse_matmul_matches)
{
    slim_model *ref = load_mlp(false), *opt = load_mlp(true);
    ck_assert_int_eq(opt->graph->n_nodes, 2);
    ck_assert_int_eq(tu_count_op(opt->graph, "FusedMatMul"), 2);
    ck_assert_int_eq(slim_attr_int(&opt->graph->nodes[0], "activation", -1), SLIM_FMM_ACT_GELU_ERF);
    ck_assert_int_eq(slim_attr_int(&opt->graph->nodes[1], "activation", -1), SLIM_FMM_ACT_RELU);
    /* Packed weights replace the originals: no more bytes than before. */
    ck_assert_uint_le(opt->weight_bytes, ref->weight_bytes);
    tp_compare_and_free(ref, opt, mlp_input(5, 3), 1e-5);
}
END_TEST

/* Rows in row-invariant mode: 7 items (21 rows, a short last tile) give
 * each item's rows bitwise as when it runs alone (3 rows). */
START_TEST(fuse_matmul_row_invariant)
{
    slim_model *opt = load_mlp(true);
    slim_model_set_batch_invariant(opt, true);
    slim_tensor x = mlp_input(7, 5), all = tp_run(opt, &x);
    tp_assert_batch_invariant(opt, &x, &all, "row invariant");
    slim_tensor_release(&all);
    slim_tensor_release(&x);
    slim_model_free(opt);
}
END_TEST

/* Not row-invariant, 47 items (141 rows) with two column parts run in
 * even chunks of 71 and 70 rows, the short one padded: every row as the
 * unfused graph gives it, and each item's rows as when it runs alone up to
 * rounding (the chunks need not sum alike). */
START_TEST(fuse_matmul_row_chunks)
{
    ck_assert_int_eq(slim_num_threads(), 2); /* main sets it: w1's 128 columns in 2 parts */
    slim_model *ref = load_mlp(false), *opt = load_mlp(true);
    slim_tensor x = mlp_input(47, 13), a = tp_run(ref, &x), b = tp_run(opt, &x);
    tp_assert_close(&b, &a, 1e-5);
    int64_t per_in = 3 * 64, per_out = slim_tensor_numel(&b) / 47;
    slim_tensor last = tu_f32(3, (int64_t[]){1, 3, 64}, (const float *)x.data + 46 * per_in);
    slim_tensor y = tp_run(opt, &last), want = tu_f32(1, (int64_t[]){per_out},
                                                   (const float *)b.data + 46 * per_out);
    tp_assert_close(&y, &want, 1e-5);
    slim_tensor_release(&y);
    slim_tensor_release(&want);
    slim_tensor_release(&last);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* From 256 rows (101 items, 303 rows: two chunks of 152 and 151, the
 * short one padded), the column parts run as one primitive over the whole
 * packed W, writing Y's rows in place; w2's 64 columns are one part. Every
 * row as the unfused graph gives it, and as the same items give it in
 * fewer rows, through the column parts. */
START_TEST(fuse_matmul_whole_rows)
{
    ck_assert_int_eq(slim_num_threads(), 2);
    slim_model *ref = load_mlp(false), *opt = load_mlp(true);
    slim_tensor x = mlp_input(101, 17), a = tp_run(ref, &x), b = tp_run(opt, &x);
    tp_assert_close(&b, &a, 1e-5);
    int64_t per_in = 3 * 64, per_out = slim_tensor_numel(&b) / 101;
    for (int64_t first = 0; first < 101; first += 25) {
        int64_t n = 101 - first < 25 ? 101 - first : 25;
        slim_tensor part = tu_f32(3, (int64_t[]){n, 3, 64}, (const float *)x.data + first * per_in);
        slim_tensor y = tp_run(opt, &part), want = tu_f32(1, (int64_t[]){n * per_out},
                                                       (const float *)b.data + first * per_out);
        tp_assert_close(&y, &want, 1e-5);
        slim_tensor_release(&y);
        slim_tensor_release(&want);
        slim_tensor_release(&part);
    }
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* Two MatMuls reading one weight (layers that share it) share one packed
 * copy, and the original goes: no more weight bytes than unfused. */
START_TEST(fuse_matmul_shared_weight_packed_once)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    tp_rng = 21;
    tp_add_init(g, "w", 2, (int64_t[]){64, 64}, -0.3f, 0.3f);
    tp_node(g, "mm1", "MatMul", 2, (const char *[]){"x", "w"}, "h");
    tp_node(g, "relu", "Relu", 1, (const char *[]){"h"}, "r");
    tp_node(g, "mm2", "MatMul", 2, (const char *[]){"r", "w"}, "y");
    tp_graph_io(g);
    slim_err err = {0};
    ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(tu_count_op(g, "FusedMatMul"), 2);
    ck_assert_int_eq(g->nodes[0].in[1], g->nodes[1].in[1]);
    int weights = 0;
    for (int v = 0; v < g->n_values; v++)
        weights += g->values[v].kind == SLIM_VALUE_INITIALIZER && g->values[v].init.data &&
                   g->values[v].init.dtype == SLIM_F32 && slim_tensor_numel(&g->values[v].init) >= 64 * 64;
    ck_assert_int_eq(weights, 1);
    slim_graph_free(g);
}
END_TEST

/* The same graph from a mapped .slim file (whose weights the pass packs
 * and whose pages it gives back) and from memory: FusedMatMuls in both,
 * bitwise the same outputs, and packed weights of the .slim model held
 * outside the mapping (the originals are no longer weights of the model). */
START_TEST(fuse_matmul_slim_file_same_bits)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmm_%ld.slim", (long)getpid());
    slim_graph *g = small_mlp();
    slim_err err = {0};
    ck_assert_msg(slim_format_write(g, path, &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(g);
    slim_model *file = NULL, *mem = load_mlp(true);
    ck_assert_msg(slim_model_load(path, NULL, &file, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(tu_count_op(file->graph, "FusedMatMul"), 2);
    ck_assert_int_eq(tu_count_op(file->graph, "MatMul"), 0);
    int mapped = 0, packed = 0;
    for (int v = 0; v < file->graph->n_values; v++) {
        const slim_value *val = &file->graph->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER || !val->init.data)
            continue;
        ck_assert_msg(strcmp(val->name, "w1") && strcmp(val->name, "w2"),
                      "%s is still a weight", val->name);
        int fd;
        int64_t off;
        if (slim_file_map_lookup(val->init.data, slim_tensor_nbytes(&val->init), &fd, &off))
            mapped++;
        else if (strstr(val->name, "_packed"))
            packed++;
    }
    ck_assert_int_eq(packed, 2);
    ck_assert_int_ge(mapped, 2); /* the biases stay in the file */
    /* The model's account holds the weights once: the mapping stops
     * counting what was packed (64 KiB of w1 and w2 here). */
    setenv("SLIM_FUSE_MATMUL", "0", 1);
    slim_model *plain = NULL;
    ck_assert_msg(slim_model_load(path, NULL, &plain, &err) == SLIM_OK, "%s", err.msg);
    setenv("SLIM_FUSE_MATMUL", "1", 1);
    size_t held = atomic_load(&file->account->current),
           held_plain = atomic_load(&plain->account->current);
    ck_assert_uint_ge(held_plain, 64 * 1024);
    ck_assert_msg(held <= held_plain + 8192, "packed model holds %zu bytes, unpacked %zu", held,
                  held_plain);
    slim_model_free(plain);
    slim_tensor x = mlp_input(5, 9), a = tp_run(mem, &x), b = tp_run(file, &x);
    ck_assert_int_eq(slim_tensor_numel(&a), slim_tensor_numel(&b));
    ck_assert_int_eq(memcmp(a.data, b.data, slim_tensor_nbytes(&a)), 0);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(file);
    slim_model_free(mem);
    unlink(path);
}
END_TEST

/* SLIM_FUSE_MATMUL=0 leaves the MatMuls; unset (auto) fuses weights in the
 * process's memory, which a graph built in memory has, as =1 does (this
 * suite's main sets 1 for the other tests). */
START_TEST(fuse_matmul_off_by_env)
{
    setenv("SLIM_FUSE_MATMUL", "0", 1);
    slim_model *off = load_mlp(true);
    unsetenv("SLIM_FUSE_MATMUL");
    ck_assert_int_eq(tu_count_op(off->graph, "FusedMatMul"), 0);
    ck_assert_int_eq(tu_count_op(off->graph, "MatMul"), 2);
    slim_model_free(off);
    slim_model *aut = load_mlp(true);
    setenv("SLIM_FUSE_MATMUL", "1", 1);
    ck_assert_int_eq(tu_count_op(aut->graph, "FusedMatMul"), 2);
    slim_model_free(aut);
}
END_TEST

/* ---- packed weights in a .slim file ---------------------------------------- */

/* small_mlp as `slim convert` writes it: MatMul weights packed. */
static void write_packed_mlp(const char *path)
{
    slim_graph *g = small_mlp();
    slim_err err = {0};
    ck_assert_msg(slim_pass_pack_matmul(g, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(tu_count_op(g, "FusedMatMul"), 2);
    ck_assert_msg(slim_format_write(g, path, &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(g);
}

static slim_graph *read_graph(const char *path)
{
    slim_graph *g = NULL;
    slim_err err = {0};
    ck_assert_msg(slim_format_load_file(path, &g, &err) == SLIM_OK, "%s", err.msg);
    return g;
}

static void assert_same_bits(slim_model *a, slim_model *b)
{
    slim_tensor x = mlp_input(4, 17), ya = tp_run(a, &x), yb = tp_run(b, &x);
    ck_assert_int_eq(slim_tensor_numel(&ya), slim_tensor_numel(&yb));
    ck_assert_int_eq(memcmp(ya.data, yb.data, slim_tensor_nbytes(&ya)), 0);
    slim_tensor_release(&ya);
    slim_tensor_release(&yb);
    slim_tensor_release(&x);
}

/* By default a file's packed weights are run in place (still mapped), and
 * compute bitwise what the same graph packed at load computes. */
START_TEST(fuse_matmul_packed_file_in_place)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmmp_%ld.slim", (long)getpid());
    write_packed_mlp(path);
    unsetenv("SLIM_FUSE_MATMUL");
    slim_model *file = NULL, *mem = load_mlp(true);
    slim_err err = {0};
    ck_assert_msg(slim_model_load(path, NULL, &file, &err) == SLIM_OK, "%s", err.msg);
    setenv("SLIM_FUSE_MATMUL", "1", 1);
    ck_assert_int_eq(tu_count_op(file->graph, "FusedMatMul"), 2);
    int mapped = 0;
    for (int i = 0; i < file->graph->n_nodes; i++) {
        const slim_node *n = &file->graph->nodes[i];
        if (strcmp(n->op_type, "FusedMatMul"))
            continue;
        const slim_tensor *w = &file->graph->values[n->in[1]].init;
        int fd;
        int64_t off;
        mapped += slim_file_map_lookup(w->data, slim_tensor_nbytes(w), &fd, &off);
    }
    ck_assert_int_eq(mapped, 2);
    assert_same_bits(file, mem);
    slim_model_free(file);
    slim_model_free(mem);
    unlink(path);
}
END_TEST

/* Set node `name`'s weight to W [k, n] stored plain (no inner blocks), one
 * part, as another machine's oneDNN might have laid it out. */
static void make_plain(slim_graph *g, const char *name, const char *wname)
{
    slim_graph *src = small_mlp();
    const slim_tensor *w = &src->values[slim_graph_find_value(src, wname)].init;
    int64_t k = w->dims[0], n = w->dims[1];
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *nd = &g->nodes[i];
        if (strcmp(nd->name, name))
            continue;
        slim_tensor t = tu_f32(1, (int64_t[]){k * n}, w->data);
        slim_err err = {0};
        int v = slim_graph_add_initializer(g, wname, "_plain", &t, &err);
        ck_assert_int_ge(v, 0);
        g->nodes[i].in[1] = v;
        int64_t parts[2] = {0, n};
        int64_t layout[SLIM_FMM_DESC] = {k, n, n, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, k * n};
        ck_assert_int_eq(slim_pass_set_ints(&g->nodes[i], "parts", parts, 2, &err), SLIM_OK);
        ck_assert_int_eq(slim_pass_set_ints(&g->nodes[i], "layout", layout, SLIM_FMM_DESC, &err),
                         SLIM_OK);
    }
    slim_graph_free(src);
}

/* A file packed in a layout this machine's oneDNN does not pick is
 * repacked at load, and computes bitwise what packing here computes. */
START_TEST(fuse_matmul_foreign_layout_repacked)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmmf_%ld.slim", (long)getpid());
    write_packed_mlp(path);
    slim_graph *g = read_graph(path);
    make_plain(g, "mm1", "w1");
    slim_err err = {0};
    ck_assert_msg(slim_format_write(g, path, &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(g);
    slim_model *file = NULL, *mem = load_mlp(true);
    ck_assert_msg(slim_model_load(path, NULL, &file, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(tu_count_op(file->graph, "FusedMatMul"), 2);
    assert_same_bits(file, mem);
    slim_model_free(file);
    /* Without the passes it loads (to be looked at) but does not run. */
    slim_load_opts raw = {.optimize.no_passes = true};
    ck_assert_msg(slim_model_load(path, &raw, &file, &err) == SLIM_OK, "%s", err.msg);
    slim_tensor x = mlp_input(1, 3), *out = NULL;
    int n_out;
    ck_assert_int_eq(slim_model_run(file, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "another CPU"));
    slim_tensor_release(&x);
    slim_model_free(file);
    slim_model_free(mem);
    unlink(path);
}
END_TEST

/* Undone (SLIM_FUSE_MATMUL=0 here; a GPU load the same way): MatMul, Add,
 * the GELU's nodes and Relu again, bitwise the unfused model's results. */
START_TEST(fuse_matmul_packed_file_undone)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmmu_%ld.slim", (long)getpid());
    write_packed_mlp(path);
    setenv("SLIM_FUSE_MATMUL", "0", 1);
    slim_model *file = NULL, *plain = load_mlp(true);
    slim_err err = {0};
    ck_assert_msg(slim_model_load(path, NULL, &file, &err) == SLIM_OK, "%s", err.msg);
    setenv("SLIM_FUSE_MATMUL", "1", 1);
    ck_assert_int_eq(tu_count_op(file->graph, "FusedMatMul"), 0);
    ck_assert_int_eq(tu_count_op(file->graph, "MatMul"), 2);
    ck_assert_int_eq(tu_count_op(plain->graph, "MatMul"), 2);
    assert_same_bits(file, plain);
    slim_model_free(file);
    slim_model_free(plain);
    /* The GPU's path, on the graph as read. */
    slim_graph *g = read_graph(path);
    ck_assert_msg(slim_pass_defuse_matmul(g, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(tu_count_op(g, "FusedMatMul"), 0);
    ck_assert_int_eq(tu_count_op(g, "Erf"), 1);
    ck_assert_int_eq(tu_count_op(g, "Relu"), 1);
    slim_graph_free(g);
    unlink(path);
}
END_TEST

/* A damaged layout is refused at load, naming the node; nothing is read
 * outside the weight. */
START_TEST(fuse_matmul_bad_layout_refused)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmmb_%ld.slim", (long)getpid());
    write_packed_mlp(path);
    for (int c = 0; c < 4; c++) {
        slim_graph *g = read_graph(path);
        for (int i = 0; i < g->n_nodes; i++) {
            slim_node *n = &g->nodes[i];
            if (strcmp(n->name, "mm2"))
                continue;
            int64_t parts[SLIM_FMM_MAX_PARTS + 1], layout[SLIM_FMM_MAX_PARTS * SLIM_FMM_DESC];
            int nb = slim_attr_ints(n, "parts", parts, SLIM_FMM_MAX_PARTS + 1);
            int nl = slim_attr_ints(n, "layout", layout, SLIM_FMM_MAX_PARTS * SLIM_FMM_DESC);
            if (c == 0)
                layout[2] = (int64_t)1 << 30; /* a stride past the weight */
            else if (c == 1)
                layout[4] = 9; /* blocks */
            else if (c == 2)
                parts[nb - 1] = 63; /* not N */
            else
                layout[13] += 16; /* more floats than the weight holds */
            slim_err e = {0};
            ck_assert_int_eq(slim_pass_set_ints(n, "parts", parts, nb, &e), SLIM_OK);
            ck_assert_int_eq(slim_pass_set_ints(n, "layout", layout, nl, &e), SLIM_OK);
        }
        slim_err err = {0};
        ck_assert_msg(slim_format_write(g, path, &err) == SLIM_OK, "%s", err.msg);
        slim_graph_free(g);
        for (int mode = 0; mode < 2; mode++) { /* repacked here; undone */
            setenv("SLIM_FUSE_MATMUL", mode ? "0" : "1", 1);
            slim_model *m = NULL;
            ck_assert_int_ne(slim_model_load(path, NULL, &m, &err), SLIM_OK);
            ck_assert_msg(strstr(err.msg, "mm2") != NULL, "case %d: %s", c, err.msg);
        }
        setenv("SLIM_FUSE_MATMUL", "1", 1);
        write_packed_mlp(path);
    }
    unlink(path);
}
END_TEST

/* Unpacking gives W back bitwise, over shapes whose blocks do not divide. */
START_TEST(fuse_matmul_unpack_roundtrip)
{
    int64_t shapes[3][2] = {{100, 37}, {64, 130}, {7, 200}};
    for (int s = 0; s < 3; s++) {
        int64_t k = shapes[s][0], n = shapes[s][1];
        slim_tensor w = tp_input(40 + (uint32_t)s, 2, (int64_t[]){k, n}), packed;
        const float *d = w.data;
        slim_fmm_packing how;
        slim_err err = {0};
        ck_assert_msg(slim_fmm_pack(&w, &packed, &how, &err) == SLIM_OK, "%s", err.msg);
        int parts;
        ck_assert_msg(slim_fmm_layout_check(how.parts, how.n_bounds, how.layout, how.n_layout, k,
                                            n, slim_tensor_numel(&packed), &parts, &err) == SLIM_OK,
                      "%s", err.msg);
        float *back = calloc((size_t)(k * n), sizeof(float));
        slim_fmm_unpack(packed.data, how.parts, parts, how.layout, k, n, back);
        ck_assert_int_eq(memcmp(back, d, sizeof(float) * (size_t)(k * n)), 0);
        free(back);
        slim_tensor_release(&w);
        slim_tensor_release(&packed);
    }
}
END_TEST
#endif

Suite *passes_matmul_suite(void)
{
    Suite *s = suite_create("passes_matmul");
    TCase *tc = tcase_create("passes_matmul");
#ifdef SLIM_HAVE_DNNL
    tcase_add_test(tc, fuse_matmul_matches);
    tcase_add_test(tc, fuse_matmul_row_invariant);
    tcase_add_test(tc, fuse_matmul_row_chunks);
    tcase_add_test(tc, fuse_matmul_whole_rows);
    tcase_add_test(tc, fuse_matmul_shared_weight_packed_once);
    tcase_add_test(tc, fuse_matmul_slim_file_same_bits);
    tcase_add_test(tc, fuse_matmul_off_by_env);
    tcase_add_test(tc, fuse_matmul_packed_file_in_place);
    tcase_add_test(tc, fuse_matmul_foreign_layout_repacked);
    tcase_add_test(tc, fuse_matmul_packed_file_undone);
    tcase_add_test(tc, fuse_matmul_bad_layout_refused);
    tcase_add_test(tc, fuse_matmul_unpack_roundtrip);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tp_main(passes_matmul_suite());
}
