/*
 * grpc_rpcs.c - the RPCs of inference.GRPCInferenceService: each reads its
 * request message, does what the HTTP endpoint of the same name does
 * (routes.c, stats.c) through the same components, and answers with the
 * gRPC status Triton gives for that outcome (slim__grpc_code).
 *
 * The API key (--api-key) is read from the call's "authorization"
 * ("Bearer KEY") or "x-api-key" metadata, by auth.c's rule; ServerLive and
 * ServerReady are exempt, like the HTTP health checks.
 */
#include "auth.h"
#include "clock.h"
#include "config.h"
#include "grpc_impl.h"
#include "inference.pb-c.h"
#include "log.h"
#include "repository.h"
#include "routes.h"
#include "server.h"
#include "version.h"

#include <grpc/support/time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MODELS 4096

/* ---- helpers ------------------------------------------------------------ */

/* "" is the latest ready version (-1); otherwise canonical digits. */
static bool parse_version(const char *s, int64_t *out)
{
    *out = -1;
    if (!s || !*s)
        return true;
    if (strspn(s, "0123456789") != strlen(s) || strlen(s) > 18 || (s[0] == '0' && s[1]))
        return false;
    *out = strtoll(s, NULL, 10);
    return true;
}

/* The model, or NULL with the call answered (NOT_FOUND, UNAVAILABLE...). */
static slim_server_model *acquire(slim__grpc_call *c, const char *name, const char *version)
{
    int64_t v;
    if (!parse_version(version, &v)) {
        slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "model version \"%s\" is not a number "
                        "(digits, no leading zero)", version);
        return NULL;
    }
    int status = 404;
    char msg[1200];
    slim_server_model *m = slim_server_repo_acquire(&c->g->srv->repo, name ? name : "", v,
                                                    &status, msg, sizeof(msg));
    if (!m)
        slim__grpc_fail(c, slim__grpc_code(status), "%s", msg);
    return m;
}

/* Unpacks the request message as `desc`; NULL with the call answered. */
static ProtobufCMessage *unpack(slim__grpc_call *c, const ProtobufCMessageDescriptor *desc)
{
    size_t len;
    uint8_t *data = slim__grpc_read(c, &len);
    ProtobufCMessage *msg = data ? protobuf_c_message_unpack(desc, NULL, len, data) : NULL;
    free(data);
    if (!msg)
        slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "the request is not a valid %s message",
                        desc->short_name);
    return msg;
}

static const char *md_value(const grpc_metadata_array *md, const char *key, char *buf, size_t cap)
{
    for (size_t i = 0; i < md->count; i++)
        if (grpc_slice_str_cmp(md->metadata[i].key, key) == 0) {
            size_t n = GRPC_SLICE_LENGTH(md->metadata[i].value);
            if (n >= cap)
                n = cap - 1;
            memcpy(buf, GRPC_SLICE_START_PTR(md->metadata[i].value), n);
            buf[n] = 0;
            return buf;
        }
    return NULL;
}

/* ---- health and metadata ------------------------------------------------ */

static void rpc_server_live(slim__grpc_call *c)
{
    Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
    r.live = true;
    slim__grpc_reply(c, &r.base);
}

static void rpc_server_ready(slim__grpc_call *c)
{
    Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
    r.ready = !atomic_load(&c->g->srv->stopping);
    slim__grpc_reply(c, &r.base);
}

static void rpc_model_ready(slim__grpc_call *c)
{
    Inference__ModelReadyRequest *q = (void *)unpack(c, &inference__model_ready_request__descriptor);
    if (!q)
        return;
    int64_t v;
    Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
    if (parse_version(q->version, &v)) {
        int status;
        char msg[1200];
        slim_server_model *m = slim_server_repo_acquire(&c->g->srv->repo, q->name, v, &status,
                                                        msg, sizeof(msg));
        r.ready = m != NULL;
        slim_server_model_release(m);
    }
    inference__model_ready_request__free_unpacked(q, NULL);
    slim__grpc_reply(c, &r.base);
}

