/*
 * grpc_rpcs.c - the RPCs of inference.GRPCInferenceService (the per-model
 * ones, metadata, config and statistics, are in grpc_models.c): each reads its
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
#include "codec.h"
#include "config.h"
#include "grpc_impl.h"
#include "inference.pb-c.h"
#include "log.h"
#include "repository.h"
#include "routes.h"
#include "server.h"
#include "trace.h"
#include "shm.h"
#include "version.h"

#include <grpc/support/time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

/* "" is the latest ready version (-1); otherwise canonical digits. */
bool slim__grpc_parse_version(const char *s, int64_t *out)
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
slim_server_model *slim__grpc_acquire(slim__grpc_call *c, const char *name,
                                      const char *version)
{
    int64_t v;
    if (!slim__grpc_parse_version(version, &v)) {
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
ProtobufCMessage *slim__grpc_unpack(slim__grpc_call *c,
                                    const ProtobufCMessageDescriptor *desc)
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

/* ---- health ------------------------------------------------------------- */

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
    Inference__ModelReadyRequest *q = (void *)slim__grpc_unpack(c, &inference__model_ready_request__descriptor);
    if (!q)
        return;
    int64_t v;
    Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
    if (slim__grpc_parse_version(q->version, &v)) {
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
    char *extensions[16] = {"binary_tensor_data", "model_repository",
                            "model_configuration", "parameters", "statistics",
                            "logging", "trace", "classification"};
    Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
    r.name = SLIM_SERVER_NAME;
    r.version = SLIM_SERVER_VERSION;
    r.n_extensions = 8;
    r.n_extensions += (size_t)slim_server_shm_extension_names((const char **)extensions + r.n_extensions);
    r.extensions = extensions;
    slim__grpc_reply(c, &r.base);
}

/* ---- repository --------------------------------------------------------- */

/* From the repository's own index, so both protocols list the same states. */
static void rpc_repository_index(slim__grpc_call *c)
{
    Inference__RepositoryIndexRequest *q =
        (void *)slim__grpc_unpack(c, &inference__repository_index_request__descriptor);
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
    char *cfg_json;     /* load's "config" parameter as config.json text, or NULL */
    bool load;
} repo_job;

static void *repo_job_main(void *arg)
{
    repo_job *job = arg;
    slim_server *srv = job->c->g->srv;
    slim_err err = {0};
    int status = 400;
    slim_status s = job->load ? slim_server_repo_load_config(&srv->repo, job->name, job->cfg_json,
                                                             &status, &err)
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
    free(job->cfg_json);
    free(job->name);
    free(job);
    atomic_fetch_sub(&srv->repo_ops, 1);
    return NULL;
}

/* Load and unload run on a thread of their own (as routes.c's do): a load
 * takes as long as the model does, and must not hold a queue thread. */
static void start_repo_job(slim__grpc_call *c, const char *name, bool load, char *cfg_json)
{
    slim_server *srv = c->g->srv;
    repo_job *job = calloc(1, sizeof(*job));
    if (!job || !(job->name = strdup(name))) {
        free(cfg_json);
        free(job);
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
        return;
    }
    job->c = c;
    job->load = load;
    job->cfg_json = cfg_json;
    if (atomic_fetch_add(&srv->repo_ops, 1) >= SLIM_SERVER_MAX_REPO_OPS) {
        atomic_fetch_sub(&srv->repo_ops, 1);
        free(job->cfg_json);
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
        free(job->cfg_json);
        free(job->name);
        free(job);
        atomic_fetch_sub(&srv->repo_ops, 1);
        slim__grpc_fail(c, GRPC_STATUS_UNAVAILABLE, "no thread for the %s of \"%s\"; try again",
                        load ? "load" : "unload", name);
    }
    pthread_attr_destroy(&attr);
}

/* Load/unload parameters as tritonclient.grpc sends them, with the same
 * rules as over HTTP (routes.c): unload_dependents (slimserve has no
 * ensembles: nothing depends on a model), and on load "config", Triton's
 * model configuration as JSON text in string_param, used in place of the
 * folder's config for this load; "file:" overrides (model files sent with
 * the load) are refused. *cfg_json: the config as config.json text, or
 * NULL; the caller frees it. */
static bool params_ok(slim__grpc_call *c, const char *name, bool load,
                      Inference__RepositoryModelLoadRequest__ParametersEntry **ps, size_t n,
                      char **cfg_json)
{
    const char *op = load ? "load" : "unload";
    *cfg_json = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *key = ps[i]->key ? ps[i]->key : "";
        const Inference__ModelRepositoryParameter *v = ps[i]->value;
        if (strcmp(key, "unload_dependents") == 0)
            continue;
        if (strncmp(key, "file:", 5) == 0) {
            slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s \"%s\": parameter \"%.200s\": "
                            "file overrides (model files sent with the load) are not supported; "
                            "put the files in the repository folder", op, name, key);
            return false;
        }
        if (!load || strcmp(key, "config") != 0) {
            slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s \"%s\": unknown parameter "
                            "\"%.200s\" (expected %s)", op, name, key,
                            load ? "\"config\" or \"unload_dependents\"" : "\"unload_dependents\"");
            return false;
        }
        if (!v || v->parameter_choice_case !=
                      INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM) {
            slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "load \"%s\": the \"config\" "
                            "parameter must be a string_param holding the model configuration "
                            "as JSON", name);
            return false;
        }
        slim_err err = {0};
        cJSON *cfg = slim_server_json_parse(v->string_param, strlen(v->string_param), &err);
        slim_status st = cfg ? SLIM_OK : SLIM_EINVAL;
        free(*cfg_json); /* a repeated key: the last one counts, as over HTTP */
        *cfg_json = NULL;
        if (cfg)
            st = slim_server_config_from_triton_json(cfg, name, cfg_json, &err);
        cJSON_Delete(cfg);
        if (st != SLIM_OK) {
            slim__grpc_fail(c, st == SLIM_ENOMEM ? GRPC_STATUS_INTERNAL
                                                 : GRPC_STATUS_INVALID_ARGUMENT,
                            "load \"%s\": the \"config\" parameter: %s", name, err.msg);
            free(*cfg_json);
            *cfg_json = NULL;
            return false;
        }
    }
    return true;
}

