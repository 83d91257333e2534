/*
 * run_output.c - `slim run`'s outputs: a one-line preview of each, and with
 * --output-dir each written as NAME.npy (names made safe as file names);
 * sequences and optionals element by element. cmd_run.c calls these.
 */
#include "run_output.h"

#include "container.h"
#include "npy.h"
#include "slim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PREVIEW_VALUES 6

/* ---- outputs -------------------------------------------------------------- */


/* A sequence output prints and writes each tensor as NAME_K (NAME_K.npy);
 * an optional its value, if any, as NAME, or an optional holding a
 * sequence as that sequence's. */
int slim__run_emit_container(int idx, const char *name, const slim_tensor *t,
                             const char *out_dir)
{
    int n = slim_container_len(t);
    printf("output %d \"%s\": %s of %d value(s)\n", idx, name, slim_kind_name(t->kind), n);
    for (int k = 0; k < n; k++) {
        const slim_tensor *e = slim_container_at(t, k);
        char sub[512];
        if (t->kind == SLIM_KIND_SEQUENCE)
            snprintf(sub, sizeof(sub), "%s_%d", name, k);
        else
            snprintf(sub, sizeof(sub), "%s", name);
        if (slim_is_container(e)) {
            if (slim__run_emit_container(idx, sub, e, out_dir))
                return 1;
            continue;
        }
        slim__run_print_output(idx, sub, e);
        if (out_dir && slim__run_write_output(out_dir, sub, e))
            return 1;
    }
    return 0;
}

void slim__run_print_output(int idx, const char *name, const slim_tensor *t)
{
    char shape[256];
    slim_shape_str(t->ndim, t->dims, shape, sizeof(shape));
    printf("output %d \"%s\": %s %s\n", idx, name, slim_dtype_name(t->dtype), shape);
    int64_t n = slim_tensor_numel(t);
    if (n == 0 || !t->data) {
        printf("    (empty)\n");
        return;
    }
    if (t->dtype == SLIM_STRING) {
        /* The first elements, quoted, each cut at 60 bytes. */
        printf("    [");
        for (int64_t i = 0; i < n && i < PREVIEW_VALUES; i++) {
            size_t len;
            const char *s = slim_tensor_string_get(t, i, &len);
            printf("%s\"%.*s%s\"", i ? ", " : "", (int)(len > 60 ? 60 : len), s ? s : "",
                   len > 60 ? "..." : "");
        }
        printf("%s]\n", n > PREVIEW_VALUES ? ", ..." : "");
        return;
    }
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    int64_t nans = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = slim_load_f64(t->dtype, t->data, i);
        if (isnan(v)) {
            nans++;
            continue;
        }
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
    }
    if (nans < n)
        printf("    min %.6g  max %.6g  mean %.6g", lo, hi, sum / (double)(n - nans));
    else
        printf("    all NaN");
    if (nans)
        printf("  (%lld NaN)", (long long)nans);
    printf("\n    [");
    for (int64_t i = 0; i < n && i < PREVIEW_VALUES; i++) {
        if (slim_dtype_is_float(t->dtype))
            printf("%s%.6g", i ? ", " : "", slim_load_f64(t->dtype, t->data, i));
        else
            printf("%s%lld", i ? ", " : "", (long long)slim_load_i64(t->dtype, t->data, i));
    }
    printf("%s]\n", n > PREVIEW_VALUES ? ", ..." : "");
}

/* Output names become file names: path separators and a leading dot (".."
 * would escape the directory) are replaced by '_'. */
static void output_file_name(const char *name, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = name; *p && n + 5 < cap; p++) {
        char c = *p;
        if (c == '/' || c == '\\' || (unsigned char)c < 0x20 || (n == 0 && c == '.'))
            c = '_';
        out[n++] = c;
    }
    if (n == 0)
        out[n++] = '_';
    memcpy(out + n, ".npy", 5);
}

int slim__run_make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) {
        fprintf(stderr, "slim run: output directory path too long\n");
        return 1;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "slim run: cannot create directory %s: %s\n", path, strerror(errno));
            return 1;
        }
        *p = saved;
        if (!saved)
            break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "slim run: %s is not a directory\n", dir);
        return 1;
    }
    return 0;
}

int slim__run_write_output(const char *dir, const char *name, const slim_tensor *t)
{
    char file[512], path[4096 + 512];
    output_file_name(name, file, sizeof(file));
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    slim_tensor tmp = *t;
    slim_tensor widened = {0};
    slim_err err;
    if (t->dtype == SLIM_BF16) {
        /* NumPy has no bfloat16: write the exact float32 values instead. */
        widened.dtype = SLIM_F32;
        widened.ndim = t->ndim;
        memcpy(widened.dims, t->dims, sizeof(t->dims));
        if (slim_tensor_alloc(&widened, &err) != SLIM_OK) {
            fprintf(stderr, "slim run: output \"%s\": %s\n", name, err.msg);
            return 1;
        }
        for (int64_t i = 0; i < slim_tensor_numel(t); i++)
            ((float *)widened.data)[i] = slim_bf16_to_f32(((const uint16_t *)t->data)[i]);
        tmp = widened;
        fprintf(stderr, "slim run: note: output \"%s\" is bfloat16, written as float32\n", name);
    }
    slim_status st = slim_npy_save(path, &tmp, &err);
    slim_tensor_release(&widened);
    if (st != SLIM_OK) {
        fprintf(stderr, "slim run: output \"%s\": %s\n", name, err.msg);
        return 1;
    }
    return 0;
}