static void rpc_server_metadata(slim__grpc_call *c)
{
    static char *extensions[] = {"binary_tensor_data", "model_repository",
                                 "model_configuration", "parameters", "statistics"};
    Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
    r.name = SLIM_SERVER_NAME;
    r.version = SLIM_SERVER_VERSION;
    r.n_extensions = 5;
    r.extensions = extensions;
    slim__grpc_reply(c, &r.base);
}

static void fill_tensor_meta(Inference__ModelMetadataResponse__TensorMetadata *t, int64_t *shape,
                             const slim_server_io *io, bool batch)
{
    inference__model_metadata_response__tensor_metadata__init(t);
    const char *type = slim_server_dtype_kserve(io->dtype);
    t->name = io->name;
    t->datatype = (char *)(type ? type : "INVALID");
    size_t n = 0;
    if (batch || io->ndim < 0)
        shape[n++] = -1;
    for (int d = 0; d < io->ndim; d++)
        shape[n++] = io->dims[d];
    t->n_shape = n;
    t->shape = shape;
}

static void rpc_model_metadata(slim__grpc_call *c)
{
    Inference__ModelMetadataRequest *q = (void *)unpack(c, &inference__model_metadata_request__descriptor);
    if (!q)
        return;
    slim_server_model *m = acquire(c, q->name, q->version);
    inference__model_metadata_request__free_unpacked(q, NULL);
    if (!m)
        return;
    int64_t versions[256];
    int nv = slim_server_repo_ready_versions(&c->g->srv->repo, m->name, versions, 256);
    char vbuf[256][24], *vptr[256];
    for (int i = 0; i < nv; i++) {
        snprintf(vbuf[i], sizeof(vbuf[i]), "%lld", (long long)versions[i]);
        vptr[i] = vbuf[i];
    }
    int ni = m->cfg.n_inputs, no = m->cfg.n_outputs;
    Inference__ModelMetadataResponse__TensorMetadata *ts = calloc((size_t)(ni + no + 1), sizeof(*ts));
    Inference__ModelMetadataResponse__TensorMetadata **tp = calloc((size_t)(ni + no + 1), sizeof(*tp));
    int64_t *shapes = calloc((size_t)(ni + no + 1) * (SLIM_MAX_DIMS + 1), sizeof(*shapes));
    if (!ts || !tp || !shapes) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
    } else {
        bool batch = m->cfg.max_batch_size > 0;
        for (int i = 0; i < ni + no; i++) {
            const slim_server_io *io = i < ni ? &m->cfg.inputs[i] : &m->cfg.outputs[i - ni];
            fill_tensor_meta(&ts[i], shapes + (size_t)i * (SLIM_MAX_DIMS + 1), io, batch);
            tp[i] = &ts[i];
        }
        Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
        r.name = m->name;
        r.n_versions = (size_t)nv;
        r.versions = vptr;
        r.platform = m->cfg.platform ? m->cfg.platform : "";
        r.n_inputs = (size_t)ni;
        r.inputs = tp;
        r.n_outputs = (size_t)no;
        r.outputs = tp + ni;
        slim__grpc_reply(c, &r.base);
    }
    free(ts);
    free(tp);
    free(shapes);
    slim_server_model_release(m);
}

/* ---- model configuration ------------------------------------------------ */

static int data_type_enum(slim_dtype t)
{
    const char *name = slim_server_dtype_triton(t);
    const ProtobufCEnumValue *v =
        name ? protobuf_c_enum_descriptor_get_value_by_name(&inference__data_type__descriptor, name)
             : NULL;
    return v ? v->value : INFERENCE__DATA_TYPE__TYPE_INVALID;
}