static void rpc_load(slim__grpc_call *c)
{
    Inference__RepositoryModelLoadRequest *q =
        (void *)slim__grpc_unpack(c, &inference__repository_model_load_request__descriptor);
    if (!q)
        return;
    char *cfg_json;
    if (params_ok(c, q->model_name, true, q->parameters, q->n_parameters, &cfg_json))
        start_repo_job(c, q->model_name, true, cfg_json);
    inference__repository_model_load_request__free_unpacked(q, NULL);
}

static void rpc_unload(slim__grpc_call *c)
{
    Inference__RepositoryModelUnloadRequest *q =
        (void *)slim__grpc_unpack(c, &inference__repository_model_unload_request__descriptor);
    if (!q)
        return;
    char *cfg_json;
    if (params_ok(c, q->model_name, false,
                  (Inference__RepositoryModelLoadRequest__ParametersEntry **)q->parameters,
                  q->n_parameters, &cfg_json))
        start_repo_job(c, q->model_name, false, cfg_json);
    inference__repository_model_unload_request__free_unpacked(q, NULL);
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

grpc_status_code slim__grpc_task_code(const slim_server_task *t)
{
    return slim__grpc_code(t->http_status ? t->http_status : runtime_error_status(t->status));
}

void slim__grpc_count_success(slim_server_model *m, const slim_server_infer *rq,
                              const slim_server_task *t, int64_t t_begin, int64_t decode_ns,
                              int64_t t_encode)
{
    slim_server_stats *st = m->stats;
    atomic_fetch_add(&st->success, 1);
    atomic_fetch_add(&st->inference_count, (uint64_t)rq->batch);
    atomic_fetch_add(&st->queue_us, (uint64_t)(t->t_started - t->t_queued));
    atomic_fetch_add(&st->compute_us, (uint64_t)(t->t_done - t->t_started));
    uint64_t us = (uint64_t)(slim_server_now_us() - t_begin);
    atomic_fetch_add(&st->request_us, us);
    atomic_fetch_add(&st->success_us, us);
    atomic_fetch_add(&st->input_ns, (uint64_t)(decode_ns + t->input_ns));
    atomic_fetch_add(&st->infer_ns, (uint64_t)t->infer_ns);
    atomic_fetch_add(&st->output_ns, (uint64_t)(t->output_ns + slim_server_now_ns() - t_encode));
    slim_server_stats_touch(st);
}

/* On the instance thread once the task is done. While other requests
 * wait for a run (any model's: this one counts itself), a success is
 * answered on a queue thread (phase DONE): packing the outputs and sending
 * them there, not here, frees the model's thread for its next run at once,
 * as HTTP's answers do. The hand-over is an empty batch, whose tag gRPC
 * posts to the queue at once; it costs a thread wakeup, so with nothing
 * else waiting (one client at a time) the answer goes from here. A failure
 * (rare, and short to answer) is answered here. */
static void infer_done(slim_server_task *t)
{
    slim__grpc_call *c = t->user;
    slim_server_model *m = t->model;
    if (t->status != SLIM_OK) {
        if (slim__grpc_retry_alone(&c->admit))
            return; /* runs again alone: done is called again */
        slim_server_count_failure(m, t->failure, c->t_begin);
        slim__grpc_fail(c, slim__grpc_task_code(t), "%s", t->err.msg);
        return; /* c may be freed by now (its answer sent, on a queue thread) */
    }
    if (slim_server_batchers_pending() > 1) {
        c->phase = SLIM__GRPC_DONE;
        if (grpc_call_start_batch(c->call, NULL, 0, c, NULL) == GRPC_CALL_OK)
            return;
    }
    slim__grpc_infer_answer(c);
}

/* The answer is packed and handed to gRPC (neither blocks), the statistics
 * counted as routes.c's slim_server_infer_finish counts them. */
void slim__grpc_infer_answer(slim__grpc_call *c)
{
    slim_server_task *t = &c->task;
    slim_server_model *m = t->model;
    slim_err err = {0};
    int64_t t_encode = slim_server_now_ns();
    uint8_t *bytes;
    size_t len;
    if (slim_server_grpc_infer_encode(&c->rq, m, t->outputs, t->n_outputs, &bytes, &len, &err) !=
        SLIM_OK) {
        slim_server_count_failure(m, SLIM_SERVER_FAIL_OTHER, c->t_begin);
        slim__grpc_fail(c, err.status == SLIM_EOOM ? GRPC_STATUS_RESOURCE_EXHAUSTED
                                                   : GRPC_STATUS_INTERNAL, "%s", err.msg);
        return;
    }
    slim__grpc_count_success(m, &c->rq, t, c->t_begin, c->decode_ns, t_encode);
    if (slim_server_trace_on()) /* trace extension: one branch when off */
        slim_server_trace_request(m->name, m->version, c->rq.id, t, c->t_begin);
    slim__grpc_reply_packed(c, bytes, len);
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

/* The model named by msg, a new reference; NULL with *code and msg set. */
static slim_server_model *infer_model(slim__grpc_call *c, const Inference__ModelInferRequest *q,
                                      grpc_status_code *code, char *msg, size_t cap)
{
    int64_t v;
    if (!slim__grpc_parse_version(q->model_version, &v)) {
        *code = GRPC_STATUS_INVALID_ARGUMENT;
        snprintf(msg, cap, "model version \"%s\" is not a number (digits, no leading zero)",
                 q->model_version);
        return NULL;
    }
    int status = 404;
    slim_server_model *m = slim_server_repo_acquire(&c->g->srv->repo, q->model_name, v, &status,
                                                    msg, cap);
    if (!m)
        *code = slim__grpc_code(status);
    return m;
}

/* Frees ad's message, and the bytes its raw inputs were read from. */
static void drop_msg(slim__grpc_admit *ad)
{
    slim_server_grpc_infer_unpacked_free(ad->q, ad->q_in_place);
    ad->q = NULL;
    grpc_slice_unref(ad->bytes);
    ad->bytes = grpc_empty_slice();
}

/* Admission's start (admission.h): decodes the message and queues the
 * request; false when its inputs found no memory now (the message is kept
 * for the next try). */
static bool admit_start(slim_server_admission_ticket *tk, slim_err *oom)
{
    slim__grpc_admit *ad = (slim__grpc_admit *)tk;
    slim_server_task *t = ad->task;
    slim_server_infer *rq = ad->rq;
    slim_server_model *m = t->model;
    slim_err err = {0};
    slim_status s = SLIM_OK;
    if (ad->q) { /* else decoded already: a retry alone (slim__grpc_retry_alone) */
        int64_t t0 = slim_server_now_ns();
        s = slim_server_grpc_infer_decode_msg(ad->q, m, rq, &err);
        *ad->decode_ns = slim_server_now_ns() - t0;
        if (s == SLIM_EOOM) {
            *oom = err;
            return false;
        }
        drop_msg(ad); /* the inputs hold copies now */
    }
    if (s != SLIM_OK) {
        bool oom_now = s == SLIM_ENOMEM;
        slim_server_count_failure(m, oom_now ? SLIM_SERVER_FAIL_MEMORY
                                             : SLIM_SERVER_FAIL_BAD_REQUEST, tk->t_begin);
        ad->fail(ad, oom_now ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT,
                 err.msg);
        return true;
    }
    rq->max_reply_bytes = ad->c->g->srv->opts.max_response_bytes;
    t->rq = rq;
    t->timeout_from_request = tk->timeout_from_request;
    t->run_timeout_us = tk->run_timeout_us;
    t->run_deadline = tk->run_deadline;
    int64_t queue_timeout = m->cfg.batching.allow_timeout_override ? rq->timeout_us : 0;
    if (!slim_server_batcher_submit(m->batcher, t, queue_timeout, &err)) {
        slim_server_count_failure(m, SLIM_SERVER_FAIL_REJECTED, tk->t_begin);
        ad->fail(ad, GRPC_STATUS_UNAVAILABLE, err.msg);
    }
    return true;
}

static void admit_answer(slim_server_admission_ticket *tk, int http_status, const char *msg)
{
    slim__grpc_admit *ad = (slim__grpc_admit *)tk;
    ad->fail(ad, slim__grpc_code(http_status), msg);
}

static bool admit_gone(slim_server_admission_ticket *tk)
{
    slim__grpc_admit *ad = (slim__grpc_admit *)tk;
    return ad->gone && ad->gone(ad);
}

/* The "timeout" parameter as given (decoding validates it): -1 none. */
static int64_t declared_timeout(const Inference__ModelInferRequest *q)
{
    for (size_t i = 0; i < q->n_parameters; i++) {
        const Inference__ModelInferRequest__ParametersEntry *e = q->parameters[i];
        if (!e->key || strcmp(e->key, "timeout") != 0 || !e->value)
            continue;
        const Inference__InferParameter *p = e->value;
        if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM)
            return p->int64_param >= 0 ? p->int64_param : -1;
        if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM)
            return p->uint64_param <= (uint64_t)INT64_MAX ? (int64_t)p->uint64_param : -1;
        return -1;
    }
    return -1;
}

