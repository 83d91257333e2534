/*
 * npz.h - NumPy .npz files (np.savez, np.savez_compressed): a zip archive
 * of .npy members, stored or deflated. The pruning pass reads its mask
 * files with it.
 *
 *     slim_npz *z;
 *     if (slim_npz_open("masks.npz", &z, &err)) ...
 *     for (int i = 0; i < slim_npz_count(z); i++) {
 *         const char *name = slim_npz_name(z, i);       // "layer0.w" (no ".npy")
 *         slim_tensor t;
 *         slim_npz_load(z, i, limit, &t, &err);         // checks CRC and sizes
 *         ... slim_tensor_release(&t);
 *     }
 *     slim_npz_close(z);
 *
 * The file is untrusted: every offset and size is checked against the
 * file, members are inflated into exactly their declared size, and a
 * member larger than the caller's limit is refused before it is inflated.
 * Messages start with the file's path and name the member.
 */
#ifndef SLIM_QUANT_NPZ_H
#define SLIM_QUANT_NPZ_H

#include "slim.h"

typedef struct slim_npz slim_npz;

slim_status slim_npz_open(const char *path, slim_npz **out, slim_err *err);
int slim_npz_count(const slim_npz *z);
const char *slim_npz_name(const slim_npz *z, int i);
/* Member i as a tensor of its own (slim_tensor_release); its uncompressed
 * size must be at most max_bytes. */
slim_status slim_npz_load(slim_npz *z, int i, size_t max_bytes, slim_tensor *out, slim_err *err);
void slim_npz_close(slim_npz *z);

#endif
