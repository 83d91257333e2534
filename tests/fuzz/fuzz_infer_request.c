/*
 * fuzz_infer_request.c - the KServe v2 infer request decoder (JSON, and
 * JSON header + binary tensors) from raw bytes.
 *
 * Input layout: byte 0 picks the model (bit 0: batching with FP32/INT64
 * inputs, or not batching with FP16/BOOL/UINT8/INT32 inputs; bit 2 over
 * both: batching with a BYTES input and a BYTES and a classifiable output) and
 * the framing (bit 1: the whole body is JSON; else bytes 1-2 are the
 * Inference-Header-Content-Length, little-endian); the body follows byte 2.
 */
#include "codec.h"
#include "config.h"
#include "fuzz.h"
#include "repository.h"
#include "slim_init.h"

#include <stdlib.h>
#include <string.h>

static const char *const CONFIGS[3] = {
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
    "{\"name\": \"m\", \"max_batch_size\": 8,"
    " \"input\": [{\"name\": \"text\", \"data_type\": \"TYPE_STRING\", \"dims\": [-1]}],"
    " \"output\": [{\"name\": \"label\", \"data_type\": \"TYPE_STRING\", \"dims\": [-1]},"
    "              {\"name\": \"probs\", \"data_type\": \"TYPE_FP32\", \"dims\": [10]}]}",
};

static slim_server_model *model_for(int which)
{
    static slim_server_model models[3];
    static int ready[3];
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

/* The BYTES model's answer to a decoded request: "label" its input as it
 * is, "probs" [rows, 10] with ties, so the encoder (BYTES out, JSON and
 * binary, and the class strings) runs on what the request asked for. */
static void encode_bytes_model(const slim_server_model *m, const slim_server_infer *rq)
{
    slim_tensor outs[2] = {rq->inputs[0], {.dtype = SLIM_F32, .ndim = 2, .dims = {rq->batch, 10}}};
    slim_err err;
    if (slim_tensor_alloc(&outs[1], &err) != SLIM_OK)
        return;
    for (int64_t i = 0; i < rq->batch * 10; i++)
        ((float *)outs[1].data)[i] = (float)(i % 7) - 3.0f;
    slim_server_reply reply = {0};
    if (slim_server_infer_encode(rq, m, outs, 2, &reply, &err) == SLIM_OK)
        slim_server_reply_free(&reply);
    slim_tensor_release(&outs[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    if (size < 3)
        return 0;
    const slim_server_model *m = model_for(data[0] & 4 ? 2 : data[0] & 1);
    long long header_len = (data[0] & 2) ? -1 : (long long)(data[1] | (data[2] << 8));
    size_t len = size - 3;
    /* The server hands the decoder a NUL-terminated copy of the body. */
    char *body = malloc(len + 1);
    if (!body)
        return 0;
    memcpy(body, data + 3, len);
    body[len] = 0;
    slim_server_infer rq;
    memset(&rq, 0, sizeof(rq));
    slim_err err;
    if (slim_server_infer_decode(body, len, header_len, m, &rq, &err) == SLIM_OK) {
        if (m == model_for(2))
            encode_bytes_model(m, &rq);
        slim_server_infer_free(&rq);
    }
    free(body);
    return 0;
}
