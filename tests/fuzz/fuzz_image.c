/*
 * fuzz_image.c - ImageDecoder's codecs (kernels/cpu/image_codecs.h) from
 * raw bytes: the format told by the magic number, the header probed, and
 * the pixels decoded into a buffer of exactly the probed size. An encoded
 * image can arrive in a request, so every codec is untrusted-input code;
 * the libraries' own error paths (setjmp handlers) run here too.
 */
#include "fuzz.h"
#include "image_codecs.h"
#include "slim_init.h"

#include <stdlib.h>

/* Small enough that a forged header cannot make the fuzzer allocate much. */
#define FUZZ_IMAGE_MAX_PIXELS ((int64_t)1 << 22)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    static int limited;
    if (!limited) {
        slim_img_set_max_pixels(FUZZ_IMAGE_MAX_PIXELS);
        limited = 1;
    }
    const slim_img_codec *c = slim_img_codec_for(slim_img_detect(data, size));
    uint32_t w = 0, h = 0;
    slim_err err;
    if (!c || c->probe(data, size, &w, &h, &err) != SLIM_OK)
        return 0;
    if ((int64_t)w * h > FUZZ_IMAGE_MAX_PIXELS)
        abort(); /* probe must have refused it */
    uint8_t *rgb = malloc((size_t)w * h * 3 + 1);
    if (rgb && c->decode(data, size, w, h, rgb, &err) == SLIM_OK) {
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < (size_t)w * h * 3; i++)
            sink ^= rgb[i];
        (void)sink;
    }
    free(rgb);
    return 0;
}
