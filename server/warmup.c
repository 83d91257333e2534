/*
 * warmup.c - Triton's model_warmup (warmup.h): checking the samples a
 * config declares, and running them after a load.
 *
 * The samples run straight on the model (slim_model_run) on the loading
 * thread, not through the batcher: they must finish before the model is
 * READY, they are not requests (statistics and nv_inference_* do not count
 * them, as in Triton), and they allocate through the model like a request
 * does, so its memory account and limit apply. The caller's cancel token
 * bounds them by --load-timeout and stops them at shutdown.
 */
#include "cancel.h"
#include "clock.h"
#include "codec.h"
#include "config.h"
#include "file.h"
#include "log.h"
#include "repository.h"
#include "warmup.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SAMPLES 64      /* warmup samples in one config */
#define MAX_INPUTS 64       /* inputs of one sample */
#define MAX_COUNT 1000      /* runs of one sample */

typedef enum { DATA_NONE, DATA_ZERO, DATA_RANDOM, DATA_FILE } data_kind;

typedef struct wu_input {
    const char *name;
    slim_dtype dtype;
    int ndim;
    int64_t dims[SLIM_MAX_DIMS];
    data_kind kind;
    const char *file;
} wu_input;

typedef struct wu_sample {
    const char *name;
    int64_t batch_size;     /* 0: not given */
    int64_t count;          /* 0: not given (once) */
    wu_input inputs[MAX_INPUTS];
    int n_inputs;
} wu_sample;

/* An unsigned integer from a number or a string holding one (protobuf's
 * JSON writes 64-bit fields as strings). */
static bool read_uint(const cJSON *v, int64_t max, int64_t *out)
{
    double d;
    if (cJSON_IsNumber(v)) {
        d = v->valuedouble;
    } else if (cJSON_IsString(v) && v->valuestring[0]) {
        char *end = NULL;
        d = strtod(v->valuestring, &end);
        if (!end || *end)
            return false;
    } else {
        return false;
    }
    /* written so that NaN fails too */
    if (!(d >= 0 && d <= (double)max && d == (double)(int64_t)d))
        return false;
    *out = (int64_t)d;
    return true;
}

