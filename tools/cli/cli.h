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

#endif