/* A BYTES input's bytes as sent (raw or bytes_contents): what its
 * elements will hold decoded, at most; 0 for any other input. */
static size_t string_bytes(const Inference__ModelInferRequest *q, size_t i)
{
    const Inference__ModelInferRequest__InferInputTensor *in = q->inputs[i];
    size_t n = 0;
    if (!in->datatype || strcmp(in->datatype, "BYTES") != 0)
        return 0;
    if (i < q->n_raw_input_contents)
        return q->raw_input_contents[i].len;
    for (size_t k = 0; in->contents && k < in->contents->n_bytes_contents; k++)
        n += in->contents->bytes_contents[k].len;
    return n;
}

/* The ticket's deadlines and figures, from the message before decoding. */
static void admit_declare(slim__grpc_admit *ad, const Inference__ModelInferRequest *q,
                          const slim_server_model *m)
{
    slim_server_admission_ticket *tk = &ad->ticket;
    /* The deadline as routes.c sets it: the earlier of the request's
     * "timeout" parameter and the model's request_timeout_ms. The call's
     * own deadline (tritonclient's client_timeout) counts as a "timeout"
     * parameter would: past it the client has stopped waiting. */
    int64_t given = declared_timeout(q);
    int64_t mine = given > 0 ? given : 0, model = m->cfg.request_timeout_ms * 1000;
    int64_t left = call_deadline_us(ad->c);
    if (left > 0 && (mine <= 0 || left < mine))
        mine = left;
    tk->timeout_from_request = mine > 0 && (model <= 0 || mine <= model);
    tk->run_timeout_us = tk->timeout_from_request ? mine : model > 0 ? model : 0;
    tk->run_deadline = tk->run_timeout_us ? tk->t_begin + tk->run_timeout_us : 0;
    tk->wait_timeout_us = m->cfg.batching.allow_timeout_override && given > 0 ? given : 0;
    slim_server_declared_input *ins = calloc(q->n_inputs ? q->n_inputs : 1, sizeof(*ins));
    if (!ins)
        return; /* not known: admitted on the budget alone */
    for (size_t i = 0; i < q->n_inputs; i++)
        ins[i] = (slim_server_declared_input){q->inputs[i]->name, q->inputs[i]->datatype,
                                              q->inputs[i]->shape, q->inputs[i]->n_shape,
                                              string_bytes(q, i)};
    slim_server_admission_ticket_need(tk, ins, q->n_inputs);
    free(ins);
}

