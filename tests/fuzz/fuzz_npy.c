/* fuzz_npy.c - the .npy reader (slim run --input, tests) from raw bytes. */
#include "fuzz.h"
#include "npy.h"
#include "slim_init.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    slim_tensor t;
    slim_err err;
    if (slim_npy_parse(data, size, "fuzz.npy", &t, &err) == SLIM_OK) {
        /* Touch every byte: a tensor that claims more than it holds shows. */
        volatile uint8_t sink = 0;
        const uint8_t *p = t.data;
        for (size_t i = 0; i < slim_tensor_nbytes(&t); i++)
            sink ^= p[i];
        (void)sink;
        slim_tensor_release(&t);
    }
    return 0;
}
