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

/* inspect_fit.c: `slim inspect --fit` (limit 0: the machine's memory; actual:
 * load it after and print the measured footprint too). Returns the exit code. */
int slim_cli_inspect_fit(const char *path, const slim_load_opts *opts, int64_t batch,
                         size_t limit, bool actual);

/* "[batch,3,32,32]": declared dims, symbolic ones by name ("?" unnamed). */
char *slim_cli_declared_shape(const slim_io_info *info, char *buf, size_t cap);

/* Splits a comma-separated list in place (s is modified): up to cap
 * non-empty items into out; returns how many there were (may exceed cap). */
int slim_cli_split_list(char *s, const char **out, int cap);

/* --prune SPEC (magnitude:AMOUNT | 2:4 | mask:FILE.npz), --prune-scope
 * layer|global, --prune-ops LIST, --prune-storage auto|sparse|dense, shared
 * by run, bench, convert and inspect (prune_args.c). */
typedef struct slim_cli_prune {
    slim_prune_opts o;
    const char *ops[256];
    char *ops_buf;
    bool given;
} slim_cli_prune;
/* If argv[*i] is a pruning option, consumes it (and its value) and returns
 * 1; 0 if it is not one; -1 after printing an error for cmd. */
int slim_cli_prune_arg(int argc, char **argv, int *i, slim_cli_prune *p, const char *cmd);
/* The options to load with (NULL when --prune was not given); -1 and a
 * message when --prune-* options came without --prune. */
int slim_cli_prune_opts(slim_cli_prune *p, const char *cmd, const slim_prune_opts **out);
void slim_cli_prune_free(slim_cli_prune *p);
struct slim_prune_report;
/* Per layer: sparsity, storage (or why dense), bytes before and after. */
void slim_cli_print_prune(const struct slim_prune_report *r);
/* Runs the unpruned fp32 model at path and `pruned` on seeded sample
 * inputs and prints the outputs' relative L2 error and cosine; 1 on error. */
int slim_cli_prune_error(const char *path, slim_model *pruned);
/* Loads the unpruned model at src and the pruned file out as `slim run`
 * would, times a few runs of each on seeded sample inputs and prints the
 * weight bytes (unpruned, file_weight_bytes in the file, as served) and
 * the time change; 1 on error. */
int slim_cli_prune_time(const char *src, const char *out, size_t file_weight_bytes);
#define SLIM_CLI_PRUNE_USAGE \
    "  --prune SPEC           prune MatMul, Gemm and Conv weights: magnitude:AMOUNT\n" \
    "                         (0 <= AMOUNT < 1), 2:4, or mask:FILE.npz (docs/prune.md)\n" \
    "  --prune-scope S        layer (default) or global magnitude ranking\n" \
    "  --prune-ops LIST       comma-separated op types or node names to prune\n" \
    "  --prune-storage S      auto (default: sparse where it pays), sparse or dense\n" \
    "  --prune-batch N        the batch to decide sparse or dense for (default 1)\n"
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
