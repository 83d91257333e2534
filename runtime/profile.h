/*
 * profile.h - where a run's time goes, per operator type.
 *
 *     slim_profile_enable(true);       (slim run --profile)
 *     ... runs ...
 *     slim_profile_print(stdout);      (op type, calls, total ms, share)
 *
 * While enabled, the executor times every node, waiting for a GPU node's
 * work to finish before it stops the clock, so GPU time lands on the node
 * that queued it (and runs lose their CPU/GPU overlap: profile, then time
 * without it). Copies between devices show as MemcpyToDevice/ToHost.
 */
#ifndef SLIM_PROFILE_H
#define SLIM_PROFILE_H

#include <stdbool.h>
#include <stdio.h>

void slim_profile_enable(bool on);
bool slim_profile_enabled(void);
/* Adds one call of op_type on device ("cpu", "cuda:0") that took ms. */
void slim_profile_add(const char *op_type, const char *device, double ms);
/* The same for node `node`, whose outputs took `bytes`: totalled per node
 * when slim_profile_per_node(true) (slim bench), else per op type. */
void slim_profile_add_node(const char *node, const char *op_type, const char *device, double ms,
                           size_t bytes);
void slim_profile_per_node(bool on);
/* Entries by time, each as ms per run over `runs` runs; top > 0 limits the
 * lines. */
void slim_profile_print_nodes(FILE *f, long runs, int top);
void slim_profile_print(FILE *f);
void slim_profile_reset(void);

#endif