void slim__grpc_infer_submit(slim__grpc_admit *ad, grpc_slice bytes, int64_t t_begin)
{
    slim_server_batchers_multiplexed_call(); /* its channel may send more: batches may grow */
    /* Held in ad first: a small slice keeps its bytes inside the struct,
     * so the raw inputs must point into ad's copy, not this argument. */
    ad->bytes = bytes;
    Inference__ModelInferRequest *q = slim_server_grpc_infer_unpack(
        GRPC_SLICE_START_PTR(ad->bytes), GRPC_SLICE_LENGTH(ad->bytes), &ad->q_in_place);
    ad->q = q;
    if (!q) {
        drop_msg(ad);
        ad->fail(ad, GRPC_STATUS_INVALID_ARGUMENT,
                 "the request is not a valid ModelInferRequest message");
        return;
    }
    grpc_status_code code;
    char msg[1200];
    slim_server_model *m = infer_model(ad->c, q, &code, msg, sizeof(msg));
    if (!m) {
        drop_msg(ad);
        ad->fail(ad, code, msg);
        return;
    }
    ad->task->model = m; /* released with the request (the caller's) */
    slim_server_admission_ticket *tk = &ad->ticket;
    tk->model = m;
    tk->t_begin = t_begin;
    tk->start = admit_start;
    tk->answer = admit_answer;
    tk->gone = admit_gone;
    admit_declare(ad, q, m);
    slim_server_admission_ticket_admit(ad->c->g->srv->admission, tk);
}

