/*
 * fuzz_grpc_infer.c - the gRPC infer request decoder (grpc_codec.c): a
 * packed ModelInferRequest from raw bytes, against two models.
 *
 * Input layout: byte 0 picks the model (bit 0: batching with FP32/INT64
 * inputs, or not batching with FP16/BOOL/UINT8/INT32 inputs; bit 2 over
 * both: batching with a BYTES input and a BYTES and a classifiable
 * output); the message
 * follows byte 0. Each message is also unpacked both ways (in place and by
 * protobuf-c), which must agree.
 */
#include "codec.h"
#include "config.h"
#include "fuzz.h"
#include "grpc.h"
#include "inference.pb-c.h"
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
 * is, "probs" [rows, 10] with ties, so the encoder (BYTES out and the
 * class strings) runs on what the request asked for. */
static void encode_bytes_model(const slim_server_model *m, const slim_server_infer *rq)
{
    slim_tensor outs[2] = {rq->inputs[0], {.dtype = SLIM_F32, .ndim = 2, .dims = {rq->batch, 10}}};
    slim_err err;
    if (slim_tensor_alloc(&outs[1], &err) != SLIM_OK)
        return;
    for (int64_t i = 0; i < rq->batch * 10; i++)
        ((float *)outs[1].data)[i] = (float)(i % 7) - 3.0f;
    uint8_t *out = NULL;
    size_t len = 0;
    if (slim_server_grpc_infer_encode(rq, m, outs, 2, &out, &len, &err) == SLIM_OK)
        free(out);
    slim_tensor_release(&outs[1]);
}

/* The in-place unpack (grpc_wire.c) against protobuf-c's own: the same
 * verdict, and the same message (packed again, byte for byte). */
static void check_unpack(const uint8_t *data, size_t size)
{
    bool in_place;
    Inference__ModelInferRequest *a = slim_server_grpc_infer_unpack(data, size, &in_place);
    Inference__ModelInferRequest *b = inference__model_infer_request__unpack(NULL, size, data);
    if (!a != !b)
        abort(); /* one way took a message the other refused */
    if (a) {
        size_t na = inference__model_infer_request__get_packed_size(a);
        size_t nb = inference__model_infer_request__get_packed_size(b);
        uint8_t *pa = malloc(na ? na : 1), *pb = malloc(nb ? nb : 1);
        if (pa && pb) {
            if (na != nb || inference__model_infer_request__pack(a, pa) != na ||
                inference__model_infer_request__pack(b, pb) != nb || memcmp(pa, pb, na) != 0)
                abort(); /* the two ways read different messages */
        }
        free(pa);
        free(pb);
    }
    slim_server_grpc_infer_unpacked_free(a, in_place);
    if (b)
        inference__model_infer_request__free_unpacked(b, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    if (size < 1)
        return 0;
    check_unpack(data + 1, size - 1);
    const slim_server_model *m = model_for(data[0] & 4 ? 2 : data[0] & 1);
    slim_server_infer rq;
    memset(&rq, 0, sizeof(rq));
    slim_err err;
    if (slim_server_grpc_infer_decode(data + 1, size - 1, m, &rq, &err) == SLIM_OK) {
        if (m == model_for(2))
            encode_bytes_model(m, &rq);
        slim_server_infer_free(&rq);
    }
    return 0;
}
