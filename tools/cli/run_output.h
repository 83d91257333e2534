/*
 * run_output.h - how `slim run` shows and writes its outputs
 * (run_output.c): a preview line per tensor, NAME.npy files in
 * --output-dir, sequences and optionals element by element.
 */
#ifndef SLIM_CLI_RUN_OUTPUT_H
#define SLIM_CLI_RUN_OUTPUT_H

#include "slim.h"

/* Prints a sequence's or optional's values (and with out_dir writes them)
 * as NAME_K / NAME; 1 after printing an error. */
int slim__run_emit_container(int idx, const char *name, const slim_tensor *t,
                             const char *out_dir);
/* "output IDX "NAME": dtype [dims] [first values]" */
void slim__run_print_output(int idx, const char *name, const slim_tensor *t);
/* Creates dir and its parents; 1 after printing an error. */
int slim__run_make_dirs(const char *dir);
/* Writes t as dir/NAME.npy (bfloat16 widened to float32); 1 after printing
 * an error. */
int slim__run_write_output(const char *dir, const char *name, const slim_tensor *t);

#endif
