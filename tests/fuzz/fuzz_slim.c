/*
 * fuzz_slim.c - the .slim reader from raw bytes, and what it feeds.
 *
 * The header and the metadata carry CRC-32s, so nearly every mutation would
 * stop at the checksum. The target makes them right again first (when the
 * header's metadata range fits the input), so the fuzzer reaches the parser
 * behind them; the checksum check itself is tested in test_format.
 */
#include "fuzz.h"
#include "graph.h"
#include "slim_format.h"
#include "slim_init.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    uint8_t *p = malloc(size ? size : 1);
    if (!p)
        return 0;
    memcpy(p, data, size);
    if (size >= SLIM_FORMAT_HEADER_SIZE) {
        uint64_t meta_off, meta_size;
        memcpy(&meta_off, p + 16, 8);
        memcpy(&meta_size, p + 24, 8);
        if (meta_off <= size && meta_size <= size - meta_off) {
            uint32_t c = slim_format_crc32(0, p + meta_off, meta_size);
            memcpy(p + 56, &c, 4);
        }
        uint32_t c = slim_format_crc32(0, p, 60);
        memcpy(p + 60, &c, 4);
    }
    slim_graph *g = NULL;
    slim_err err;
    /* The bytes outlive the graph: no owner. */
    if (slim_format_load_buffer(p, size, NULL, &g, &err) == SLIM_OK)
        slim_fuzz_run_graph(g, (uint32_t)size);
    free(p);
    return 0;
}
