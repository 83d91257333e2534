/* fuzz_config.c - a model's config.json from raw bytes. */
#include "config.h"
#include "fuzz.h"
#include "slim_init.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    slim_server_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    slim_err err;
    if (slim_server_config_parse(text, "m", &cfg, &err) == SLIM_OK) {
        cJSON *j = slim_server_config_to_json(&cfg);
        cJSON_Delete(j);
    }
    slim_server_config_free(&cfg);
    free(text);
    return 0;
}
