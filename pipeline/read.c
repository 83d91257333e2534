/* read.c - the read stage: a model file as a graph. The format is told by
 * its magic number, not the file's name. */
#include "pipeline.h"
#include "file.h"
#include "model.h"
#include "slim_format.h"

#include <unistd.h>

bool slim_model_file_is_slim(const char *path)
{
    unsigned char head[SLIM_FORMAT_MAGIC_LEN];
    int fd;
    size_t size;
    /* Not a regular file: the loader that opens it next says so. */
    if (slim_file_open_regular(path, "model", &fd, &size, NULL) != SLIM_OK)
        return false;
    ssize_t n = read(fd, head, sizeof(head));
    close(fd);
    return n > 0 && slim_format_sniff(head, (size_t)n);
}

slim_status slim_pipeline_read(const char *path, slim_graph **out, slim_err *err)
{
    *out = NULL;
    return slim_model_file_is_slim(path) ? slim_format_load_file(path, out, err)
                                         : slim_onnx_load_file(path, out, err);
}
