/*
 * warmup.h - Triton's model_warmup (model_config.proto's ModelWarmup):
 * requests a model runs after its load and before it is READY, so that
 * its first real request does not pay first-run costs (primitive
 * creation, page faults). warmup.c.
 *
 *     "model_warmup": [{"name": "w", "batch_size": 1, "count": 2,
 *                       "inputs": {"x": {"data_type": "TYPE_FP32", "dims": [4],
 *                                        "zero_data": true}}}]
 *
 * Each input gives one of zero_data, random_data, or input_data_file (a
 * file in the model folder's warmup/ folder holding one sample, as in
 * Triton; batch_size copies of it make the batch).
 */
#ifndef SLIM_SERVER_WARMUP_H
#define SLIM_SERVER_WARMUP_H

#include "slim.h"

#include <cjson/cJSON.h>

typedef struct slim_server_model slim_server_model;
typedef struct slim_server_repo slim_server_repo;

/* config.json's "model_warmup" value: its shape and types, checked without
 * the model (config.c); errors name the sample and the field. */
slim_status slim__config_warmup(const cJSON *v, slim_err *err);

/* Runs m's warmup samples (m->cfg.reserved's "model_warmup", already
 * checked) on the calling thread under its current cancel token, files
 * read from model_dir/warmup. A sample that does not fit the model, a
 * missing or wrongly sized file, or a failed run fails with a message
 * naming the sample. Logs one line per sample. */
slim_status slim_server_warmup_run(const slim_server_model *m, const char *model_dir,
                                   slim_err *err);

/* The above for a model repo just loaded (repository.c), under a cancel
 * token of its own with the load's deadline (0: none), listed with the
 * repository's loads so that shutdown stops it. A run past the deadline
 * fails naming --load-timeout. SLIM_OK at once without model_warmup. */
slim_status slim_server_warmup(slim_server_repo *repo, const slim_server_model *m,
                               int64_t deadline_ns, slim_err *err);

#endif
