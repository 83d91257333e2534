/*
 * test_format.c - the .slim format (loaders/slim): round trips of every
 * dtype and attribute kind, and damaged files refused with a message.
 */
#include "testutil.h"
#include "device.h"
#include "slim_format.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

static char path_buf[256];
static uint64_t true_meta_size; /* of the file written() last made */

static const char *tmp_path(void)
{
    snprintf(path_buf, sizeof(path_buf), "/tmp/test_format_%ld.slim", (long)getpid());
    return path_buf;
}

static const slim_dtype ALL_DTYPES[] = {
    SLIM_F32, SLIM_U8, SLIM_I8, SLIM_U16, SLIM_I16, SLIM_I32, SLIM_I64,
    SLIM_BOOL, SLIM_F16, SLIM_F64, SLIM_U32, SLIM_U64, SLIM_BF16,
};
#define N_DTYPES (int)(sizeof(ALL_DTYPES) / sizeof(ALL_DTYPES[0]))

/* A graph with one initializer per dtype (odd sizes, so alignment padding
 * is exercised), an empty one, and a node with every attribute kind. */
static slim_graph *make_graph(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    g->ir_version = 8;
    g->name = strdup("roundtrip");
    g->producer_name = strdup("test_format");
    for (int i = 0; i < N_DTYPES; i++) {
        char name[32];
        snprintf(name, sizeof(name), "w%d", i);
        int v = slim_graph_value(g, name);
        slim_value *val = &g->values[v];
        val->kind = SLIM_VALUE_INITIALIZER;
        slim_tensor *t = &val->init;
        t->dtype = ALL_DTYPES[i];
        t->ndim = 2;
        t->dims[0] = 3;
        t->dims[1] = i + 1;
        slim_err err;
        ck_assert_int_eq(slim_tensor_alloc(t, &err), SLIM_OK);
        unsigned char *p = t->data;
        for (size_t k = 0; k < slim_tensor_nbytes(t); k++)
            p[k] = (unsigned char)(k * 7 + i);
        if (t->dtype == SLIM_BOOL)
            for (size_t k = 0; k < slim_tensor_nbytes(t); k++)
                p[k] &= 1;
        val->info.dtype = t->dtype;
        val->info.ndim = 2;
        val->info.dims[0] = 3;
        val->info.dims[1] = i + 1;
    }
    int e = slim_graph_value(g, "empty");
    g->values[e].kind = SLIM_VALUE_INITIALIZER;
    g->values[e].init.dtype = SLIM_F32;
    g->values[e].init.ndim = 1;
    int x = slim_graph_value(g, "x");
    g->values[x].info.dtype = SLIM_F32;
    g->values[x].info.ndim = 2;
    g->values[x].info.dims[0] = -1;
    g->values[x].info.dims[1] = 4;
    g->values[x].info.dim_names[0] = strdup("batch");
    ck_assert_int_eq(slim_graph_add_input(g, x), SLIM_OK);
    int n = slim_graph_add_node(g, "n0", "Identity", "", 2, (const char *[]){"x", ""}, 1,
                                (const char *[]){"y"});
    ck_assert_int_ge(n, 0);
    g->nodes[n].opset = 17;
    slim_node *nd = tu_node0(g);
    tu_attr_i(nd, "i", -5);
    tu_attr_f(nd, "f", 2.5f);
    tu_attr_s(nd, "s", "text");
    tu_attr_ints(nd, "is", 3, (int64_t[]){1, -2, 3});
    tu_attr_floats(nd, "fs", 2, (float[]){0.5f, -1.0f});
    nd->attrs = realloc(nd->attrs, sizeof(slim_attr) * (nd->n_attrs + 2));
    slim_attr *ss = &nd->attrs[nd->n_attrs++];
    memset(ss, 0, sizeof(*ss));
    ss->name = strdup("ss");
    ss->type = SLIM_ATTR_STRINGS;
    ss->n = 2;
    ss->strings = calloc(2, sizeof(char *));
    ss->strings[0] = strdup("a");
    ss->strings[1] = strdup("");
    slim_attr *ta = &nd->attrs[nd->n_attrs++];
    memset(ta, 0, sizeof(*ta));
    ta->name = strdup("t");
    ta->type = SLIM_ATTR_TENSOR;
    ta->t = calloc(1, sizeof(slim_tensor));
    *ta->t = tu_i64(1, (int64_t[]){3}, (int64_t[]){7, 8, 9});
    ck_assert_int_eq(slim_graph_add_output(g, slim_graph_find_value(g, "y")), SLIM_OK);
    return g;
}