static void rpc_model_config(slim__grpc_call *c)
{
    Inference__ModelConfigRequest *q = (void *)unpack(c, &inference__model_config_request__descriptor);
    if (!q)
        return;
    slim_server_model *m = acquire(c, q->name, q->version);
    inference__model_config_request__free_unpacked(q, NULL);
    if (!m)
        return;
    const slim_server_config *cfg = &m->cfg;
    int ni = cfg->n_inputs, no = cfg->n_outputs;
    Inference__ModelInput *ins = calloc((size_t)ni + 1, sizeof(*ins));
    Inference__ModelInput **inp = calloc((size_t)ni + 1, sizeof(*inp));
    Inference__ModelOutput *outs = calloc((size_t)no + 1, sizeof(*outs));
    Inference__ModelOutput **outp = calloc((size_t)no + 1, sizeof(*outp));
    if (!ins || !inp || !outs || !outp) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
        goto done;
    }
    for (int i = 0; i < ni; i++) {
        inference__model_input__init(&ins[i]);
        ins[i].name = cfg->inputs[i].name;
        ins[i].data_type = data_type_enum(cfg->inputs[i].dtype);
        ins[i].n_dims = cfg->inputs[i].ndim > 0 ? (size_t)cfg->inputs[i].ndim : 0;
        ins[i].dims = (int64_t *)cfg->inputs[i].dims;
        inp[i] = &ins[i];
    }
    for (int i = 0; i < no; i++) {
        inference__model_output__init(&outs[i]);
        outs[i].name = cfg->outputs[i].name;
        outs[i].data_type = data_type_enum(cfg->outputs[i].dtype);
        outs[i].n_dims = cfg->outputs[i].ndim > 0 ? (size_t)cfg->outputs[i].ndim : 0;
        outs[i].dims = (int64_t *)cfg->outputs[i].dims;
        outp[i] = &outs[i];
    }
    Inference__ModelInstanceGroup group = INFERENCE__MODEL_INSTANCE_GROUP__INIT, *groups = &group;
    group.count = cfg->instance_count;
    group.kind = cfg->device && strncmp(cfg->device, "cuda", 4) == 0
                     ? INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU
                     : INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
    Inference__ModelDynamicBatching db = INFERENCE__MODEL_DYNAMIC_BATCHING__INIT;
    db.n_preferred_batch_size = (size_t)cfg->batching.n_preferred;
    db.preferred_batch_size = (int32_t *)cfg->batching.preferred;
    db.max_queue_delay_microseconds = (uint64_t)cfg->batching.max_queue_delay_us;
    Inference__ModelConfig mc = INFERENCE__MODEL_CONFIG__INIT;
    mc.name = cfg->name ? cfg->name : m->name;
    mc.platform = cfg->platform ? cfg->platform : "";
    mc.max_batch_size = cfg->max_batch_size;
    mc.n_input = (size_t)ni;
    mc.input = inp;
    mc.n_output = (size_t)no;
    mc.output = outp;
    mc.n_instance_group = 1;
    mc.instance_group = &groups;
    mc.dynamic_batching = cfg->batching.enabled ? &db : NULL;
    Inference__ModelConfigResponse r = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
    r.config = &mc;
    slim__grpc_reply(c, &r.base);
done:
    free(ins);
    free(inp);
    free(outs);
    free(outp);
    slim_server_model_release(m);
}

/* ---- statistics (stats.c's figures) ------------------------------------- */

typedef struct stat_bufs {
    Inference__ModelStatistics st;
    Inference__InferStatistics is;
    Inference__StatisticDuration d[6];
    Inference__InferBatchStatistics *bs, **bsp;
    Inference__StatisticDuration *bd;
    char version[24];
} stat_bufs;

static void duration(Inference__StatisticDuration *d, uint64_t count, uint64_t ns)
{
    inference__statistic_duration__init(d);
    d->count = count;
    d->ns = ns;
}

