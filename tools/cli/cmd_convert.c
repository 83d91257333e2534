/*
 * cmd_convert.c - `slim convert MODEL -o OUT.slim [--precision P]`: writes
 * the native format (docs/format.md), then loads the file back and checks
 * that every weight and node came through.
 *
 * Each stage prints a line (with its time) so a long conversion shows where
 * it is, on a terminal or in a log alike; on a terminal a bar shows the
 * weights being written.
 */
#include "cli.h"
#include "half.h"
#include "model.h"
#include "prune.h"
#include "slim_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* On a terminal, a bar redrawn in place while the weights are written. */
static void progress_bar(uint64_t done, uint64_t total, void *user)
{
    (void)user;
    const int width = 30;
    int fill = total ? (int)(done * width / total) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    char a[32], b[32];
    printf("\rwriting   [%s] %3d%% %s of %s", bar, total ? (int)(done * 100 / total) : 100,
           slim_format_bytes((size_t)done, a, sizeof(a)), slim_format_bytes((size_t)total, b, sizeof(b)));
    fflush(stdout);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* "pruned    METHOD: N layers (K sparse), Z% zeros, their bytes A -> B" */
static void print_prune_totals(const slim_prune_report *prep)
{
    int sparse = 0;
    for (int i = 0; i < prep->n_layers; i++)
        sparse += strcmp(prep->layers[i].storage, "dense") != 0;
    printf("pruned    %s: %d layers (%d sparse), %.2f%% zeros, their bytes %zu -> %zu "
           "(%.3fx)\n", prep->method, prep->n_layers, sparse,
           prep->elements ? 100.0 * (double)prep->zeros / (double)prep->elements : 0.0,
           prep->bytes_before, prep->bytes_after,
           prep->bytes_before ? (double)prep->bytes_after / (double)prep->bytes_before : 1.0);
}

/* Writes m (freed here) to out with a line per stage, then reads the file
 * back and checks every node and weight against m; out is removed when
 * that fails. Returns the exit code. */
static int write_and_verify(slim_model *m, const char *in, const char *out)
{
    int packed = 0;
    for (int i = 0; i < m->graph->n_nodes; i++)
        packed += strcmp(m->graph->nodes[i].op_type, "FusedMatMul") == 0;
    if (packed)
        printf("packed    %d MatMul weights in this CPU's oneDNN layout (loads here run them in "
               "place; other CPUs repack, GPUs unpack)\n", packed);
    fflush(stdout);
    double t1 = now_s();
    bool tty = isatty(STDOUT_FILENO);
    slim_err err = {0};
    slim_status ws = slim_format_write_progress(m->graph, out, tty ? progress_bar : NULL, NULL,
                                                &err);
    if (tty)
        printf("\r\033[K"); /* the bar gives way to the stage's line */
    if (ws != SLIM_OK) {
        fprintf(stderr, "slim convert: %s\n", err.msg);
        slim_model_free(m);
        return 1;
    }
    struct stat sb;
    char fb[32];
    stat(out, &sb);
    printf("wrote     %s: %s (%.2f s)\n", out, slim_format_bytes((size_t)sb.st_size, fb, sizeof(fb)),
           now_s() - t1);
    fflush(stdout);
    double t2 = now_s();
    slim_model *back = NULL;
    int rc = 0;
    /* Read back as written, to compare with what was written. */
    slim_load_opts back_opts = {.optimize.no_passes = true};
    if (slim_model_load(out, &back_opts, &back, &err) != SLIM_OK) {
        fprintf(stderr, "slim convert: reading %s back: %s\n", out, err.msg);
        rc = 1;
    } else {
        char why[512];
        if (slim_format_verify(m->graph, back->graph, why, sizeof(why))) {
            fprintf(stderr, "slim convert: %s does not match %s: %s\n", out, in, why);
            rc = 1;
        } else {
            printf("verified  every node and weight read back (%.3f s)\n", now_s() - t2);
        }
    }
    slim_model_free(back);
    slim_model_free(m);
    if (rc)
        remove(out);
    return rc;
}

int slim_cmd_convert(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *precision = NULL, *exclude_arg = NULL;
    double max_error = 0;
    slim_cli_prune prune = {0};
    slim_prune_report prep = {0};
    slim_cli_half half = {0};
    /* The MatMul weights go in packed for this CPU (SLIM_FUSE_MATMUL=0:
     * as they are): loads here run them in place; others repack or unpack
     * (passes/fuse_matmul.c). */
    slim_load_opts opts = {.optimize.no_passes = true, .optimize.pack_matmul = true};
    for (int i = 1; i < argc; i++) {
        int hr = slim_cli_half_arg(&half, "slim convert", argc, argv, &i, &opts);
        if (!hr)
            hr = slim_cli_prune_arg(argc, argv, &i, &prune, "convert");
        if (hr < 0) {
            slim_cli_half_free(&half);
            slim_cli_prune_free(&prune);
            return 2;
        }
        if (hr)
            continue;
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc)
            precision = argv[++i];
        else if (strcmp(argv[i], "--int8-exclude") == 0 && i + 1 < argc)
            exclude_arg = argv[++i];
        else if (strcmp(argv[i], "--int8-max-error") == 0 && i + 1 < argc) {
            char *end;
            max_error = strtod(argv[++i], &end);
            if (*end || !(max_error > 0) || max_error > 1e30) {
                fprintf(stderr, "slim convert: --int8-max-error needs a positive number\n");
                return 2;
            }
        }
        else if (argv[i][0] != '-' && !in)
            in = argv[i];
        else {
            fprintf(stderr, "slim convert: unexpected argument \"%s\"\n", argv[i]);
            in = NULL;
            break;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "usage: slim convert MODEL -o OUT.slim [--precision fp32|fp16|bf16|int8]"
                " [--int8-exclude LIST] [--int8-max-error X] [--activations A]"
                " [--half-exclude LIST] [--int8-fallback T] [--prune SPEC [--prune-scope S]]\n"
                SLIM_CLI_HALF_USAGE SLIM_CLI_PRUNE_USAGE);
        slim_cli_half_free(&half);
        slim_cli_prune_free(&prune);
        return 2;
    }
    slim_err err = {0};
    slim_model *m = NULL;
    double t0 = now_s();
    opts.compress.precision = precision;
    opts.compress.int8.max_error = max_error;
    slim_half_report half_rep = {0};
    opts.compress.half.report = &half_rep;
    const char *exclude[256];
    char *exclude_buf = exclude_arg ? strdup(exclude_arg) : NULL;
    if (exclude_buf) {
        int n = slim_cli_split_list(exclude_buf, exclude, 256);
        opts.compress.int8.exclude = exclude;
        opts.compress.int8.n_exclude = n < 256 ? n : 256;
    }
    if (slim_cli_prune_opts(&prune, "convert", &opts.compress.prune) < 0) {
        slim_cli_prune_free(&prune);
        slim_cli_half_free(&half);
        free(exclude_buf);
        return 2;
    }
    prune.o.report = &prep;
    slim_status load_st = slim_model_load(in, &opts, &m, &err);
    free(exclude_buf);
    bool pruned = opts.compress.prune != NULL;
    slim_cli_prune_free(&prune);
    slim_cli_half_free(&half);
    if (load_st != SLIM_OK) {
        fprintf(stderr, "slim convert: %s\n", err.msg);
        slim_half_report_free(&half_rep);
        slim_prune_report_free(&prep);
        return 1;
    }
    slim_cli_print_half_totals(&half_rep);
    slim_half_report_free(&half_rep);
    char wb[32];
    printf("loaded    %s: %d nodes, %s of weights (%.2f s)\n", in, m->graph->n_nodes,
           slim_format_bytes(m->weight_bytes, wb, sizeof(wb)), now_s() - t0);
    size_t file_weights = m->weight_bytes;
    if (pruned) {
        print_prune_totals(&prep);
        slim_prune_report_free(&prep);
        fflush(stdout);
        if (slim_cli_prune_error(in, m)) {
            slim_model_free(m);
            return 1;
        }
    }
    int rc = write_and_verify(m, in, out);
    if (!rc && pruned) {
        fflush(stdout);
        rc = slim_cli_prune_time(in, out, file_weights);
    }
    return rc;
}