static void assert_same_attr(const slim_attr *a, const slim_attr *b)
{
    ck_assert_str_eq(a->name, b->name);
    ck_assert_int_eq(a->type, b->type);
    switch (a->type) {
    case SLIM_ATTR_INT: ck_assert_int_eq(a->i, b->i); break;
    case SLIM_ATTR_FLOAT: ck_assert(a->f == b->f); break;
    case SLIM_ATTR_STRING: ck_assert_str_eq(a->s, b->s); break;
    case SLIM_ATTR_INTS:
        ck_assert_int_eq(a->n, b->n);
        ck_assert_mem_eq(a->ints, b->ints, sizeof(int64_t) * a->n);
        break;
    case SLIM_ATTR_FLOATS:
        ck_assert_int_eq(a->n, b->n);
        ck_assert_mem_eq(a->floats, b->floats, sizeof(float) * a->n);
        break;
    case SLIM_ATTR_STRINGS:
        ck_assert_int_eq(a->n, b->n);
        for (int k = 0; k < a->n; k++)
            ck_assert_str_eq(a->strings[k], b->strings[k]);
        break;
    case SLIM_ATTR_TENSOR:
        ck_assert_int_eq(a->t->dtype, b->t->dtype);
        ck_assert_int_eq(slim_tensor_nbytes(a->t), slim_tensor_nbytes(b->t));
        ck_assert_mem_eq(a->t->data, b->t->data, slim_tensor_nbytes(a->t));
        ck_assert_ptr_nonnull(b->t->buf); /* a view that keeps the file mapped */
        break;
    default: break;
    }
}