static void fill_stat(stat_bufs *b, const slim_server_model *m)
{
    slim_server_stats *s = m->stats;
    inference__model_statistics__init(&b->st);
    inference__infer_statistics__init(&b->is);
    snprintf(b->version, sizeof(b->version), "%lld", (long long)m->version);
    uint64_t success = atomic_load(&s->success), fail = 0;
    for (int r = 0; r < SLIM_SERVER_FAIL_COUNT; r++)
        fail += atomic_load(&s->failure[r]);
    b->st.name = m->name;
    b->st.version = b->version;
    b->st.last_inference = atomic_load(&s->last_inference_ms);
    b->st.inference_count = atomic_load(&s->inference_count);
    b->st.execution_count = atomic_load(&s->execution_count);
    duration(&b->d[0], success, 1000 * atomic_load(&s->success_us));
    duration(&b->d[1], fail, 1000 * atomic_load(&s->fail_us));
    duration(&b->d[2], success, 1000 * atomic_load(&s->queue_us));
    duration(&b->d[3], success, atomic_load(&s->input_ns));
    duration(&b->d[4], success, atomic_load(&s->infer_ns));
    duration(&b->d[5], success, atomic_load(&s->output_ns));
    b->is.success = &b->d[0];
    b->is.fail = &b->d[1];
    b->is.queue = &b->d[2];
    b->is.compute_input = &b->d[3];
    b->is.compute_infer = &b->d[4];
    b->is.compute_output = &b->d[5];
    b->st.inference_stats = &b->is;
    slim_server_batch_stat *t = atomic_load(&s->batch_stats);
    if (!t)
        return;
    b->bs = calloc(SLIM_SERVER_BATCH_STAT_SLOTS, sizeof(*b->bs));
    b->bsp = calloc(SLIM_SERVER_BATCH_STAT_SLOTS, sizeof(*b->bsp));
    b->bd = calloc(SLIM_SERVER_BATCH_STAT_SLOTS * 3, sizeof(*b->bd));
    if (!b->bs || !b->bsp || !b->bd)
        return;
    size_t n = 0;
    for (int i = 0; i < SLIM_SERVER_BATCH_STAT_SLOTS; i++) {
        uint64_t count = atomic_load(&t[i].count);
        if (!count)
            continue;
        Inference__InferBatchStatistics *x = &b->bs[n];
        inference__infer_batch_statistics__init(x);
        x->batch_size = (uint64_t)atomic_load(&t[i].size);
        duration(&b->bd[3 * n], count, atomic_load(&t[i].input_ns));
        duration(&b->bd[3 * n + 1], count, atomic_load(&t[i].infer_ns));
        duration(&b->bd[3 * n + 2], count, atomic_load(&t[i].output_ns));
        x->compute_input = &b->bd[3 * n];
        x->compute_infer = &b->bd[3 * n + 1];
        x->compute_output = &b->bd[3 * n + 2];
        b->bsp[n++] = x;
    }
    /* By batch size, as the HTTP answer is. */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && b->bsp[j - 1]->batch_size > b->bsp[j]->batch_size; j--) {
            Inference__InferBatchStatistics *tmp = b->bsp[j];
            b->bsp[j] = b->bsp[j - 1];
            b->bsp[j - 1] = tmp;
        }
    b->st.n_batch_stats = n;
    b->st.batch_stats = b->bsp;
}

static void rpc_model_statistics(slim__grpc_call *c)
{
    Inference__ModelStatisticsRequest *q =
        (void *)unpack(c, &inference__model_statistics_request__descriptor);
    if (!q)
        return;
    slim_server_repo *repo = &c->g->srv->repo;
    slim_server_model **ms = NULL;
    int n = 0;
    int64_t v;
    const char *name = q->name && q->name[0] ? q->name : NULL;
    if (!parse_version(q->version, &v)) {
        slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "model version \"%s\" is not a number",
                        q->version);
        goto out;
    }
    if (!(ms = calloc(MAX_MODELS, sizeof(*ms)))) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
        goto out;
    }
    if (name && v >= 0) {
        if (!(ms[0] = acquire(c, name, q->version)))
            goto out;
        n = 1;
    } else {
        n = slim_server_repo_ready_models(repo, name, ms, MAX_MODELS);
        if (name && n == 0) {
            slim_server_model *m = acquire(c, name, "");
            if (m) {
                slim_server_model_release(m);
                slim__grpc_fail(c, GRPC_STATUS_UNAVAILABLE, "model '%s' changed while its "
                                "statistics were read; ask again", name);
            }
            goto out;
        }
    }
    stat_bufs *bufs = calloc((size_t)n + 1, sizeof(*bufs));
    Inference__ModelStatistics **sp = calloc((size_t)n + 1, sizeof(*sp));
    if (!bufs || !sp) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
    } else {
        for (int i = 0; i < n; i++) {
            fill_stat(&bufs[i], ms[i]);
            sp[i] = &bufs[i].st;
        }
        Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
        r.n_model_stats = (size_t)n;
        r.model_stats = sp;
        slim__grpc_reply(c, &r.base);
        for (int i = 0; i < n; i++) {
            free(bufs[i].bs);
            free(bufs[i].bsp);
            free(bufs[i].bd);
        }
    }
    free(bufs);
    free(sp);
