/*
 * fuzz_grpc_infer.c - the gRPC infer request decoder (grpc_codec.c): a
 * packed ModelInferRequest from raw bytes, against two models.
 *
 * Input layout: byte 0 picks the model (bit 0: batching with FP32/INT64
 * inputs, or not batching with FP16/BOOL/UINT8/INT32 inputs); the message
 * follows byte 0.
 */
#include "codec.h"
#include "config.h"
#include "fuzz.h"
#include "grpc.h"
#include "repository.h"
#include "slim_init.h"

#include <stdlib.h>
#include <string.h>

static const char *const CONFIGS[2] = {
    "{\"name\": \"m\", \"max_batch_size\": 8,"
    " \"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]},"
    "             {\"name\": \"ids\", \"data_type\": \"TYPE_INT64\", \"dims\": [-1]}],"
    " \"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]},"
    "              {\"name\": \"z\", \"data_type\": \"TYPE_INT32\", \"dims\": [2]}]}",
    "{\"name\": \"m\", \"max_batch_size\": 0,"
    " \"input\": [{\"name\": \"h\", \"data_type\": \"TYPE_FP16\", \"dims\": [2, -1]},"
    "             {\"name\": \"mask\", \"data_type\": \"TYPE_BOOL\", \"dims\": [3]},"
    "             {\"name\": \"px\", \"data_type\": \"TYPE_UINT8\", \"dims\": [2, 2, 1]},"
    "             {\"name\": \"n\", \"data_type\": \"TYPE_INT32\", \"dims\": []}],"
    " \"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_FP32\", \"dims\": [-1]}]}",
};

static slim_server_model *model_for(int which)
{
    static slim_server_model models[2];
    static int ready[2];
    if (!ready[which]) {
        slim_err err;
        models[which].name = "m";
        models[which].version = 1;
        if (slim_server_config_parse(CONFIGS[which], "m", &models[which].cfg, &err) != SLIM_OK)
            abort(); /* the harness itself is wrong */
        ready[which] = 1;
    }
    return &models[which];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    if (size < 1)
        return 0;
    const slim_server_model *m = model_for(data[0] & 1);
    slim_server_infer rq;
    memset(&rq, 0, sizeof(rq));
    slim_err err;
    if (slim_server_grpc_infer_decode(data + 1, size - 1, m, &rq, &err) == SLIM_OK)
        slim_server_infer_free(&rq);
    return 0;
}
