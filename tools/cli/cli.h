/* cli.h - subcommands of the `slim` command; each returns the exit code. */
#ifndef SLIM_CLI_H
#define SLIM_CLI_H

/* argv[0] is the subcommand name ("run"), options follow. */
int slim_cmd_inspect(int argc, char **argv);
int slim_cmd_run(int argc, char **argv);
int slim_cmd_conformance(int argc, char **argv);
int slim_cmd_devices(int argc, char **argv);
int slim_cmd_convert(int argc, char **argv);
int slim_cmd_bench(int argc, char **argv);

#include "slim.h"

/* "[batch,3,32,32]": declared dims, symbolic ones by name ("?" unnamed). */
char *slim_cli_declared_shape(const slim_io_info *info, char *buf, size_t cap);

/* Splits a comma-separated list in place (s is modified): up to cap
 * non-empty items into out; returns how many there were (may exceed cap). */
int slim_cli_split_list(char *s, const char **out, int cap);

/* The half-precision options (half_opts.c): --activations V,
 * --half-exclude LIST, --int8-fallback V. slim_cli_half_arg returns 1 when
 * argv[*i] was one (its value consumed), 0 when not, -1 on an error it
 * printed. The exclude names live in h until slim_cli_half_free. */
#define SLIM_CLI_MAX_EXCLUDE 256
typedef struct slim_cli_half {
    char *buf;
    const char *names[SLIM_CLI_MAX_EXCLUDE];
} slim_cli_half;
#define SLIM_CLI_HALF_USAGE \
    "  --activations A        with fp16/bf16: fp32 (default) or the same half type\n" \
    "                         for activations too (LayerNorm, Softmax, reductions\n" \
    "                         and matrix products stay fp32)\n" \
    "  --half-exclude LIST    with fp16/bf16: node names or op types kept in fp32\n" \
    "  --int8-fallback T      with int8: layers left fp32 become T (fp16, bf16)\n"
int slim_cli_half_arg(slim_cli_half *h, const char *cmd, int argc, char **argv, int *i,
                      slim_load_opts *opts);
void slim_cli_half_free(slim_cli_half *h);
struct slim_half_report;
/* `slim inspect`'s per-layer table; `slim convert`'s one-line totals. */
void slim_cli_print_half(const struct slim_half_report *r, const char *precision);
void slim_cli_print_half_totals(const struct slim_half_report *r);

#endif
