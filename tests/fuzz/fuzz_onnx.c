/* fuzz_onnx.c - the ONNX loader and what it feeds, from raw bytes. */
#include "fuzz.h"
#include "slim_init.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    slim_fuzz_onnx(data, size);
    return 0;
}
