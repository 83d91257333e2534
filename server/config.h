/*
 * config.h - a model's config.json (config.c parses it, config_model.c
 * checks it against the model and shows it back, version_policy.c reads
 * "version_policy"). The repository owns one per loaded model version.
 *
 *     slim_server_config cfg;
 *     if (slim_server_config_parse(text, "mlp", &cfg, &err) == SLIM_OK &&
 *         slim_server_config_resolve(&cfg, model, &err) == SLIM_OK) ...
 *     slim_server_config_free(&cfg);
 */
#ifndef SLIM_SERVER_CONFIG_H
#define SLIM_SERVER_CONFIG_H

#include "alloc.h"
#include "slim.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct slim_server_io {
    char *name;
    slim_dtype dtype;
    int ndim;                   /* -1: any rank; excludes the batch dim */
    int64_t dims[SLIM_MAX_DIMS];/* -1: dynamic */
    /* An output's "label_filename" (Triton's), relative to the model's
     * folder, and its lines once loaded (classify.c): labels[i] is class
     * i's, all pointing into label_text. */
    char *label_filename;
    char *label_text;
    const char **labels;
    int64_t n_labels;
} slim_server_io;

/* "dynamic_batching" in config.json, with Triton's names. */
#define SLIM_SERVER_MAX_PREFERRED 16

typedef enum {
    SLIM_SERVER_TIMEOUT_REJECT,     /* an expired request is answered 503 */
    SLIM_SERVER_TIMEOUT_DELAY,      /* ... goes to the back of the queue, once */
} slim_server_timeout_action;

typedef struct slim_server_batching {
    bool enabled;                   /* the key is present: queued requests merge */
    int64_t max_queue_delay_us;     /* how long the oldest request waits for company */
    int preferred[SLIM_SERVER_MAX_PREFERRED]; /* preferred_batch_size, ascending */
    int n_preferred;
    /* default_queue_policy */
    int max_queue_size;             /* 0: the server's --queue-size */
    int64_t default_timeout_us;     /* 0: requests wait as long as it takes */
    slim_server_timeout_action timeout_action;
    bool allow_timeout_override;    /* a request's "timeout" parameter counts */
    /* slimserve's own: full batches without out-of-memory before the
     * batch ceiling of an input shape is raised again */
    int oom_probe_after;
} slim_server_batching;

/* "version_policy" in config.json (version_policy.c), Triton's: which
 * version folders are loaded. The default is {"latest": {"num_versions": 1}}. */
typedef enum {
    SLIM_SERVER_VERSIONS_LATEST,    /* the num_versions highest */
    SLIM_SERVER_VERSIONS_ALL,
    SLIM_SERVER_VERSIONS_SPECIFIC,  /* those listed */
} slim_server_version_kind;

typedef struct slim_server_version_policy {
    slim_server_version_kind kind;
    int num_versions;               /* LATEST */
    int64_t *versions;              /* SPECIFIC: ascending, no repeats */
    int n_versions;
} slim_server_version_policy;

/* Parses the "version_policy" value; errors name the field. */
slim_status slim_server_version_policy_parse(const cJSON *v, slim_server_version_policy *p,
                                             slim_err *err);
/* Whether version folder i of the n in `all` (ascending) is loaded. */
bool slim_server_version_policy_selects(const slim_server_version_policy *p,
                                        const int64_t *all, int n, int i);
cJSON *slim_server_version_policy_to_json(const slim_server_version_policy *p);
void slim_server_version_policy_free(slim_server_version_policy *p);

