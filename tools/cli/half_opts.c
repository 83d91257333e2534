/*
 * half_opts.c - the half-precision options that `slim run`, `bench`,
 * `convert` and `inspect` share, and the half-weights report they print.
 *
 *     slim_cli_half h = {0};
 *     for (...) { int r = slim_cli_half_arg(&h, "slim run", argc, argv, &i, &opts);
 *                 if (r < 0) return 2; if (r) continue; ... }
 *     slim_model_load(path, &opts, &m, &err);
 *     slim_cli_half_free(&h);              (after the load: the pass read the names)
 */
#include "cli.h"

#include "half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int slim_cli_half_arg(slim_cli_half *h, const char *cmd, int argc, char **argv, int *i,
                      slim_load_opts *opts)
{
    const char *a = argv[*i];
    bool act = strcmp(a, "--activations") == 0, excl = strcmp(a, "--half-exclude") == 0,
         fb = strcmp(a, "--int8-fallback") == 0;
    if (!act && !excl && !fb)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    if (act) {
        opts->compress.half.activations = v;
    } else if (fb) {
        opts->compress.int8.fallback = v;
    } else {
        free(h->buf);
        if (!(h->buf = strdup(v))) {
            fprintf(stderr, "%s: out of memory\n", cmd);
            return -1;
        }
        int n = slim_cli_split_list(h->buf, h->names, SLIM_CLI_MAX_EXCLUDE);
        opts->compress.half.exclude = h->names;
        opts->compress.half.n_exclude = n < SLIM_CLI_MAX_EXCLUDE ? n : SLIM_CLI_MAX_EXCLUDE;
    }
    return 1;
}

void slim_cli_half_free(slim_cli_half *h)
{
    free(h->buf);
    h->buf = NULL;
}

void slim_cli_print_half_totals(const struct slim_half_report *r)
{
    int n = 0;
    for (int i = 0; i < r->n_layers; i++)
        n += r->layers[i].converted;
    if (!r->bytes_before)
        return;
    printf("half      %d of %d layers: weight bytes %zu -> %zu (%.3fx)\n", n, r->n_layers,
           r->bytes_before, r->bytes_after, (double)r->bytes_after / (double)r->bytes_before);
}

void slim_cli_print_half(const struct slim_half_report *r, const char *precision)
{
    int width = 5, n = 0;
    for (int i = 0; i < r->n_layers; i++) {
        int len = (int)strlen(r->layers[i].name);
        width = len > width ? len : width;
        n += r->layers[i].converted;
    }
    printf("half-weight layers (%d of %d in %s):\n", n, r->n_layers, precision);
    printf("  %-*s  %-12s %-9s %12s %12s  %s\n", width, "layer", "op", "precision", "bytes_fp32",
           "bytes_now", "note");
    for (int i = 0; i < r->n_layers; i++) {
        const slim_half_layer *l = &r->layers[i];
        printf("  %-*s  %-12s %-9s %12zu %12zu  %s\n", width, l->name, l->op_type,
               l->converted ? precision : "fp32", l->bytes_before, l->bytes_after,
               l->why ? l->why : "");
    }
    if (r->bytes_before)
        printf("half weight bytes: %zu -> %zu (%.3fx)\n", r->bytes_before, r->bytes_after,
               (double)r->bytes_after / (double)r->bytes_before);
}