out:
    for (int i = 0; i < n; i++)
        slim_server_model_release(ms[i]);
    free(ms);
    inference__model_statistics_request__free_unpacked(q, NULL);
}

/* ---- repository --------------------------------------------------------- */

/* From the repository's own index, so both protocols list the same states. */
static void rpc_repository_index(slim__grpc_call *c)
{
    Inference__RepositoryIndexRequest *q =
        (void *)unpack(c, &inference__repository_index_request__descriptor);
    if (!q)
        return;
    cJSON *arr = slim_server_repo_index(&c->g->srv->repo, q->ready);
    inference__repository_index_request__free_unpacked(q, NULL);
    int n = cJSON_GetArraySize(arr);
    Inference__RepositoryIndexResponse__ModelIndex *mi = calloc((size_t)n + 1, sizeof(*mi));
    Inference__RepositoryIndexResponse__ModelIndex **mp = calloc((size_t)n + 1, sizeof(*mp));
    if (!arr || !mi || !mp) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
    } else {
        int i = 0;
        for (cJSON *e = arr->child; e && i < n; e = e->next, i++) {
            inference__repository_index_response__model_index__init(&mi[i]);
            const char *keys[4] = {"name", "version", "state", "reason"};
            char **dst[4] = {&mi[i].name, &mi[i].version, &mi[i].state, &mi[i].reason};
            for (int k = 0; k < 4; k++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, keys[k]);
                *dst[k] = cJSON_IsString(v) ? v->valuestring : "";
            }
            mp[i] = &mi[i];
        }
        Inference__RepositoryIndexResponse r = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
        r.n_models = (size_t)i;
        r.models = mp;
        slim__grpc_reply(c, &r.base);
    }
    free(mi);
    free(mp);
    cJSON_Delete(arr);
}

typedef struct repo_job {
    slim__grpc_call *c;
    char *name;
    bool load;
} repo_job;

static void *repo_job_main(void *arg)
{
    repo_job *job = arg;
    slim_server *srv = job->c->g->srv;
    slim_err err = {0};
    int status = 400;
    slim_status s = job->load ? slim_server_repo_load(&srv->repo, job->name, &status, &err)
                              : slim_server_repo_unload(&srv->repo, job->name, &status, &err);
    if (s != SLIM_OK) {
        slim__grpc_fail(job->c, slim__grpc_code(status), "%s", err.msg);
    } else if (job->load) {
        Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
        slim__grpc_reply(job->c, &r.base);
    } else {
        Inference__RepositoryModelUnloadResponse r = INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
        slim__grpc_reply(job->c, &r.base);
    }
    free(job->name);
    free(job);
    atomic_fetch_sub(&srv->repo_ops, 1);
    return NULL;
}

/* Load and unload run on a thread of their own (as routes.c's do): a load
 * takes as long as the model does, and must not hold a queue thread. */
static void start_repo_job(slim__grpc_call *c, const char *name, bool load)
{
    slim_server *srv = c->g->srv;
    repo_job *job = calloc(1, sizeof(*job));
    if (!job || !(job->name = strdup(name))) {
        free(job);
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
        return;
    }
    job->c = c;
    job->load = load;
    if (atomic_fetch_add(&srv->repo_ops, 1) >= SLIM_SERVER_MAX_REPO_OPS) {
        atomic_fetch_sub(&srv->repo_ops, 1);
        free(job->name);
        free(job);
        slim__grpc_fail(c, GRPC_STATUS_UNAVAILABLE, "%d repository loads and unloads are under "
                        "way; try again", SLIM_SERVER_MAX_REPO_OPS);
        return;
    }
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, repo_job_main, job) != 0) {
        free(job->name);
        free(job);
        atomic_fetch_sub(&srv->repo_ops, 1);
        slim__grpc_fail(c, GRPC_STATUS_UNAVAILABLE, "no thread for the %s of \"%s\"; try again",
                        load ? "load" : "unload", name);
    }
    pthread_attr_destroy(&attr);
}

