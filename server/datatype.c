/*
 * datatype.c - the tensor datatypes' names on the wire: KServe's ("FP32")
 * in inference requests and answers, Triton's ("TYPE_FP32") in config.json.
 * One table, so the two can never disagree on which types exist.
 */
#include "codec.h"

#include <string.h>

static const struct {
    slim_dtype dtype;
    const char *kserve;
    const char *triton;
} dtype_names[] = {
    {SLIM_BOOL, "BOOL", "TYPE_BOOL"},     {SLIM_U8, "UINT8", "TYPE_UINT8"},
    {SLIM_U16, "UINT16", "TYPE_UINT16"},  {SLIM_U32, "UINT32", "TYPE_UINT32"},
    {SLIM_U64, "UINT64", "TYPE_UINT64"},  {SLIM_I8, "INT8", "TYPE_INT8"},
    {SLIM_I16, "INT16", "TYPE_INT16"},    {SLIM_I32, "INT32", "TYPE_INT32"},
    {SLIM_I64, "INT64", "TYPE_INT64"},    {SLIM_F16, "FP16", "TYPE_FP16"},
    {SLIM_F32, "FP32", "TYPE_FP32"},      {SLIM_F64, "FP64", "TYPE_FP64"},
    {SLIM_BF16, "BF16", "TYPE_BF16"},     {SLIM_STRING, "BYTES", "TYPE_STRING"},
};
#define N_DTYPE_NAMES (sizeof(dtype_names) / sizeof(dtype_names[0]))

const char *slim_server_dtype_kserve(slim_dtype t)
{
    for (size_t i = 0; i < N_DTYPE_NAMES; i++)
        if (dtype_names[i].dtype == t)
            return dtype_names[i].kserve;
    return NULL;
}

const char *slim_server_dtype_triton(slim_dtype t)
{
    for (size_t i = 0; i < N_DTYPE_NAMES; i++)
        if (dtype_names[i].dtype == t)
            return dtype_names[i].triton;
    return NULL;
}

slim_dtype slim_server_dtype_from_kserve(const char *s)
{
    for (size_t i = 0; s && i < N_DTYPE_NAMES; i++)
        if (strcmp(dtype_names[i].kserve, s) == 0)
            return dtype_names[i].dtype;
    return SLIM_DTYPE_UNDEFINED;
}

slim_dtype slim_server_dtype_from_triton(const char *s)
{
    for (size_t i = 0; s && i < N_DTYPE_NAMES; i++)
        if (strcmp(dtype_names[i].triton, s) == 0)
            return dtype_names[i].dtype;
    return SLIM_DTYPE_UNDEFINED;
}