START_TEST(test_round_trip_every_dtype_and_attribute)
{
    slim_graph *g = make_graph();
    slim_err err = {0};
    ck_assert_msg(slim_format_write(g, tmp_path(), &err) == SLIM_OK, "%s", err.msg);
    slim_graph *h = NULL;
    ck_assert_msg(slim_format_load_file(tmp_path(), &h, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(h->n_values, g->n_values);
    ck_assert_int_eq(h->opset, 17);
    ck_assert_int_eq(h->ir_version, 8);
    ck_assert_str_eq(h->name, "roundtrip");
    ck_assert_str_eq(h->producer_name, "test_format");
    for (int v = 0; v < g->n_values; v++) {
        const slim_value *a = &g->values[v], *b = &h->values[v];
        ck_assert_str_eq(a->name, b->name);
        ck_assert_int_eq(a->kind, b->kind);
        if (a->kind != SLIM_VALUE_INITIALIZER)
            continue;
        ck_assert_int_eq(a->init.dtype, b->init.dtype);
        ck_assert_int_eq(a->init.ndim, b->init.ndim);
        ck_assert_mem_eq(a->init.dims, b->init.dims, sizeof(int64_t) * a->init.ndim);
        size_t nb = slim_tensor_nbytes(&a->init);
        ck_assert_int_eq(nb, slim_tensor_nbytes(&b->init));
        if (nb) {
            ck_assert_mem_eq(a->init.data, b->init.data, nb);
            /* In place: aligned inside the mapping, not a copy. */
            ck_assert_int_eq((uintptr_t)b->init.data % SLIM_FORMAT_TENSOR_ALIGN, 0);
            ck_assert_ptr_nonnull(b->init.buf);
            ck_assert_ptr_nonnull(b->init.buf->release);
        }
    }
    int x = slim_graph_find_value(h, "x");
    ck_assert_int_eq(h->values[x].info.dims[0], -1);
    ck_assert_str_eq(h->values[x].info.dim_names[0], "batch");
    ck_assert_int_eq(h->n_inputs, 1);
    ck_assert_int_eq(h->n_outputs, 1);
    ck_assert_int_eq(h->n_nodes, 1);
    const slim_node *na = &g->nodes[0], *nb = &h->nodes[0];
    ck_assert_str_eq(nb->op_type, "Identity");
    ck_assert_int_eq(nb->opset, 17);
    ck_assert_int_eq(nb->n_in, na->n_in);
    ck_assert_int_eq(nb->n_attrs, na->n_attrs);
    for (int a = 0; a < na->n_attrs; a++)
        assert_same_attr(&na->attrs[a], &nb->attrs[a]);
    slim_graph_free(h);
    slim_graph_free(g);
    unlink(tmp_path());
}
END_TEST

/* The whole file in memory, to damage. */
static unsigned char *written(size_t *size)
{
    slim_graph *g = make_graph();
    slim_err err = {0};
    ck_assert_int_eq(slim_format_write(g, tmp_path(), &err), SLIM_OK);
    slim_graph_free(g);
    FILE *f = fopen(tmp_path(), "rb");
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*size);
    ck_assert_int_eq(fread(p, 1, *size, f), *size);
    fclose(f);
    memcpy(&true_meta_size, p + 24, 8);
    unlink(tmp_path());
    return p;
}

/* Makes the checksums right again, over the metadata's true length (the
 * header's may be what a test forged). */

static void fix_crcs(unsigned char *p)
{
    uint64_t meta_size = true_meta_size;
    uint32_t c = slim_format_crc32(0, p + 64, meta_size);
    memcpy(p + 56, &c, 4);
    c = slim_format_crc32(0, p, 60);
    memcpy(p + 60, &c, 4);
}

static slim_status load_bytes(const unsigned char *p, size_t n, slim_err *err)
{
    slim_graph *g = NULL;
    slim_status st = slim_format_load_buffer(p, n, NULL, &g, err);
    ck_assert(st == SLIM_OK || g == NULL);
    slim_graph_free(g);
    return st;
}

START_TEST(test_truncated_anywhere_is_refused)
{
    size_t size;
    unsigned char *p = written(&size);
    slim_err err;
    ck_assert_int_eq(load_bytes(p, size, &err), SLIM_OK);
    for (size_t n = 0; n < size; n += n < 256 ? 1 : 97) {
        ck_assert_int_ne(load_bytes(p, n, &err), SLIM_OK);
        ck_assert_ptr_nonnull(strstr(err.msg, ".slim"));
    }
    free(p);
}
END_TEST

START_TEST(test_flipped_checksummed_bytes_are_refused)
{
    size_t size;
    unsigned char *p = written(&size);
    uint64_t meta_size;
    memcpy(&meta_size, p + 24, 8);
    slim_err err;
    for (size_t i = 0; i < 64 + meta_size; i++) {
        p[i] ^= 0x10;
        ck_assert_int_ne(load_bytes(p, size, &err), SLIM_OK);
        p[i] ^= 0x10;
    }
    ck_assert_int_eq(load_bytes(p, size, &err), SLIM_OK);
    p[60] ^= 1;
    ck_assert_int_ne(load_bytes(p, size, &err), SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "checksum"));
    free(p);
}
END_TEST

/* With the checksums made right again, every byte of the metadata changed
 * to hostile values: never a crash, and a failure names what is wrong. */
START_TEST(test_forged_metadata_is_refused_or_consistent)
{
    size_t size;
    unsigned char *p = written(&size);
    uint64_t meta_size;
    memcpy(&meta_size, p + 24, 8);
    static const unsigned char forged[] = {0x00, 0xFF, 0x7F, 0x80, 0x40};
    slim_err err;
    int refused = 0;
    for (size_t i = 64; i < 64 + meta_size; i++) {
        unsigned char keep = p[i];
        for (size_t k = 0; k < sizeof(forged); k++) {
            if (forged[k] == keep)
                continue;
            p[i] = forged[k];
            fix_crcs(p);
            if (load_bytes(p, size, &err) != SLIM_OK) {
                refused++;
                ck_assert_ptr_nonnull(strstr(err.msg, ".slim"));
            }
        }
        p[i] = keep;
    }
    fix_crcs(p);
    ck_assert_int_eq(load_bytes(p, size, &err), SLIM_OK);
    ck_assert_int_gt(refused, 100);
    free(p);
}
END_TEST

