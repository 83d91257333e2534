/*
 * pbtxt.h - the protobuf text format, as Triton's config.pbtxt is written
 * (pbtxt.c). The parser knows no schema: it turns the text into a cJSON
 * tree and leaves the meaning of each field to its caller
 * (config_triton.c maps a model configuration onto config.json's keys).
 *
 *     slim_err err = {0};
 *     cJSON *t = slim_server_pbtxt_parse(text, len, &err);
 *     if (!t) ... err.msg is "line 3, column 7: expected ':' or '{' after \"dims\"" ...
 *     ... cJSON_GetObjectItemCaseSensitive(t, "max_batch_size") is [16] ...
 *     cJSON_Delete(t);
 *
 * The tree: a message is a JSON object in which every field name maps to
 * an array of the field's values in the order they were written (a field
 * written once is a one-element array; `dims: [1, 2]` and `dims: 1 dims: 2`
 * give the same [1, 2]; `dims: []` gives nothing, as in protobuf). Values: numbers are numbers, "strings" are
 * strings, true/false are booleans, other identifiers (enum values such as
 * TYPE_FP32, inf, nan) are strings, and nested messages are objects of the
 * same shape. Fields appear in the object in the order first written.
 *
 * The text is untrusted (it comes with a model repository, or a load
 * request): its size, nesting depth and number of values are bounded, and
 * an error names the line and column (1-based, in bytes) where it was found.
 */
#ifndef SLIM_SERVER_PBTXT_H
#define SLIM_SERVER_PBTXT_H

#include "slim.h"

#include <cjson/cJSON.h>
#include <stddef.h>

#define SLIM_SERVER_PBTXT_MAX_BYTES (1u << 20) /* a model config is a few KiB */
#define SLIM_SERVER_PBTXT_MAX_DEPTH 32         /* nested messages */
#define SLIM_SERVER_PBTXT_MAX_VALUES 65536     /* scalars and messages in all */

/* NULL with err set (SLIM_EPARSE, or SLIM_ENOMEM) when the text is not
 * valid; the caller frees the tree with cJSON_Delete. */
cJSON *slim_server_pbtxt_parse(const char *text, size_t len, slim_err *err);

#endif
