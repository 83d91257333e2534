/*
 * outfile.c - files written at a client's request, kept inside the
 * operator's directory (outfile.h).
 *
 * Why so strict: the logging and trace extensions let whoever holds the
 * API key name a file the server then appends to. Without a fence that is
 * a write to any path the server's user may write (its own binary, a
 * shell's rc file). Plain names resolved with openat() in the directory,
 * O_NOFOLLOW on the last component, make the fence hold without relying
 * on realpath() races.
 */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME_MAX_BYTES 255

/* dir without trailing slashes ("/" stays "/"): its length. */
static size_t dir_len(const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    return n;
}

/* The base name in `name` when it is allowed, else NULL with err set. */
static const char *base_of(const char *dir, const char *name, const char *what, char *err,
                           size_t err_cap)
{
    if (!dir) {
        snprintf(err, err_cap, "%s: the server was started without a directory for it "
                 "(%s), so no file may be named", what,
                 strcmp(what, "log_file") == 0 ? "--log-dir" : "--trace-dir");
        return NULL;
    }
    const char *base = name;
    if (name[0] == '/') {
        size_t n = dir_len(dir);
        size_t skip = strcmp(dir, "/") == 0 ? 1 : n + 1;
        if ((n > 1 && (strncmp(name, dir, n) != 0 || name[n] != '/')) ||
            strlen(name) <= skip) {
            snprintf(err, err_cap, "%s \"%.200s\" is outside the directory the server writes "
                     "to (%.200s)", what, name, dir);
            return NULL;
        }
        base = name + skip;
    }
    size_t len = strlen(base);
    if (len == 0 || len > NAME_MAX_BYTES || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        snprintf(err, err_cap, "%s \"%.200s\" is not a file name (1 to %d bytes, not \".\" "
                 "or \"..\")", what, name, NAME_MAX_BYTES);
        return NULL;
    }
    for (const char *p = base; *p; p++)
        if (*p == '/' || (unsigned char)*p < 0x20 || *p == 0x7f) {
            snprintf(err, err_cap, "%s \"%.200s\": a file directly in %.200s is expected (no "
                     "\"/\" or control characters in its name)", what, name, dir);
            return NULL;
        }
    return base;
}

bool slim_server_outfile_check(const char *dir, const char *name, const char *what,
                               char *full, size_t full_cap, char *err, size_t err_cap)
{
    const char *base = base_of(dir, name, what, err, err_cap);
    if (!base)
        return false;
    size_t n = dir_len(dir);
    int w = snprintf(full, full_cap, "%.*s%s%s", (int)n, dir, strcmp(dir, "/") ? "/" : "",
                     base);
    if (w < 0 || (size_t)w >= full_cap) {
        snprintf(err, err_cap, "%s: the path is too long", what);
        return false;
    }
    return true;
}

int slim_server_outfile_open(const char *dir, const char *name, const char *what,
                             char *full, size_t full_cap, char *err, size_t err_cap)
{
    if (!slim_server_outfile_check(dir, name, what, full, full_cap, err, err_cap))
        return -1;
    const char *base = strrchr(full, '/') + 1;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        snprintf(err, err_cap, "%s: cannot open the directory %.200s: %s", what, dir,
                 strerror(errno));
        return -1;
    }
    /* O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader. */
    int fd = openat(dfd, base, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC |
                    O_NOCTTY | O_NONBLOCK, 0644);
    int e = errno;
    close(dfd);
    if (fd < 0) {
        snprintf(err, err_cap, "%s \"%.200s\" cannot be opened: %s", what, name,
                 e == ELOOP ? "it is a symbolic link" : strerror(e));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, err_cap, "%s \"%.200s\" is not a regular file", what, name);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}