/* tritonclient's unload always sends unload_dependents (slimserve has no
 * ensembles: nothing depends on a model); config and file overrides are
 * refused, as over HTTP. */
static bool params_ok(slim__grpc_call *c, const char *name, bool load,
                      Inference__RepositoryModelLoadRequest__ParametersEntry **ps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!ps[i]->key || strcmp(ps[i]->key, "unload_dependents") != 0) {
            slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s \"%s\": parameter \"%s\" "
                            "(config or file overrides) is unsupported", load ? "load" : "unload",
                            name, ps[i]->key ? ps[i]->key : "");
            return false;
        }
    return true;
}

static void rpc_load(slim__grpc_call *c)
{
    Inference__RepositoryModelLoadRequest *q =
        (void *)unpack(c, &inference__repository_model_load_request__descriptor);
    if (!q)
        return;
    if (params_ok(c, q->model_name, true, q->parameters, q->n_parameters))
        start_repo_job(c, q->model_name, true);
    inference__repository_model_load_request__free_unpacked(q, NULL);
}

static void rpc_unload(slim__grpc_call *c)
{
    Inference__RepositoryModelUnloadRequest *q =
        (void *)unpack(c, &inference__repository_model_unload_request__descriptor);
    if (!q)
        return;
    if (params_ok(c, q->model_name, false,
                  (Inference__RepositoryModelLoadRequest__ParametersEntry **)q->parameters,
                  q->n_parameters))
        start_repo_job(c, q->model_name, false);
    inference__repository_model_unload_request__free_unpacked(q, NULL);
}

/* ---- logging ------------------------------------------------------------ */

/* Shows the settings; changing them is not supported (the log format and
 * access lines are fixed at start), so a request that sets any is refused. */
static void rpc_log_settings(slim__grpc_call *c)
{
    Inference__LogSettingsRequest *q = (void *)unpack(c, &inference__log_settings_request__descriptor);
    if (!q)
        return;
    size_t asked = q->n_settings;
    inference__log_settings_request__free_unpacked(q, NULL);
    if (asked) {
        slim__grpc_fail(c, GRPC_STATUS_UNIMPLEMENTED, "log settings are fixed at start "
                        "(--log-format, --access-log); they cannot be changed over gRPC");
        return;
    }
    Inference__LogSettingsResponse__SettingValue vals[2] = {
        INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__INIT,
        INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__INIT};
    Inference__LogSettingsResponse__SettingsEntry ents[2] = {
        INFERENCE__LOG_SETTINGS_RESPONSE__SETTINGS_ENTRY__INIT,
        INFERENCE__LOG_SETTINGS_RESPONSE__SETTINGS_ENTRY__INIT};
    Inference__LogSettingsResponse__SettingsEntry *ep[2] = {&ents[0], &ents[1]};
    vals[0].parameter_choice_case = INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM;
    vals[0].string_param = slim_server_log_format() == SLIM_LOG_TEXT ? "default" : "json";
    vals[1].parameter_choice_case = INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM;
    vals[1].bool_param = slim_server_log_access_enabled();
    ents[0].key = "log_format";
    ents[0].value = &vals[0];
    ents[1].key = "log_info";
    ents[1].value = &vals[1];
    Inference__LogSettingsResponse r = INFERENCE__LOG_SETTINGS_RESPONSE__INIT;
    r.n_settings = 2;
    r.settings = ep;
    slim__grpc_reply(c, &r.base);
}

/* ---- inference ---------------------------------------------------------- */

static int runtime_error_status(slim_status s)
{
    switch (s) {
    case SLIM_EINVAL: case SLIM_ESHAPE: case SLIM_ETYPE: case SLIM_ENEEDVALUE:
    case SLIM_EUNSUPPORTED:
        return 400;
    case SLIM_EOOM:
        return 507;
    default:
        return 500;
    }
}

/* On the instance thread once the task is done: the answer is packed and
 * handed to gRPC here (neither blocks), the statistics counted as
 * routes.c's slim_server_infer_finish counts them. */
