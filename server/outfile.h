/*
 * outfile.h - files a client may ask the server to write (the logging
 * extension's log_file, the trace extension's trace_file): only inside a
 * directory the operator chose (--log-dir, --trace-dir), never elsewhere.
 *
 *     char full[1024], why[300];
 *     int fd = slim_server_outfile_open(dir, "trace.jsonl", "trace_file", full, sizeof(full),
 *                                       why, sizeof(why));
 *     if (fd < 0) ... 400 with why
 *
 * A name is a plain file name ("trace.jsonl"), or an absolute path whose
 * directory is exactly the chosen one ("/var/trace/trace.jsonl"). No "/"
 * inside, no "." or "..", no control characters; the file is opened with
 * O_NOFOLLOW relative to the directory, so neither a path nor a symbolic
 * link leads out of it, and it must be a regular file (a FIFO would block
 * the writer).
 */
#ifndef SLIM_SERVER_OUTFILE_H
#define SLIM_SERVER_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>

/* Checks name against dir (NULL dir: every name is refused, as no
 * directory was chosen); full gets "dir/base". what names the setting in
 * the message. Nothing is opened. */
bool slim_server_outfile_check(const char *dir, const char *name, const char *what,
                               char *full, size_t full_cap, char *err, size_t err_cap);
/* The same, then opens (creating it 0644) for appending: an fd, or -1 with
 * err saying why. */
int slim_server_outfile_open(const char *dir, const char *name, const char *what,
                             char *full, size_t full_cap, char *err, size_t err_cap);

#endif
