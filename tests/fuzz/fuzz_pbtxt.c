/* fuzz_pbtxt.c - a Triton config.pbtxt from raw bytes: the text format
 * parser (server/pbtxt.c), then, when it parses, the mapping onto
 * config.json (config_triton.c) and config.json's own parser. */
#include "config.h"
#include "fuzz.h"
#include "log.h"
#include "pbtxt.h"
#include "slim_init.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    slim_err err = {0};
    cJSON *tree = slim_server_pbtxt_parse((const char *)data, size, &err);
    if (!tree)
        return 0;
    cJSON_Delete(tree);
    char *json = NULL;
    if (slim_server_config_from_pbtxt((const char *)data, size, "m", &json, &err) == SLIM_OK) {
        slim_server_config cfg;
        if (slim_server_config_parse(json, "m", &cfg, &err) == SLIM_OK) {
            cJSON_Delete(slim_server_config_to_json(&cfg));
            slim_server_config_free(&cfg);
        }
    }
    free(json);
    return 0;
}