static void infer_done(slim_server_task *t)
{
    slim__grpc_call *c = t->user;
    slim_server_model *m = t->model;
    if (t->status != SLIM_OK) {
        slim_server_count_failure(m, t->failure, c->t_begin);
        int http = t->http_status ? t->http_status : runtime_error_status(t->status);
        slim__grpc_fail(c, slim__grpc_code(http), "%s", t->err.msg);
        goto done;
    }
    slim_err err = {0};
    int64_t t_encode = slim_server_now_ns();
    uint8_t *bytes;
    size_t len;
    if (slim_server_grpc_infer_encode(&c->rq, m, t->outputs, t->n_outputs, &bytes, &len, &err) !=
        SLIM_OK) {
        slim_server_count_failure(m, SLIM_SERVER_FAIL_OTHER, c->t_begin);
        slim__grpc_fail(c, err.status == SLIM_EOOM ? GRPC_STATUS_RESOURCE_EXHAUSTED
                                                   : GRPC_STATUS_INTERNAL, "%s", err.msg);
        goto done;
    }
    slim_server_stats *st = m->stats;
    atomic_fetch_add(&st->success, 1);
    atomic_fetch_add(&st->inference_count, (uint64_t)c->rq.batch);
    atomic_fetch_add(&st->queue_us, (uint64_t)(t->t_started - t->t_queued));
    atomic_fetch_add(&st->compute_us, (uint64_t)(t->t_done - t->t_started));
    uint64_t us = (uint64_t)(slim_server_now_us() - c->t_begin);
    atomic_fetch_add(&st->request_us, us);
    atomic_fetch_add(&st->success_us, us);
    atomic_fetch_add(&st->input_ns, (uint64_t)(c->decode_ns + t->input_ns));
    atomic_fetch_add(&st->infer_ns, (uint64_t)t->infer_ns);
    atomic_fetch_add(&st->output_ns, (uint64_t)(t->output_ns + slim_server_now_ns() - t_encode));
    slim_server_stats_touch(st);
    slim__grpc_reply_packed(c, bytes, len);
done:
    /* c may be freed by now (its answer sent, on a queue thread). */
    return;
}

/* Microseconds left before the call's deadline; 0: none (or past, then 1). */
static int64_t call_deadline_us(const slim__grpc_call *c)
{
    gpr_timespec d = gpr_convert_clock_type(c->details.deadline, GPR_CLOCK_REALTIME);
    if (gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_REALTIME)) == 0)
        return 0;
    gpr_timespec left = gpr_time_sub(d, gpr_now(GPR_CLOCK_REALTIME));
    int64_t us = (int64_t)left.tv_sec * 1000000 + left.tv_nsec / 1000;
    return us > 0 ? us : 1;
}

static void rpc_model_infer(slim__grpc_call *c)
{
    slim_server *srv = c->g->srv;
    c->t_begin = slim_server_now_us();
    /* One slice (a copy only when the message came in pieces), unpacked once. */
    grpc_slice bytes = slim__grpc_read_slice(c);
    Inference__ModelInferRequest *msg = inference__model_infer_request__unpack(
        NULL, GRPC_SLICE_LENGTH(bytes), GRPC_SLICE_START_PTR(bytes));
    grpc_slice_unref(bytes);
    if (!msg) {
        slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "the request is not a valid "
                        "ModelInferRequest message");
        return;
    }
    slim_server_model *m = acquire(c, msg->model_name, msg->model_version);
    if (!m) {
        inference__model_infer_request__free_unpacked(msg, NULL);
        return;
    }
    slim_err err = {0};
    int64_t t0 = slim_server_now_ns();
    slim_status s = slim_server_grpc_infer_decode_msg(msg, m, &c->rq, &err);
    c->decode_ns = slim_server_now_ns() - t0;
    inference__model_infer_request__free_unpacked(msg, NULL);
    if (s != SLIM_OK) {
        bool oom = s == SLIM_EOOM || s == SLIM_ENOMEM;
        slim_server_count_failure(m, oom ? SLIM_SERVER_FAIL_MEMORY : SLIM_SERVER_FAIL_BAD_REQUEST,
                                  c->t_begin);
        slim__grpc_fail(c, oom ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT,
                        "%s", err.msg);
        slim_server_model_release(m);
        return;
    }
    c->rq.max_reply_bytes = srv->opts.max_response_bytes;
    slim_server_task *t = &c->task;
    t->model = m;
    t->rq = &c->rq;
    t->done = infer_done;
    t->user = c;
    /* The deadline as routes.c sets it: the earlier of the request's
     * "timeout" parameter and the model's request_timeout_ms. */
    int64_t mine = c->rq.timeout_us, model = m->cfg.request_timeout_ms * 1000;
    /* The call's own deadline (tritonclient's client_timeout) counts as a
     * "timeout" parameter would: past it the client has stopped waiting. */
    int64_t left = call_deadline_us(c);
    if (left > 0 && (mine <= 0 || left < mine))
        mine = left;
    t->timeout_from_request = mine > 0 && (model <= 0 || mine <= model);
    t->run_timeout_us = t->timeout_from_request ? mine : model > 0 ? model : 0;
    t->run_deadline = t->run_timeout_us ? c->t_begin + t->run_timeout_us : 0;
    int64_t queue_timeout = m->cfg.batching.allow_timeout_override ? c->rq.timeout_us : 0;
    if (!slim_server_batcher_submit(m->batcher, t, queue_timeout, &err)) {
        slim_server_count_failure(m, SLIM_SERVER_FAIL_REJECTED, c->t_begin);
        slim__grpc_fail(c, GRPC_STATUS_UNAVAILABLE, "%s", err.msg);
    }
}

