/*
 * file.h - opening the files a model is made of (the model, its external
 * data, config.json, masks) so that no file can hang a load.
 *
 *     int fd;
 *     size_t size;
 *     if (slim_file_open_regular(path, "external data", &fd, &size, &err) != SLIM_OK)
 *         return err.status;   // "external data \"m/zero\" is a FIFO, not a regular file"
 *     ...pread/mmap fd...
 *     close(fd);
 *
 * A model folder is untrusted: a FIFO, a character device or a socket named
 * model.onnx or as external data blocks a plain open() or read() forever,
 * and a load that never returns takes the server with it. These open with
 * O_NONBLOCK (an open of a FIFO returns at once), then require a regular
 * file, then clear O_NONBLOCK again.
 */
#ifndef SLIM_FILE_H
#define SLIM_FILE_H

#include "slim.h"

/* Opens path for reading and checks that it is a regular file; *fd (the
 * caller closes it) and *size on success. `what` names the file in
 * messages ("model", "external data"). ENOTFOUND when it does not exist,
 * EIO when it cannot be opened or is not a regular file. */
slim_status slim_file_open_regular(const char *path, const char *what, int *fd, size_t *size,
                                   slim_err *err);

/* The whole regular file at path, NUL-terminated (*data is malloc'ed, the
 * caller frees it; *size excludes the NUL). Errors as above, plus ENOMEM. */
slim_status slim_file_read_all(const char *path, const char *what, char **data, size_t *size,
                               slim_err *err);

#endif