static slim_status parse_input(const cJSON *in, const char *at, wu_input *out, slim_err *err)
{
    memset(out, 0, sizeof(*out));
    out->name = in->string;
    if (!cJSON_IsObject(in))
        return slim_errf(err, SLIM_EINVAL, "%s: expected an object", at);
    for (const cJSON *f = in->child; f; f = f->next) {
        const char *k = f->string;
        data_kind kind = DATA_NONE;
        if (strcmp(k, "data_type") == 0) {
            if (!cJSON_IsString(f))
                return slim_errf(err, SLIM_EINVAL, "%s: data_type: expected a string such as "
                                 "\"TYPE_FP32\"", at);
            /* strings have no zero, random or raw-file form here */
            if (strcmp(f->valuestring, "TYPE_STRING") == 0)
                return slim_errf(err, SLIM_EINVAL, "%s: data_type TYPE_STRING is not supported "
                                 "in model_warmup", at);
            out->dtype = slim_server_dtype_from_triton(f->valuestring);
            if (out->dtype == SLIM_DTYPE_UNDEFINED)
                return slim_errf(err, SLIM_EINVAL, "%s: data_type %s is not a type warmup "
                                 "can make data for", at, f->valuestring);
        } else if (strcmp(k, "dims") == 0) {
            if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > SLIM_MAX_DIMS - 1)
                return slim_errf(err, SLIM_EINVAL, "%s: dims: expected a list of at most %d "
                                 "sizes", at, SLIM_MAX_DIMS - 1);
            for (const cJSON *d = f->child; d; d = d->next)
                if (!read_uint(d, (int64_t)1 << 30, &out->dims[out->ndim++]))
                    return slim_errf(err, SLIM_EINVAL, "%s: dims: expected sizes from 0 to "
                                     "2^30 (warmup data has a fixed shape; no -1)", at);
        } else if (strcmp(k, "zero_data") == 0 || strcmp(k, "random_data") == 0) {
            if (!cJSON_IsBool(f))
                return slim_errf(err, SLIM_EINVAL, "%s: %s: expected true or false", at, k);
            kind = !cJSON_IsTrue(f) ? DATA_NONE : k[0] == 'z' ? DATA_ZERO : DATA_RANDOM;
        } else if (strcmp(k, "input_data_file") == 0) {
            /* a plain name in the warmup/ folder: nothing that leads out */
            if (!cJSON_IsString(f) || !f->valuestring[0] || strchr(f->valuestring, '/') ||
                strcmp(f->valuestring, ".") == 0 || strcmp(f->valuestring, "..") == 0 ||
                strlen(f->valuestring) > NAME_MAX)
                return slim_errf(err, SLIM_EINVAL, "%s: input_data_file: expected the name of "
                                 "a file in the model folder's warmup/ folder (no '/')", at);
            out->file = f->valuestring;
            kind = DATA_FILE;
        } else {
            return slim_errf(err, SLIM_EINVAL, "%s: unknown field \"%s\" (data_type, dims, "
                             "zero_data, random_data, input_data_file)", at, k);
        }
        if (kind != DATA_NONE && out->kind != DATA_NONE)
            return slim_errf(err, SLIM_EINVAL, "%s: give one of zero_data, random_data and "
                             "input_data_file, not several", at);
        if (kind != DATA_NONE)
            out->kind = kind;
    }
    if (out->dtype == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "%s: data_type is missing", at);
    if (out->kind == DATA_NONE)
        return slim_errf(err, SLIM_EINVAL, "%s: give one of zero_data: true, random_data: "
                         "true or input_data_file", at);
    return SLIM_OK;
}

/* Sample i of the list; at names it for messages. */
static slim_status parse_sample(const cJSON *w, int i, wu_sample *out, char *at, size_t cap,
                                slim_err *err)
{
    memset(out, 0, sizeof(*out));
    snprintf(at, cap, "\"model_warmup\"[%d]", i);
    if (!cJSON_IsObject(w))
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected an object", at);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(w, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: \"name\": expected a non-empty "
                         "string", at);
    out->name = name->valuestring;
    snprintf(at, cap, "\"model_warmup\"[%d] (\"%.64s\")", i, out->name);
    const cJSON *inputs = NULL;
    for (const cJSON *f = w->child; f; f = f->next) {
        if (strcmp(f->string, "name") == 0)
            continue;
        if (strcmp(f->string, "batch_size") == 0 || strcmp(f->string, "count") == 0) {
            bool batch = f->string[0] == 'b';
            int64_t max = batch ? (int64_t)1 << 30 : MAX_COUNT;
            if (!read_uint(f, max, batch ? &out->batch_size : &out->count))
                return slim_errf(err, SLIM_EINVAL, "config.json: %s: %s: expected an integer "
                                 "from 0 to %lld", at, f->string, (long long)max);
        } else if (strcmp(f->string, "inputs") == 0) {
            inputs = f;
        } else {
            return slim_errf(err, SLIM_EINVAL, "config.json: %s: unknown field \"%s\" (name, "
                             "batch_size, inputs, count)", at, f->string);
        }
    }
    if (!cJSON_IsObject(inputs) || !inputs->child)
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: \"inputs\": expected an object "
                         "from input names to {data_type, dims, zero_data | random_data | "
                         "input_data_file}", at);
    for (const cJSON *in = inputs->child; in; in = in->next) {
        if (out->n_inputs == MAX_INPUTS)
            return slim_errf(err, SLIM_EINVAL, "config.json: %s: more than %d inputs", at,
                             MAX_INPUTS);
        for (int k = 0; k < out->n_inputs; k++)
            if (strcmp(out->inputs[k].name, in->string) == 0)
                return slim_errf(err, SLIM_EINVAL, "config.json: %s: input \"%s\" is given "
                                 "twice", at, in->string);
        char where[512];
        snprintf(where, sizeof(where), "config.json: %s: input \"%.64s\"", at, in->string);
        slim_status s = parse_input(in, where, &out->inputs[out->n_inputs++], err);
        if (s != SLIM_OK)
            return s;
    }
    return SLIM_OK;
}