/* ---- dispatch ----------------------------------------------------------- */

typedef struct rpc {
    const char *name;
    void (*fn)(slim__grpc_call *c);
    bool open;                      /* needs no API key */
} rpc;

static const rpc RPCS[] = {
    {"ServerLive", rpc_server_live, true},
    {"ServerReady", rpc_server_ready, true},
    {"ModelReady", rpc_model_ready, false},
    {"ServerMetadata", rpc_server_metadata, false},
    {"ModelMetadata", rpc_model_metadata, false},
    {"ModelInfer", rpc_model_infer, false},
    {"ModelConfig", rpc_model_config, false},
    {"ModelStatistics", rpc_model_statistics, false},
    {"RepositoryIndex", rpc_repository_index, false},
    {"RepositoryModelLoad", rpc_load, false},
    {"RepositoryModelUnload", rpc_unload, false},
    {"LogSettings", rpc_log_settings, false},
};

void slim__grpc_dispatch(slim__grpc_call *c)
{
    static const char prefix[] = "/inference.GRPCInferenceService/";
    char method[256];
    size_t n = GRPC_SLICE_LENGTH(c->details.method);
    if (n >= sizeof(method))
        n = sizeof(method) - 1;
    memcpy(method, GRPC_SLICE_START_PTR(c->details.method), n);
    method[n] = 0;
    const rpc *r = NULL;
    if (strncmp(method, prefix, sizeof(prefix) - 1) == 0)
        for (size_t i = 0; i < sizeof(RPCS) / sizeof(RPCS[0]) && !r; i++)
            if (strcmp(method + sizeof(prefix) - 1, RPCS[i].name) == 0)
                r = &RPCS[i];
    if (!r) {
        slim__grpc_fail(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method %s", method);
        return;
    }
    slim_server *srv = c->g->srv;
    if (atomic_load(&srv->stopping) && r->fn != rpc_server_live && r->fn != rpc_server_ready) {
        slim__grpc_fail(c, GRPC_STATUS_UNAVAILABLE, "the server is shutting down");
        return;
    }
    const char *key = srv->opts.api_key;
    if (key && !r->open) {
        char auth[512], xkey[512];
        const char *a = md_value(&c->md, "authorization", auth, sizeof(auth));
        const char *x = md_value(&c->md, "x-api-key", xkey, sizeof(xkey));
        if (!slim_server_auth_key_ok(key, a, x)) {
            atomic_fetch_add(&srv->unauthorized, 1);
            slim__grpc_fail(c, GRPC_STATUS_UNAUTHENTICATED, "%s",
                            (a || x) ? "the API key given is not valid"
                                     : "this method needs an API key: send metadata "
                                       "\"authorization: Bearer KEY\" or \"x-api-key: KEY\"");
            return;
        }
    }
    r->fn(c);
}