typedef struct slim_server_config {
    char *name;
    char *platform;
    int max_batch_size;         /* 0: the model does not batch */
    int instance_count;         /* 0 until resolved: the server's --workers */
    slim_server_batching batching;
    slim_server_io *inputs, *outputs;
    int n_inputs, n_outputs;
    size_t memory_limit;        /* bytes the model may hold at once; 0: no limit */
    int64_t request_timeout_ms; /* deadline of every request, queue plus run; 0: none */
    /* "memory_limit": {"cuda:0": ..., "cpu": ...}: what it may hold on each
     * device, by account slot (alloc.h; 0: no limit there). */
    size_t device_limits[SLIM_MEM_DEVICE_SLOTS];
    char *device;               /* "cuda:0"...; NULL: the server's --device */
    char *precision;            /* "fp16", "bf16", "int8"; NULL: fp32 */
    char **int8_exclude;        /* "int8": {"exclude": [...]}: layers kept in fp32 */
    int n_int8_exclude;
    double int8_max_error;      /* "int8": {"max_error": x}; 0: no budget */
    /* "pruning": {"method", "amount", "scope", "masks", "ops", "storage"}
     * (quant/prune.h); prune_method NULL: none. prune_masks is as written,
     * relative to the model's folder (the repository resolves it). */
    char *prune_method, *prune_masks, *prune_storage;
    double prune_amount;
    bool prune_global;
    char **prune_ops;
    int n_prune_ops;
    char *int8_fallback;        /* "int8": {"fallback": "bf16"}: left-float layers half */
    char *activations;          /* "activations": "fp32" | "fp16" | "bf16"; NULL: unset */
    char **half_exclude;        /* "half": {"exclude": [...]}: layers kept in fp32 */
    int n_half_exclude;
    int convert;                /* "convert": 1 true, -1 false, 0 not given
                                   (then --convert-cache decides) */
    slim_server_version_policy versions; /* which version folders load */
    /* Keys kept as given so /config shows them: dynamic_batching (also
     * parsed into `batching`), and keys later issues act on (precision,
     * pruning). */
    cJSON *reserved;
} slim_server_config;

/* dir_name is the model's folder name: config "name" must equal it. text
 * NULL gives the defaults. Errors name the offending key. */
slim_status slim_server_config_parse(const char *text, const char *dir_name,
                                     slim_server_config *cfg, slim_err *err);
/* Checks declared inputs/outputs against the model and fills in the ones
 * left out, so afterwards cfg describes every model input and output. */
slim_status slim_server_config_resolve(slim_server_config *cfg, const slim_model *m,
                                       slim_err *err);
cJSON *slim_server_config_to_json(const slim_server_config *cfg);
void slim_server_config_free(slim_server_config *cfg);

/* Reads the label files the outputs name, from the model's folder
 * root/model; errors name the output and the file (classify.c). */
slim_status slim_server_config_load_labels(slim_server_config *cfg, const char *root,
                                           const char *model, slim_err *err);
/* Frees an input/output entry's own memory (name, labels). */
void slim_server_io_free(slim_server_io *io);

/* ---- Triton's model configuration (config_triton.c) --------------------- */

/* config.pbtxt (protobuf text format) as config.json text for
 * slim_server_config_parse, in *json_out (free() it). Fields slimserve
 * does not act on are logged as warnings naming them; a file that is not
 * valid text format fails naming its line and column. */
slim_status slim_server_config_from_pbtxt(const char *text, size_t len, const char *model,
                                          char **json_out, slim_err *err);
/* The same for Triton's JSON model configuration (a load request's
 * "config" parameter); keys that are not Triton's pass through unchanged,
 * for config.c to take (slimserve's own) or refuse. */
slim_status slim_server_config_from_triton_json(const cJSON *cfg, const char *model,
                                                char **json_out, slim_err *err);
/* config.json's "instance_group" (Triton's groups: instance_count and
 * device, where config.json does not give those itself); config.c. */
slim_status slim__config_instance_group(const cJSON *groups, const char *model,
                                        slim_server_config *cfg, slim_err *err);
/* The config of the model folder `dir` as config.json text: config.json
 * when present (config.pbtxt beside it is then ignored, with a warning),
 * else config.pbtxt converted; SLIM_ENOTFOUND when neither exists. */
slim_status slim_server_config_read(const char *dir, const char *model, char **json_out,
                                    slim_err *err);

#endif