slim_status slim__config_warmup(const cJSON *v, slim_err *err)
{
    if (!cJSON_IsArray(v))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"model_warmup\": expected a list of "
                         "{name, batch_size, inputs, count}");
    if (cJSON_GetArraySize(v) > MAX_SAMPLES)
        return slim_errf(err, SLIM_EINVAL, "config.json: \"model_warmup\": more than %d "
                         "samples", MAX_SAMPLES);
    wu_sample *s = malloc(sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status st = SLIM_OK;
    int i = 0;
    for (const cJSON *w = v->child; w && st == SLIM_OK; w = w->next, i++) {
        char at[160];
        st = parse_sample(w, i, s, at, sizeof(at), err);
    }
    free(s);
    return st;
}

/* ---- running ------------------------------------------------------------ */

/* xorshift64: fixed seed, so a warmup runs the same data every load */
static uint64_t next_random(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* One sample's bytes of input_data_file, read from model_dir/warmup only:
 * the resolved path (symbolic links followed) must stay in that folder. */
static slim_status read_file(const char *model_dir, const wu_input *in, size_t need,
                             const char *at, char **data, slim_err *err)
{
    char dir[PATH_MAX + 16], path[PATH_MAX * 2], real_dir[PATH_MAX], real[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/warmup", model_dir);
    snprintf(path, sizeof(path), "%s/%s", dir, in->file);
    if (!realpath(dir, real_dir) || !realpath(path, real))
        return slim_errf(err, SLIM_ENOTFOUND, "%s: input \"%s\": input_data_file \"%s\": "
                         "no such file in the model's warmup/ folder", at, in->name, in->file);
    size_t n = strlen(real_dir);
    if (strncmp(real, real_dir, n) != 0 || real[n] != '/')
        return slim_errf(err, SLIM_EINVAL, "%s: input \"%s\": input_data_file \"%s\" leads out "
                         "of the model's warmup/ folder", at, in->name, in->file);
    struct stat st;
    char shape[128];
    if (stat(real, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size != need)
        return slim_errf(err, SLIM_EINVAL, "%s: input \"%s\": input_data_file \"%s\" holds %lld "
                         "bytes but one sample (%s %s) needs %zu", at, in->name, in->file,
                         (long long)st.st_size, slim_server_dtype_triton(in->dtype),
                         slim_shape_str(in->ndim, in->dims, shape, sizeof(shape)), need);
    size_t len = 0;
    slim_status s = slim_file_read_all(real, "warmup input_data_file", data, &len, err);
    if (s == SLIM_OK && len != need) { /* changed since the stat */
        free(*data);
        *data = NULL;
        s = slim_errf(err, SLIM_EINVAL, "%s: input \"%s\": input_data_file \"%s\" holds %zu "
                      "bytes but one sample needs %zu", at, in->name, in->file, len, need);
    }
    return s;
}

/* Fills t (rows copies of one sample) as in asks. */
static slim_status fill(const wu_input *in, const char *model_dir, int64_t rows, const char *at,
                        slim_tensor *t, slim_err *err)
{
    size_t nbytes = slim_tensor_nbytes(t);
    if (in->kind == DATA_ZERO) {
        if (nbytes)
            memset(t->data, 0, nbytes);
        return SLIM_OK;
    }
    if (in->kind == DATA_RANDOM) {
        uint64_t x = 0x9e3779b97f4a7c15ull;
        int64_t n = slim_tensor_numel(t);
        for (int64_t i = 0; i < n; i++) {
            uint64_t r = next_random(&x);
            if (t->dtype == SLIM_BOOL)
                slim_store_i64(t->dtype, t->data, i, (int64_t)(r & 1));
            else if (slim_dtype_is_float(t->dtype))
                slim_store_f64(t->dtype, t->data, i, (double)(r >> 11) / 9007199254740992.0);
            else /* small values: valid indices and sizes more often than not */
                slim_store_i64(t->dtype, t->data, i, (int64_t)(r % 8));
        }
        return SLIM_OK;
    }
    size_t one = rows ? nbytes / (size_t)rows : 0;
    char *data = NULL;
    slim_status s = read_file(model_dir, in, one, at, &data, err);
    for (int64_t r = 0; s == SLIM_OK && r < rows; r++)
        memcpy((char *)t->data + (size_t)r * one, data, one);
    free(data);
    return s;
}

/* The sample's inputs as tensors for m, checked against its config. */
static slim_status make_inputs(const slim_server_model *m, const wu_sample *w,
                               const char *model_dir, const char *at, slim_tensor *xs,
                               const char **names, slim_err *err)
{
    const slim_server_config *cfg = &m->cfg;
    int64_t rows = w->batch_size ? w->batch_size : 1;
    if (cfg->max_batch_size == 0 && w->batch_size > 1)
        return slim_errf(err, SLIM_EINVAL, "%s: batch_size is %lld but the model's "
                         "max_batch_size is 0 (it does not batch)", at, (long long)w->batch_size);
    if (cfg->max_batch_size > 0 && rows > cfg->max_batch_size)
        return slim_errf(err, SLIM_EINVAL, "%s: batch_size %lld is over the model's "
                         "max_batch_size %d", at, (long long)rows, cfg->max_batch_size);
    for (int k = 0; k < w->n_inputs; k++) {
        bool found = false;
        for (int i = 0; i < cfg->n_inputs && !found; i++)
            found = strcmp(cfg->inputs[i].name, w->inputs[k].name) == 0;
        if (!found)
            return slim_errf(err, SLIM_EINVAL, "%s: \"%s\" is not an input of the model", at,
                             w->inputs[k].name);
    }
    int batch = cfg->max_batch_size > 0;
    for (int i = 0; i < cfg->n_inputs; i++) {
        const slim_server_io *io = &cfg->inputs[i];
        const wu_input *in = NULL;
        for (int k = 0; k < w->n_inputs && !in; k++)
            if (strcmp(w->inputs[k].name, io->name) == 0)
                in = &w->inputs[k];
        if (!in)
            return slim_errf(err, SLIM_EINVAL, "%s: gives no data for the model's input \"%s\"",
                             at, io->name);
        if (in->dtype != io->dtype)
            return slim_errf(err, SLIM_EINVAL, "%s: input \"%s\" is %s but the model takes %s",
                             at, in->name, slim_server_dtype_triton(in->dtype),
                             slim_server_dtype_triton(io->dtype) ? slim_server_dtype_triton(io->dtype)
                                                                 : slim_dtype_name(io->dtype));
        bool fits = io->ndim < 0 || io->ndim == in->ndim;
        for (int d = 0; fits && io->ndim >= 0 && d < in->ndim; d++)
            fits = io->dims[d] < 0 || io->dims[d] == in->dims[d];
        if (!fits) {
            char want[128], got[128];
            return slim_errf(err, SLIM_EINVAL, "%s: input \"%s\" has dims %s but the model "
                             "takes %s%s", at, in->name, slim_shape_str(in->ndim, in->dims, got,
                                                                        sizeof(got)),
                             slim_shape_str(io->ndim, io->dims, want, sizeof(want)),
                             batch ? " (not counting the batch dimension)" : "");
        }
        slim_tensor *t = &xs[i];
        t->dtype = in->dtype;
        t->ndim = in->ndim + batch;
        t->dims[0] = rows;
        memcpy(t->dims + batch, in->dims, sizeof(int64_t) * (size_t)in->ndim);
        names[i] = io->name;
        slim_status s = slim_tensor_alloc(t, err);
        if (s == SLIM_OK)
            s = fill(in, model_dir, rows, at, t, err);
        if (s != SLIM_OK)
            return s;
    }
    return SLIM_OK;
}

static slim_status run_sample(const slim_server_model *m, const wu_sample *w,
                              const char *model_dir, const char *at, slim_err *err)
{
    int n = m->cfg.n_inputs;
    slim_tensor *xs = calloc((size_t)(n ? n : 1), sizeof(*xs));
    const char **names = calloc((size_t)(n ? n : 1), sizeof(*names));
    slim_status s = xs && names ? SLIM_OK : slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (s == SLIM_OK)
        s = make_inputs(m, w, model_dir, at, xs, names, err);
    int64_t count = w->count ? w->count : 1, t0 = slim_server_now_ns();
    for (int64_t r = 0; s == SLIM_OK && r < count; r++) {
        slim_tensor *outs = NULL;
        int n_outs = 0;
        s = slim_model_run(m->model, n, names, xs, &outs, &n_outs, err);
        slim_tensors_free(outs, n_outs);
        if (s != SLIM_OK)
            slim_err_prefix(err, "%s: ", at);
    }
    if (s == SLIM_OK)
        slim_server_log(SLIM_LOG_INFO, NULL, "model \"%s\" version %lld: warmup \"%s\" ran "
                        "%lld time(s) in %.2f ms", m->name, (long long)m->version, w->name,
                        (long long)count, (double)(slim_server_now_ns() - t0) / 1e6);
    for (int i = 0; xs && i < n; i++)
        slim_tensor_release(&xs[i]);
    free(xs);
    free(names);
    return s;
}

slim_status slim_server_warmup_run(const slim_server_model *m, const char *model_dir,
                                   slim_err *err)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(m->cfg.reserved, "model_warmup");
    wu_sample *w = list ? malloc(sizeof(*w)) : NULL;
    if (list && !w)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status s = SLIM_OK;
    int i = 0;
    for (const cJSON *e = list ? list->child : NULL; e && s == SLIM_OK; e = e->next, i++) {
        char at[160];
        if ((s = parse_sample(e, i, w, at, sizeof(at), err)) == SLIM_OK) {
            snprintf(at, sizeof(at), "warmup \"%.64s\"", w->name);
            s = run_sample(m, w, model_dir, at, err);
        }
    }
    free(w);
    return s;
}

/* Runs m's model_warmup (warmup.c) under a token of its own with the
 * load's deadline, listed with the loads so that shutdown stops it. */
slim_status slim_server_warmup(slim_server_repo *repo, const slim_server_model *m,
                               int64_t deadline_ns, slim_err *err)
{
    if (!cJSON_GetObjectItemCaseSensitive(m->cfg.reserved, "model_warmup"))
        return SLIM_OK;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/%s", repo->root, m->name);
    slim_cancel tok;
    slim_cancel_init(&tok, deadline_ns);
    tok.timeout_ms = (int64_t)repo->load_timeout_s * 1000;
    int slot = slim_server_repo_track_load(repo, &tok);
    slim_cancel *prev = slim_cancel_enter(&tok);
    slim_status s = slim_server_warmup_run(m, dir, err);
    slim_cancel_enter(prev);
    slim_server_repo_untrack_load(repo, slot);
    if (s == SLIM_ETIMEDOUT)
        slim_errf(err, s, "model_warmup did not finish within --load-timeout %d s (the load "
                  "and the warmup together)", repo->load_timeout_s);
    else if (s != SLIM_OK)
        slim_err_prefix(err, "model_warmup failed: ");
    return s;
}