START_TEST(test_header_fields_out_of_range)
{
    size_t size;
    unsigned char *p = written(&size);
    slim_err err;
    uint64_t big = (uint64_t)1 << 62;
    for (int off = 16; off <= 48; off += 8) {
        unsigned char keep[8];
        memcpy(keep, p + off, 8);
        memcpy(p + off, &big, 8);
        fix_crcs(p);
        ck_assert_int_ne(load_bytes(p, size, &err), SLIM_OK);
        memcpy(p + off, keep, 8);
    }
    uint32_t future = SLIM_FORMAT_VERSION + 1; /* a version from the future */
    memcpy(p + 8, &future, 4);
    fix_crcs(p);
    ck_assert_int_eq(load_bytes(p, size, &err), SLIM_EUNSUPPORTED);
    char want[32];
    snprintf(want, sizeof(want), "version %u", future);
    ck_assert_ptr_nonnull(strstr(err.msg, want));
    free(p);
}
END_TEST

/* A small model's data section starts on a 64-byte boundary, which only
 * version 4 allows: the same bytes labelled version 3 are refused unless
 * the section happens to start on a page. */
START_TEST(test_small_data_section_needs_version_4)
{
    size_t size;
    unsigned char *p = written(&size);
    slim_err err;
    uint32_t version;
    uint64_t data_off;
    memcpy(&version, p + 8, 4);
    memcpy(&data_off, p + 32, 8);
    ck_assert_uint_eq(version, 4);
    ck_assert_uint_eq(data_off % SLIM_FORMAT_TENSOR_ALIGN, 0);
    ck_assert_uint_lt(data_off, 64 + true_meta_size + SLIM_FORMAT_TENSOR_ALIGN);
    ck_assert_int_eq(load_bytes(p, size, &err), SLIM_OK);
    uint32_t old = 3;
    memcpy(p + 8, &old, 4);
    fix_crcs(p);
    ck_assert_int_eq(load_bytes(p, size, &err), data_off % 4096 ? SLIM_EPARSE : SLIM_OK);
    free(p);
}
END_TEST

/* Values that no node, input, output or weight uses (what fusing passes
 * leave) are not written; the ids of the rest are renumbered. */
START_TEST(test_unused_values_left_out)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_value(g, "dead_before"); /* id 0: every later id moves */
    slim_graph_add_node(g, "add", "Add", "", 2, (const char *[]){"x", "w"}, 1,
                        (const char *[]){"y"});
    g->nodes[0].opset = 17;
    slim_graph_value(g, "dead_after");
    int x = slim_graph_find_value(g, "x"), w = slim_graph_find_value(g, "w");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    g->values[w].kind = SLIM_VALUE_INITIALIZER;
    g->values[w].init = tu_f32(1, (int64_t[]){2}, (float[]){1.5f, -2});
    slim_err err = {0};
    ck_assert_msg(slim_format_write(g, tmp_path(), &err) == SLIM_OK, "%s", err.msg);
    slim_graph *r = NULL;
    ck_assert_msg(slim_format_load_file(tmp_path(), &r, &err) == SLIM_OK, "%s", err.msg);
    char why[256];
    ck_assert_msg(slim_format_verify(g, r, why, sizeof(why)) == 0, "%s", why);
    ck_assert_int_eq(r->n_values, 3);
    ck_assert_int_lt(slim_graph_find_value(r, "dead_before"), 0);
    ck_assert_int_lt(slim_graph_find_value(r, "dead_after"), 0);
    ck_assert_str_eq(r->values[r->nodes[0].in[0]].name, "x");
    ck_assert_str_eq(r->values[r->nodes[0].in[1]].name, "w");
    ck_assert_str_eq(r->values[r->nodes[0].out[0]].name, "y");
    ck_assert_str_eq(r->values[r->inputs[0]].name, "x");
    ck_assert_str_eq(r->values[r->outputs[0]].name, "y");
    ck_assert_int_eq(r->values[r->nodes[0].in[1]].kind, SLIM_VALUE_INITIALIZER);
    ck_assert(((const float *)r->values[r->nodes[0].in[1]].init.data)[1] == -2.0f);
    slim_graph_free(r);
    slim_graph_free(g);
    unlink(tmp_path());
}
END_TEST

