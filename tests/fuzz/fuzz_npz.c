/*
 * fuzz_npz.c - the .npz reader (quant/npz.h: pruning's mask files) from raw
 * bytes: the zip directory, each member's header, stored and deflated
 * members and their CRCs. slim_npz_open takes a path, so the bytes go to
 * an in-memory file (memfd) named through /proc/self/fd.
 */
#define _GNU_SOURCE
#include "fuzz.h"
#include "npz.h"
#include "slim_init.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    slim_init();
    int fd = memfd_create("fuzz.npz", 0);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        slim_npz *z = NULL;
        slim_err err;
        if (slim_npz_open(path, &z, &err) == SLIM_OK) {
            for (int i = 0; i < slim_npz_count(z); i++) {
                slim_tensor t;
                (void)slim_npz_name(z, i);
                if (slim_npz_load(z, i, (size_t)1 << 24, &t, &err) == SLIM_OK)
                    slim_tensor_release(&t);
            }
            slim_npz_close(z);
        }
    }
    close(fd);
    return 0;
}