bool slim__grpc_retry_alone(slim__grpc_admit *ad)
{
    slim_server_task *t = ad->task;
    if (t->status != SLIM_EOOM || !ad->c || ad->q)
        return false;
    slim_server_admission *a = ad->c->g->srv->admission;
    if (!a || ad->ticket.retried_alone || atomic_load(&ad->c->g->srv->stopping))
        return false;
    /* Back to how it was submitted: its decoded inputs, no outputs (the
     * batcher's submit resets the rest). */
    slim_tensors_free(t->outputs, t->n_outputs);
    t->outputs = NULL;
    t->n_outputs = 0;
    return slim_server_admission_ticket_retry_alone(a, &ad->ticket);
}

void slim__grpc_admit_free(slim__grpc_admit *ad)
{
    drop_msg(ad);
    if (ad->c)
        slim_server_admission_ticket_release(ad->c->g->srv->admission, &ad->ticket);
}

/* Whether the client cancelled (a flag set on a queue thread: cheap). */
static bool infer_gone(slim_server_task *t)
{
    const slim__grpc_call *c = t->user;
    return atomic_load(&c->gone);
}

static void call_fail(slim__grpc_admit *ad, grpc_status_code code, const char *msg)
{
    slim__grpc_fail(ad->c, code, "%s", msg);
}

static bool call_gone(slim__grpc_admit *ad)
{
    return ad->c->close_early && atomic_load(&ad->c->gone);
}

static void rpc_model_infer(slim__grpc_call *c)
{
    c->t_begin = slim_server_now_us();
    c->task.done = infer_done;
    c->task.user = c;
    c->admit.c = c;
    c->admit.rq = &c->rq;
    c->admit.task = &c->task;
    c->admit.decode_ns = &c->decode_ns;
    c->admit.fail = call_fail;
    if (slim__grpc_watch_close(c)) {
        c->task.gone = infer_gone;
        c->admit.gone = call_gone;
    }
    /* One slice (a copy only when the message came in pieces), unpacked
     * once; its raw inputs are read from it in place. c may be answered,
     * even freed, once this returns. */
    slim__grpc_infer_submit(&c->admit, slim__grpc_read_slice(c), c->t_begin);
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
    {"ModelMetadata", slim__grpc_model_metadata, false},
    {"ModelInfer", rpc_model_infer, false},
    {"ModelConfig", slim__grpc_model_config, false},
    {"ModelStatistics", slim__grpc_model_statistics, false},
    {"RepositoryIndex", rpc_repository_index, false},
    {"RepositoryModelLoad", rpc_load, false},
    {"RepositoryModelUnload", rpc_unload, false},
    {"LogSettings", slim__grpc_log_settings, false},
    {"TraceSetting", slim__grpc_trace_setting, false},
    {"ModelStreamInfer", slim__grpc_stream_start, false},
    {"SystemSharedMemoryStatus", slim__grpc_shm_system_status, false},
    {"SystemSharedMemoryRegister", slim__grpc_shm_system_register, false},
    {"SystemSharedMemoryUnregister", slim__grpc_shm_system_unregister, false},
    {"CudaSharedMemoryStatus", slim__grpc_shm_cuda_status, false},
    {"CudaSharedMemoryRegister", slim__grpc_shm_cuda_register, false},
    {"CudaSharedMemoryUnregister", slim__grpc_shm_cuda_unregister, false},
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