/* A model converted, loaded by slim_model_load (format told by magic), runs
 * to the same bits as from its graph; the weights are charged while mapped. */
START_TEST(test_model_from_slim_runs_the_same)
{
    slim_graph *g = tu_graph("Add", 17, 2, (const char *[]){"x", "w"}, 1);
    int w = slim_graph_find_value(g, "w");
    /* w becomes a weight */
    g->n_inputs = 1;
    g->values[w].kind = SLIM_VALUE_INITIALIZER;
    g->values[w].init = tu_f32(1, (int64_t[]){4}, (float[]){1.5f, -2, 3, 0.25f});
    slim_err err = {0};
    ck_assert_int_eq(slim_format_write(g, tmp_path(), &err), SLIM_OK);
    slim_graph_free(g);
    slim_model *m = NULL;
    ck_assert_msg(slim_model_load(tmp_path(), NULL, &m, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_ge(atomic_load(&m->account->current), 16);
    slim_tensor x = tu_f32(1, (int64_t[]){4}, (float[]){1, 1, 1, 1});
    slim_tensor *out = NULL;
    int n_out = 0;
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){2.5f, -1, 4, 1.25f}, 4, 0);
    slim_tensors_free(out, n_out);
    slim_tensor_release(&x);
    slim_model_free(m);
    unlink(tmp_path());
}
END_TEST

/* Gather from a large table in a mapped file reads its rows from the file
 * (slim_buffer.file_backed): the rows must be the table's, first, last and
 * repeated ones included, and negative indices count from the end. */
/* If nested 3000 deep, as the ONNX file of issue 29 nested it: the reader
 * checks the depth before it reads each subgraph, so the file is refused
 * by depth instead of recursing 3000 levels into the C stack. */
