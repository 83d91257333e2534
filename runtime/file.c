/*
 * file.c - opening a model's files without blocking (file.h).
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t m)
{
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a plain file";
}

slim_status slim_file_open_regular(const char *path, const char *what, int *fd, size_t *size,
                                   slim_err *err)
{
    *fd = -1;
    *size = 0;
    /* O_NONBLOCK: opening a FIFO for reading waits for a writer otherwise. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0)
        return slim_errf(err, errno == ENOENT ? SLIM_ENOTFOUND : SLIM_EIO,
                         "cannot open %s \"%s\": %s", what, path, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return slim_errf(err, SLIM_EIO, "cannot stat %s \"%s\": %s", what, path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return slim_errf(err, SLIM_EIO, "%s \"%s\" is %s, not a regular file", what, path,
                         file_kind(sb.st_mode));
    }
    /* Regular files ignore O_NONBLOCK, but whoever reads fd later should
     * not have to know that it was set. */
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0)
        fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    *size = (size_t)sb.st_size;
    return SLIM_OK;
}

slim_status slim_file_read_all(const char *path, const char *what, char **data, size_t *size,
                               slim_err *err)
{
    *data = NULL;
    *size = 0;
    int fd;
    size_t n;
    slim_status st = slim_file_open_regular(path, what, &fd, &n, err);
    if (st)
        return st;
    char *buf = n + 1 > n ? malloc(n + 1) : NULL;
    if (!buf) {
        close(fd);
        return slim_errf(err, SLIM_ENOMEM, "out of memory reading %s \"%s\" (%zu bytes)", what,
                         path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            return slim_errf(err, SLIM_EIO, "cannot read %s \"%s\": %s", what, path,
                             e ? strerror(e) : "it shrank while being read");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return SLIM_OK;
}
