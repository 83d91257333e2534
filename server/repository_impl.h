/*
 * repository_impl.h - what the repository's two modules share, private to
 * them: repository.c keeps the table (lookups, swaps, references, the
 * index, open and close), repository_folder.c reads one model folder from
 * disk into an entry that repository.c then swaps in.
 *
 *     slim_server_entry fresh = {.seq = seq};
 *     bool ready = slim__repo_entry_build(repo, name, NULL, &fresh, true);
 *     ... under mu: swap fresh into the table, or drop it ...
 */
#ifndef SLIM_SERVER_REPOSITORY_IMPL_H
#define SLIM_SERVER_REPOSITORY_IMPL_H

#include "repository.h"

#include <stdbool.h>

/* Reads ROOT/name (config.json or cfg_override, its version folders) into
 * e: name's slots, each loaded when load is true (else only listed, for the
 * control modes). Failures are written into e's reasons; returns whether
 * any version is ready. Takes no lock for the loads: the caller swaps e
 * into the table under mu afterwards. */
bool slim__repo_entry_build(slim_server_repo *repo, const char *name, const char *cfg_override,
                            slim_server_entry *e, bool load);

/* Frees a model no one holds any more (slim_server_model_release at zero;
 * a load that failed part way, before the table saw it). */
void slim__repo_model_free(slim_server_model *m);

#endif