START_TEST(test_deep_subgraphs_refused_by_depth)
{
    slim_graph *inner = NULL;
    for (int level = 3000; level >= 0; level--) {
        slim_graph *g = slim_graph_new();
        g->opset = 17;
        g->ir_version = 8;
        g->name = strdup(level ? "branch" : "main");
        g->producer_name = strdup("test_format");
        int n = slim_graph_add_node(g, "if", "If", "", 1, (const char *[]){"c"}, 1,
                                    (const char *[]){"y"});
        ck_assert_int_ge(n, 0);
        g->nodes[n].opset = 17;
        if (inner) {
            slim_node *nd = &g->nodes[n];
            nd->attrs = calloc(1, sizeof(slim_attr));
            nd->n_attrs = 1;
            nd->attrs[0].name = strdup("then_branch");
            nd->attrs[0].type = SLIM_ATTR_GRAPH;
            nd->attrs[0].g = inner;
        }
        inner = g;
    }
    slim_err err = {0};
    ck_assert_msg(slim_format_write(inner, tmp_path(), &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(inner);
    slim_graph *back = NULL;
    ck_assert_int_eq(slim_format_load_file(tmp_path(), &back, &err), SLIM_EPARSE);
    ck_assert_msg(strstr(err.msg, "subgraphs nest more than 16 deep"), "%s", err.msg);
    unlink(tmp_path());
}
END_TEST

START_TEST(test_gather_rows_from_mapped_table)
{
    enum { ROWS = 8192, COLS = 256 }; /* 8 MiB of float32 */
    slim_graph *g = tu_graph("Gather", 13, 2, (const char *[]){"table", "ids"}, 1);
    int w = slim_graph_find_value(g, "table");
    float *data = malloc(sizeof(float) * ROWS * COLS);
    ck_assert_ptr_nonnull(data);
    for (int64_t i = 0; i < (int64_t)ROWS * COLS; i++)
        data[i] = (float)(i % 1000003) * 0.5f - 7.0f;
    memmove(&g->inputs[0], &g->inputs[1], sizeof(g->inputs[0]));
    g->n_inputs = 1;
    g->values[w].kind = SLIM_VALUE_INITIALIZER;
    g->values[w].init = tu_f32(2, (int64_t[]){ROWS, COLS}, data);
    slim_err err = {0};
    ck_assert_msg(slim_format_write(g, tmp_path(), &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(g);
    slim_model *m = NULL;
    ck_assert_msg(slim_model_load(tmp_path(), NULL, &m, &err) == SLIM_OK, "%s", err.msg);
    const slim_value *t = &m->graph->values[slim_graph_find_value(m->graph, "table")];
    int fd;
    int64_t off;
    ck_assert(slim_file_map_lookup(t->init.data, slim_tensor_nbytes(&t->init), &fd, &off));
    ck_assert_int_eq(off % 64, 0);
    const int64_t ids[] = {0, ROWS - 1, 17, 17, -1, 4095, 1};
    slim_tensor x = tu_i64(1, (int64_t[]){7}, ids);
    slim_tensor *out = NULL;
    int n_out = 0;
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"ids"}, &x, &out, &n_out, &err) == SLIM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(out[0].dims[0], 7);
    ck_assert_int_eq(out[0].dims[1], COLS);
    for (int r = 0; r < 7; r++) {
        int64_t row = ids[r] < 0 ? ids[r] + ROWS : ids[r];
        ck_assert_msg(memcmp((float *)out[0].data + r * COLS, data + row * COLS,
                             sizeof(float) * COLS) == 0, "row %d (table row %lld) differs", r,
                      (long long)row);
    }
    slim_tensors_free(out, n_out);
    slim_tensor_release(&x);
    slim_model_free(m);
    free(data);
    unlink(tmp_path());
}
END_TEST

/* The writer renames a file made beside the path over it: over a device
 * or a folder that would replace them, so such a path is refused, left
 * as it was, and nothing is left beside it. A FIFO stands in for a
 * device (it needs no root), and a folder for the other kind. */
START_TEST(test_write_over_non_regular_refused)
{
    slim_graph *g = make_graph();
    char dir[] = "/tmp/slim_fmt_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char fifo[sizeof(dir) + 8], sub[sizeof(dir) + 8];
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    const char *paths[] = {fifo, sub};
    for (int i = 0; i < 2; i++) {
        slim_err err = {0};
        ck_assert_int_eq(slim_format_write(g, paths[i], &err), SLIM_EINVAL);
        ck_assert_msg(strstr(err.msg, "not a regular file") && strstr(err.msg, paths[i]), "%s",
                      err.msg);
        struct stat sb;
        ck_assert_int_eq(lstat(paths[i], &sb), 0);
        ck_assert(i == 0 ? S_ISFIFO(sb.st_mode) : S_ISDIR(sb.st_mode));
    }
    DIR *d = opendir(dir);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        entries += e->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(entries, 2); /* no temporary file left beside them */
    unlink(fifo);
    rmdir(sub);
    rmdir(dir);
    slim_graph_free(g);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("format");
    TCase *tc = tcase_create("format");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_round_trip_every_dtype_and_attribute);
    tcase_add_test(tc, test_truncated_anywhere_is_refused);
    tcase_add_test(tc, test_flipped_checksummed_bytes_are_refused);
    tcase_add_test(tc, test_forged_metadata_is_refused_or_consistent);
    tcase_add_test(tc, test_header_fields_out_of_range);
    tcase_add_test(tc, test_model_from_slim_runs_the_same);
    tcase_add_test(tc, test_gather_rows_from_mapped_table);
    tcase_add_test(tc, test_small_data_section_needs_version_4);
    tcase_add_test(tc, test_unused_values_left_out);
    tcase_add_test(tc, test_deep_subgraphs_refused_by_depth);
    tcase_add_test(tc, test_write_over_non_regular_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
