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

int slim_cmd_convert(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *precision = NULL, *exclude_arg = NULL;
    double max_error = 0;
    slim_cli_half half = {0};
    slim_load_opts opts = {.no_passes = true};
    for (int i = 1; i < argc; i++) {
        int hr = slim_cli_half_arg(&half, "slim convert", argc, argv, &i, &opts);
        if (hr < 0) {
            slim_cli_half_free(&half);
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
                " [--half-exclude LIST] [--int8-fallback T]\n");
        slim_cli_half_free(&half);
        return 2;
    }
    slim_err err = {0};
    slim_model *m = NULL;
    double t0 = now_s();
    opts.precision = precision;
    opts.int8_max_error = max_error;
    slim_half_report half_rep = {0};
    opts.half_report = &half_rep;
    const char *exclude[256];
    char *exclude_buf = exclude_arg ? strdup(exclude_arg) : NULL;
    if (exclude_buf) {
        int n = slim_cli_split_list(exclude_buf, exclude, 256);
        opts.int8_exclude = exclude;
        opts.n_int8_exclude = n < 256 ? n : 256;
    }
    slim_status load_st = slim_model_load(in, &opts, &m, &err);
    free(exclude_buf);
    slim_cli_half_free(&half);
    if (load_st != SLIM_OK) {
        fprintf(stderr, "slim convert: %s\n", err.msg);
        slim_half_report_free(&half_rep);
        return 1;
    }
    slim_cli_print_half_totals(&half_rep);
    slim_half_report_free(&half_rep);
    char wb[32];
    printf("loaded    %s: %d nodes, %s of weights (%.2f s)\n", in, m->graph->n_nodes,
           slim_format_bytes(m->weight_bytes, wb, sizeof(wb)), now_s() - t0);
    fflush(stdout);
    double t1 = now_s();
    bool tty = isatty(STDOUT_FILENO);
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
    slim_load_opts back_opts = {.no_passes = true};
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
