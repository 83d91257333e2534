/*
 * alloc_trim.h - what else a give-back may return once nothing is held.
 *
 * slim_memory_give_back (alloc.h) returns the allocators' free segments and
 * glibc's free heap pages. Some memory belongs to libraries a backend uses
 * (oneDNN keeps every primitive it compiled in a cache of its own, with its
 * JIT code): only the backend can let it go, and it should only when no
 * model could want those primitives again soon. A backend registers a hook
 * here; the give-back calls every hook when no allocator holds a live block
 * (the last model was freed, nothing is running), before trimming the heaps.
 *
 * runtime/ knows no backend, so the hook is registered from below, as the
 * device registry is.
 */
#ifndef SLIM_ALLOC_TRIM_H
#define SLIM_ALLOC_TRIM_H

#include <stdbool.h>
#include <stddef.h>

typedef void (*slim_idle_hook)(void);

/* Registers fn (once per distinct fn; thread-safe). Up to
 * SLIM_IDLE_HOOKS hooks; false when they are all taken. */
#define SLIM_IDLE_HOOKS 8
bool slim_memory_on_idle(slim_idle_hook fn);

/* Asks the kernel to reclaim the resident pages of every file mapping of
 * the shared object whose code holds addr (its text, read-only data):
 * clean pages of a library that nothing runs while no model is held,
 * which otherwise stay resident for the life of the process (oneDNN's
 * 2.7 MiB once any product ran through it). They are read back from the
 * file (or the page cache) on their next use. Linux MADV_PAGEOUT; the
 * kernel honours it for a file the process owns or may write (root, a
 * container's own libraries) and skips pages another process maps too.
 * For an idle hook; returns the bytes of the mappings advised (0 when
 * none or unsupported). */
size_t slim_memory_page_out_object(const void *addr);

/* Whether no started device's allocator holds a live block. */
bool slim_memory_idle(void);

#endif
