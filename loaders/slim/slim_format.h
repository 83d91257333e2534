/*
 * slim_format.h - the native .slim model file: written once from any model
 * slimserve loads, then mapped read-only, the weights used in place.
 *
 * docs/format.md specifies it byte by byte. In short: a 64-byte header
 * (magic, version, where the metadata and the data sections are, CRC-32s),
 * the metadata (a string table, the graph, a tensor table), then the tensor
 * data on a page boundary, each tensor on a 64-byte boundary. Every integer
 * is little-endian and fixed-width; the reader checks every count, id,
 * offset and size against the file before using it.
 */
#ifndef SLIM_FORMAT_H
#define SLIM_FORMAT_H

#include "graph.h"

/* 1: no subgraphs; 2 adds GRAPH attributes; 3 adds value types (sequence,
 * optional) in the value table; 4 lets the data section start on any
 * SLIM_FORMAT_TENSOR_ALIGN boundary (small models: a page of padding was
 * 2.5% of the example transformer's int8 file); 5 adds string tensors
 * (SLIM_ENCODING_STRINGS). Writers write the lowest version a model needs. */
#define SLIM_FORMAT_VERSION 5
/* A value's type byte (version 3): slim_kind in bits 0-1, and bit 2 set for
 * an optional that holds a sequence. */
#define SLIM_FORMAT_TYPE_SEQ_IN_OPTIONAL 4
#define SLIM_FORMAT_MAGIC "\x89SLIM\r\n\x1a"
#define SLIM_FORMAT_MAGIC_LEN 8
#define SLIM_FORMAT_HEADER_SIZE 64
#define SLIM_FORMAT_DATA_ALIGN 4096   /* the data section (versions 1-3; 4: when big) */
/* Data sections under this many bytes are written on a 64-byte boundary
 * (version 4): page alignment only pays where the pages of weights that a
 * pass replaces are given back, which is noise below a megabyte. */
#define SLIM_FORMAT_SMALL_DATA 1048576
#define SLIM_FORMAT_TENSOR_ALIGN 64   /* each tensor within it */
#define SLIM_FORMAT_NONE 0xFFFFFFFFu  /* "no string", "no tensor" */

/* Tensor encodings. v1 defines only RAW (row-major, the dtype's own
 * little-endian bytes); the compression passes add theirs with a version.
 * STRINGS (version 5, string tensors only): numel u32 lengths, then the
 * elements' bytes one after another. */
enum { SLIM_ENCODING_RAW = 0, SLIM_ENCODING_STRINGS = 1 };

/* Bytes a tensor takes in the data section (strings: lengths and bytes). */
static inline uint64_t slim_format_stored_bytes(const slim_tensor *t)
{
    if (t->dtype != SLIM_STRING)
        return slim_tensor_nbytes(t);
    return 4 * (uint64_t)slim_tensor_numel(t) + slim_tensor_string_total(t);
}

/* Whether the first bytes of a file are a .slim header's. */
bool slim_format_sniff(const void *head, size_t n);

/* Maps path read-only and builds a graph whose initializers point into the
 * mapping (each holds a reference; the last one unmaps). The mapped bytes
 * of the data section are charged to the calling thread's memory account
 * while mapped. */
slim_status slim_format_load_file(const char *path, slim_graph **out, slim_err *err);

/* Bytes of a mapping (owner, a weight's buffer) that no longer count: a
 * pass replaced a weight by a packed copy and gave its pages back
 * (slim_pass_drop_replaced). Does nothing for any other buffer. */
void slim_format_uncharge(struct slim_buffer *owner, size_t bytes);

/* The same from bytes in memory; owner (may be NULL) is referenced by each
 * initializer, and without one the bytes must outlive the graph. */
slim_status slim_format_load_buffer(const void *data, size_t size, struct slim_buffer *owner,
                                    slim_graph **out, slim_err *err);

/* Writes g (weights on the host) to path, through a temporary file renamed
 * into place, so a reader never sees half a file. */
slim_status slim_format_write(const slim_graph *g, const char *path, slim_err *err);
/* The same, calling progress(tensor bytes written, all tensor bytes, user)
 * as the data goes out (every 8 MiB at most). */
typedef void (*slim_format_progress_fn)(uint64_t done, uint64_t total, void *user);
slim_status slim_format_write_progress(const slim_graph *g, const char *path,
                                       slim_format_progress_fn progress, void *user,
                                       slim_err *err);

/* Compares a written graph with the one read back from the file: nodes,
 * values and every weight's dtype and bytes. 0 when they match; otherwise
 * nonzero with the first difference in why. */
int slim_format_verify(const slim_graph *written, const slim_graph *read, char *why, size_t cap);

/* CRC-32 (IEEE 802.3, as zlib's crc32), continuing from crc (0 to start). */
uint32_t slim_format_crc32(uint32_t crc, const void *data, size_t n);

#endif
