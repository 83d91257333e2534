/*
 * routes.c - the endpoints: KServe v2 as Triton serves it over HTTP.
 *
 *   GET  /v2                                   server metadata
 *   GET  /v2/health/live | /v2/health/ready
 *   GET  /v2/models/M[/versions/V]             model metadata
 *   GET  /v2/models/M[/versions/V]/ready
 *   GET  /v2/models/M[/versions/V]/config
 *   POST /v2/models/M[/versions/V]/infer
 *   GET  /v2/models[/M[/versions/V]]/stats    statistics (stats.c)
 *   POST /v2/repository/index
 *   POST /v2/repository/models/M/load | /unload
 *   GET  /v2/debug/memory[?format=text]        allocator and model memory
 *   POST /v2/debug/memory/reset_peaks
 *   GET  /metrics
 *   GET|POST /v2/logging, /v2[/models/M]/trace/setting   (routes_ext.c)
 *
 * Every failure is {"error": "..."} with Triton's status code, except that
 * an unknown model is 404 and a known one that is not ready is 503.
 */
#include "admission.h"
#include "auth.h"
#include "batcher.h"
#include "buf.h"
#include "clock.h"
#include "codec.h"
#include "config.h"
#include "device.h"
#include "http.h"
#include "log.h"
#include "memory.h"
#include "metrics.h"
#include "metrics_port.h"
#include "repository.h"
#include "residency.h"
#include "routes.h"
#include "server.h"
#include "trace.h"
#include "shm.h"
#include "version.h"

#include <microhttpd.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Shutdown: after the grace period, how long cancelled runs get to stop
 * and their 503s to go out before the server stops without them; then how
 * long the answers of runs that ended just then get to go out. */
#define SHUTDOWN_CANCEL_WAIT_US 600000
#define SHUTDOWN_LAST_ANSWERS_US 150000

#define MAX_SEGMENTS 8

typedef struct path {
    char *seg[MAX_SEGMENTS];
    int n;
} path;

typedef enum { PATH_OK, PATH_UNKNOWN, PATH_EMPTY_SEGMENT } path_result;

/* Splits "/v2/models/m/infer" in place. Every segment must have a name:
 * "/v2/models/mlp//infer" or "/v2/" is refused rather than read as some
 * other path. "/" alone has no segments. PATH_UNKNOWN: too many segments,
 * or not a path. */
static path_result split_path(char *url, path *p)
{
    p->n = 0;
    if (url[0] != '/')
        return PATH_UNKNOWN; /* "*", or an absolute URL */
    if (url[1] == '\0')
        return PATH_OK;
    for (char *seg = url + 1; seg; ) {
        char *slash = strchr(seg, '/');
        if (slash)
            *slash = '\0';
        if (!*seg)
            return PATH_EMPTY_SEGMENT;
        if (p->n == MAX_SEGMENTS)
            return PATH_UNKNOWN;
        p->seg[p->n++] = seg;
        seg = slash ? slash + 1 : NULL;
    }
    return PATH_OK;
}

static bool is_get(const slim_server_request *req)
{
    return strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
}

static bool is_post(const slim_server_request *req)
{
    return strcmp(req->method, "POST") == 0;
}

static bool method_ok(slim_server_request *req, bool post)
{
    if (post ? is_post(req) : is_get(req))
        return true;
    slim_server_reply_error(&req->reply, 405, "method %s is not allowed on %s; use %s",
                            req->method, req->url, post ? "POST" : "GET");
    req->reply.allow = post ? "POST" : "GET, HEAD";
    return false;
}

static void reply_empty(slim_server_reply *r, int status)
{
    slim_server_reply_free(r);
    r->status = status;
    r->content_type = "application/json";
}

/* Parses an optional JSON body (index, load, unload); NULL body is fine. */
static bool optional_body(slim_server_request *req, cJSON **out)
{
    *out = NULL;
    if (!req->body_len)
        return true;
    slim_err err = {0};
    if (!(*out = slim_server_json_parse(req->body, req->body_len, &err))) {
        slim_server_reply_error(&req->reply, 400, "%s", err.msg);
        return false;
    }
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        slim_server_reply_error(&req->reply, 400, "the request body must be a JSON object");
        return false;
    }
    return true;
}

/* ---- server-wide -------------------------------------------------------- */

static void route_server_metadata(slim_server_request *req)
{
    static const char *extensions[] = {"binary_tensor_data", "model_repository",
                                       "model_configuration", "parameters", "statistics",
                                       "logging", "trace", "classification"};
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "name", SLIM_SERVER_NAME);
        cJSON_AddStringToObject(o, "version", SLIM_SERVER_VERSION);
        cJSON_AddItemToObject(o, "extensions",
                              cJSON_CreateStringArray(extensions, sizeof(extensions) /
                                                                  sizeof(extensions[0])));
        slim_server_shm_add_extensions(cJSON_GetObjectItemCaseSensitive(o, "extensions"));
    }
    slim_server_reply_json(&req->reply, 200, o);
}

static void route_metrics(slim_server_request *req)
{
    slim_server_buf b = {0};
    slim_server_metrics_page(req->srv, &b); /* the same page as --metrics-port's */
    if (b.oom) {
        slim_server_buf_free(&b);
        slim_server_reply_error(&req->reply, 500, "out of memory while writing metrics");
        return;
    }
    slim_server_reply_free(&req->reply);
    req->reply.status = 200;
    req->reply.body = b.data;
    req->reply.len = b.len;
    req->reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* ---- repository --------------------------------------------------------- */

static void route_index(slim_server_request *req)
{
    cJSON *body;
    if (!optional_body(req, &body))
        return;
    const cJSON *ready = cJSON_GetObjectItemCaseSensitive(body, "ready");
    slim_server_reply_json(&req->reply, 200,
                           slim_server_repo_index(&req->srv->repo, cJSON_IsTrue(ready)));
    cJSON_Delete(body);
}

/* A load reads files and runs the load pipeline for as long as the model
 * takes (up to --load-timeout): on an HTTP thread it would stall every
 * connection that thread serves, health checks among them. So it runs on a
 * thread of its own with the connection suspended, like a run. */
typedef struct repo_job {
    slim_server_request *req;
    char *name;
    char *cfg_json;     /* load's "config" parameter as config.json text */
    bool load;
} repo_job;

static void *repo_job_main(void *arg)
{
    repo_job *job = arg;
    slim_server_request *req = job->req;
    slim_server *srv = req->srv;
    slim_err err = {0};
    int status = 400;
    slim_status s = job->load ? slim_server_repo_load_config(&srv->repo, job->name, job->cfg_json,
                                                             &status, &err)
                              : slim_server_repo_unload(&srv->repo, job->name, &status, &err);
    if (s != SLIM_OK)
        slim_server_reply_error(&req->reply, status, "%s", err.msg);
    else
        reply_empty(&req->reply, 200);
    free(job->cfg_json);
    free(job->name);
    free(job);
    MHD_resume_connection(req->conn); /* req may be gone after this */
    atomic_fetch_sub(&srv->repo_ops, 1);
    return NULL;
}

/* Load/unload "parameters" as tritonclient sends them: unload_dependents
 * (always, on unload; slimserve has no ensembles, so a model has no
 * dependents and it changes nothing) and, on load, "config": Triton's
 * model configuration as JSON (a string, or an object), used in place of
 * the folder's config for this load. "file:..." overrides (model files
 * sent in the request) are refused. *cfg_json is the config as
 * config.json text, or NULL; the caller frees it, on failure too. */
static bool load_parameters(slim_server_request *req, const cJSON *params, const char *name,
                            bool load, char **cfg_json)
{
    const char *op = load ? "load" : "unload";
    *cfg_json = NULL;
    if (!params)
        return true;
    if (!cJSON_IsObject(params)) {
        slim_server_reply_error(&req->reply, 400, "%s \"%s\": \"parameters\" must be a JSON "
                                "object", op, name);
        return false;
    }
    for (const cJSON *p = params->child; p; p = p->next) {
        const char *key = p->string;
        if (strcmp(key, "unload_dependents") == 0 && cJSON_IsBool(p))
            continue;
        if (strncmp(key, "file:", 5) == 0) {
            slim_server_reply_error(&req->reply, 400, "%s \"%s\": parameter \"%.200s\": file "
                                    "overrides (model files sent with the load) are not "
                                    "supported; put the files in the repository folder", op,
                                    name, key);
            return false;
        }
        if (strcmp(key, "config") != 0 || !load) {
            slim_server_reply_error(&req->reply, 400, "%s \"%s\": unknown parameter \"%.200s\" "
                                    "(expected %s)", op, name, key,
                                    load ? "\"config\" or \"unload_dependents\""
                                         : "\"unload_dependents\": true or false");
            return false;
        }
        slim_err err = {0};
        cJSON *parsed = NULL;
        const cJSON *cfg = p;
        if (cJSON_IsString(p)) {
            if (!(parsed = slim_server_json_parse(p->valuestring, strlen(p->valuestring), &err))) {
                slim_server_reply_error(&req->reply, 400, "load \"%s\": the \"config\" "
                                        "parameter: %s", name, err.msg);
                return false;
            }
            cfg = parsed;
        }
        free(*cfg_json); /* JSON lets "config" come twice: the last one counts */
        slim_status s = slim_server_config_from_triton_json(cfg, name, cfg_json, &err);
        cJSON_Delete(parsed);
        if (s != SLIM_OK) {
            slim_server_reply_error(&req->reply, s == SLIM_ENOMEM ? 500 : 400, "load \"%s\": %s",
                                    name, err.msg);
            return false;
        }
    }
    return true;
}

static void route_load_unload(slim_server_request *req, const char *name, bool load)
{
    cJSON *body;
    if (!optional_body(req, &body))
        return;
    char *cfg_json = NULL;
    bool ok = load_parameters(req, cJSON_GetObjectItemCaseSensitive(body, "parameters"), name,
                              load, &cfg_json);
    cJSON_Delete(body);
    if (!ok) {
        free(cfg_json); /* a "config" before the parameter that failed */
        return;
    }
    repo_job *job = calloc(1, sizeof(*job));
    if (!job || !(job->name = strdup(name))) {
        free(job);
        free(cfg_json);
        slim_server_reply_error(&req->reply, 500, "out of memory");
        return;
    }
    job->cfg_json = cfg_json;
    job->req = req;
    job->load = load;
    slim_server *srv = req->srv;
    if (atomic_fetch_add(&srv->repo_ops, 1) >= SLIM_SERVER_MAX_REPO_OPS) {
        atomic_fetch_sub(&srv->repo_ops, 1);
        free(job->cfg_json);
        free(job->name);
        free(job);
        slim_server_reply_error(&req->reply, 503, "%d repository loads and unloads are under "
                                "way; try again", SLIM_SERVER_MAX_REPO_OPS);
        req->reply.retry_after_s = 1;
        return;
    }
    /* Suspended before the thread starts: it may finish and resume at once. */
    MHD_suspend_connection(req->conn);
    req->suspended = true;
    req->repo_op = true;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, repo_job_main, job) != 0) {
        pthread_attr_destroy(&attr);
        slim_server_reply_error(&req->reply, 503, "no thread for the %s of \"%s\"; try again",
                                load ? "load" : "unload", name);
        req->reply.retry_after_s = 1;
        free(job->cfg_json);
        free(job->name);
        free(job);
        atomic_fetch_sub(&srv->repo_ops, 1);
        MHD_resume_connection(req->conn); /* answered when MHD calls back */
        return;
    }
    pthread_attr_destroy(&attr);
}

/* ---- one model ---------------------------------------------------------- */

static void add_io(cJSON *arr, const slim_server_io *io, bool batch)
{
    cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
    if (!o || !shape) {
        cJSON_Delete(o);
        cJSON_Delete(shape);
        return;
    }
    const char *type = slim_server_dtype_kserve(io->dtype);
    cJSON_AddStringToObject(o, "name", io->name);
    cJSON_AddStringToObject(o, "datatype", type ? type : "INVALID");
    if (batch || io->ndim < 0)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(-1));
    for (int d = 0; d < io->ndim; d++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)io->dims[d]));
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON_AddItemToArray(arr, o);
}

static void route_model_metadata(slim_server_request *req, const slim_server_model *m)
{
    int64_t versions[256];
    int n = slim_server_repo_ready_versions(&req->srv->repo, m->name, versions, 256);
    cJSON *o = cJSON_CreateObject(), *vs = cJSON_CreateArray(), *ins = cJSON_CreateArray(),
          *outs = cJSON_CreateArray();
    if (!o || !vs || !ins || !outs) {
        cJSON_Delete(vs);
        cJSON_Delete(ins);
        cJSON_Delete(outs);
        cJSON_Delete(o);
        slim_server_reply_error(&req->reply, 500, "out of memory");
        return;
    }
    for (int i = 0; i < n; i++) {
        char v[32];
        snprintf(v, sizeof(v), "%lld", (long long)versions[i]);
        cJSON_AddItemToArray(vs, cJSON_CreateString(v));
    }
    bool batch = m->cfg.max_batch_size > 0;
    for (int i = 0; i < m->cfg.n_inputs; i++)
        add_io(ins, &m->cfg.inputs[i], batch);
    for (int i = 0; i < m->cfg.n_outputs; i++)
        add_io(outs, &m->cfg.outputs[i], batch);
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddItemToObject(o, "versions", vs);
    cJSON_AddStringToObject(o, "platform", m->cfg.platform);
    cJSON_AddItemToObject(o, "inputs", ins);
    cJSON_AddItemToObject(o, "outputs", outs);
    slim_server_memory_footprint_json(o, m);
    slim_server_reply_json(&req->reply, 200, o);
}

static void on_task_done(slim_server_task *t)
{
    slim_server_request *req = t->user;
    MHD_resume_connection(req->conn); /* req may be gone after this */
}

void slim_server_count_failure(const slim_server_model *m, slim_server_failure why,
                               int64_t t_begin)
{
    uint64_t us = (uint64_t)(slim_server_now_us() - t_begin);
    atomic_fetch_add(&m->stats->failure[why], 1);
    atomic_fetch_add(&m->stats->request_us, us);
    atomic_fetch_add(&m->stats->fail_us, us);
    slim_server_stats_touch(m->stats);
}

slim_status slim_server_infer_decode_request(slim_server_request *req, slim_err *err)
{
    const slim_server_model *m = req->task.model;
    int64_t t0 = slim_server_now_ns();
    /* Binary inputs are read in place from the body (no copy of a 150 KB
     * image on its way to the model) when the body stays put until the
     * request is freed: not under a memory limit, where the body lives in
     * the allocator and moves to the heap once decoded (admission.c), and
     * where the inputs' bytes are to be counted in the allocator. */
    bool in_place = !req->body_block && !slim_allocator_limit(slim_device_cpu()->alloc);
    slim_status s = (in_place ? slim_server_infer_decode_in_place : slim_server_infer_decode)(
        req->body ? req->body : "", req->body_len, req->infer_header_len, m, &req->infer, err);
    req->decode_ns = slim_server_now_ns() - t0;
    /* The "timeout" parameter is always the request's deadline (below);
     * as in Triton it is also the queue policy's timeout only where the
     * policy allows the override. */
    if (s == SLIM_OK && m->cfg.batching.allow_timeout_override)
        req->timeout_us = req->infer.timeout_us;
    return s;
}

/* Whether the client of a suspended request has gone: MHD does not watch a
 * suspended connection, so a peek at the socket tells. End of stream (the
 * client closed, or shut its sending side: it expects nothing more) or an
 * error means gone; bytes waiting (a pipelined request) or none mean not. */
bool slim_server_socket_gone(int fd)
{
    char c;
    if (fd < 0)
        return false;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static bool client_gone(slim_server_task *t)
{
    const slim_server_request *req = t->user;
    return slim_server_socket_gone(req->client_fd);
}

/* The process exits with t's run still going: a 503 written straight to
 * the socket, as nothing has been written on it yet and libmicrohttpd does
 * not touch a suspended connection. Best effort (non-blocking): the reply
 * is short and the socket's send buffer empty. */
static void client_abandon(slim_server_task *t)
{
    const slim_server_request *req = t->user;
    char why[600];
    slim_server_buf body = {0}, msg = {0};
    if (req->client_fd < 0)
        return;
    snprintf(why, sizeof(why), "the server is shutting down; the request to model '%s' was "
             "cancelled, and its run did not stop", t->model->name);
    slim_server_buf_puts(&body, "{\"error\":");
    slim_server_buf_json_string(&body, why); /* a model name may need escapes */
    slim_server_buf_puts(&body, "}");
    slim_server_buf_printf(&msg, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                           "Content-Type: application/json\r\nRetry-After: 1\r\n"
                           "X-Request-ID: %s\r\nContent-Length: %zu\r\n\r\n", req->id, body.len);
    slim_server_buf_append(&msg, body.data, body.len);
    if (!msg.oom && !body.oom)
        (void)send(req->client_fd, msg.data, msg.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    slim_server_buf_free(&body);
    slim_server_buf_free(&msg);
}

/* The request's deadline, from when its body was complete: the earlier of
 * its "timeout" parameter and the model's request_timeout_ms. */
static void set_deadline(slim_server_request *req)
{
    slim_server_task *t = &req->task;
    int64_t mine = req->infer.timeout_us, model = t->model->cfg.request_timeout_ms * 1000;
    t->timeout_from_request = mine > 0 && (model <= 0 || mine <= model);
    t->run_timeout_us = t->timeout_from_request ? mine : model > 0 ? model : 0;
    t->run_deadline = t->run_timeout_us ? req->t_begin + t->run_timeout_us : 0;
}

void slim_server_infer_submit(slim_server_request *req)
{
    slim_server_model *m = req->task.model;
    slim_err err = {0};
    req->task.rq = &req->infer;
    req->task.done = on_task_done;
    req->task.user = req;
    req->task.gone = client_gone;
    req->task.abandon = client_abandon;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    req->client_fd = ci ? ci->connect_fd : -1;
    set_deadline(req);
    /* Suspend before queueing: the instance may finish and resume at once. */
    if (!req->suspended) {
        MHD_suspend_connection(req->conn);
        req->suspended = true;
    }
    if (!slim_server_batcher_submit(m->batcher, &req->task, req->timeout_us, &err)) {
        /* Still suspended: resume, and answer when MHD calls back. */
        slim_server_count_failure(m, SLIM_SERVER_FAIL_REJECTED, req->t_begin);
        slim_server_reply_error(&req->reply, 503, "%s", err.msg);
        req->reply.retry_after_s = 1;
        req->task.t_done = -1; /* tells infer_finish the reply is already set */
        MHD_resume_connection(req->conn);
    }
}

/* Decodes, queues and suspends; takes over the caller's model reference.
 * Admission decides when: inputs that do not fit in memory now are not the
 * client's fault (admission.c). */
static void route_infer(slim_server_request *req, slim_server_model *m)
{
    req->task.model = m; /* released with the request */
    slim_server_admission_admit(req->srv->admission, req);
}

static int runtime_error_status(slim_status s)
{
    switch (s) {
    case SLIM_EINVAL: case SLIM_ESHAPE: case SLIM_ETYPE: case SLIM_ENEEDVALUE:
    case SLIM_EUNSUPPORTED:
        return 400;
    case SLIM_EOOM: /* does not fit even alone (batch_run.c) */
        return 507;
    default:
        return 500;
    }
}

void slim_server_infer_finish(slim_server_request *req)
{
    slim_server_task *t = &req->task;
    slim_server_model *m = t->model;
    if (t->t_done < 0) /* rejected: the 503 is already in req->reply */
        return;
    /* Out of memory even alone on its model, but other requests' inputs
     * held memory: it runs again once they are gone (admission.c). */
    if (t->status == SLIM_EOOM && slim_server_admission_retry_alone(req->srv->admission, req))
        return;
    if (t->status != SLIM_OK) {
        slim_server_count_failure(m, t->failure, req->t_begin);
        int http_status = t->http_status ? t->http_status : runtime_error_status(t->status);
        slim_server_reply_error(&req->reply, http_status, "%s", t->err.msg);
        if (http_status == 503) /* a queue timeout: worth retrying, say when */
            req->reply.retry_after_s = 1;
        return;
    }
    slim_err err = {0};
    int64_t t_encode = slim_server_now_ns();
    if (slim_server_infer_encode(&req->infer, m, t->outputs, t->n_outputs, &req->reply, &err) != SLIM_OK) {
        slim_server_count_failure(m, SLIM_SERVER_FAIL_OTHER, req->t_begin);
        /* SLIM_EOOM: over --max-response-bytes (infer_codec.c) */
        slim_server_reply_error(&req->reply, err.status == SLIM_EOOM ? 507 : 500, "%s", err.msg);
        return;
    }
    slim_server_stats *st = m->stats;
    atomic_fetch_add(&st->success, 1);
    atomic_fetch_add(&st->inference_count, (uint64_t)req->infer.batch);
    /* execution_count is counted per batch run, in batch_run.c */
    atomic_fetch_add(&st->queue_us, (uint64_t)(t->t_started - t->t_queued));
    atomic_fetch_add(&st->compute_us, (uint64_t)(t->t_done - t->t_started));
    uint64_t us = (uint64_t)(slim_server_now_us() - req->t_begin);
    atomic_fetch_add(&st->request_us, us);
    atomic_fetch_add(&st->success_us, us);
    atomic_fetch_add(&st->input_ns, (uint64_t)(req->decode_ns + t->input_ns));
    atomic_fetch_add(&st->infer_ns, (uint64_t)t->infer_ns);
    atomic_fetch_add(&st->output_ns,
                     (uint64_t)(t->output_ns + slim_server_now_ns() - t_encode));
    slim_server_stats_touch(st);
    if (slim_server_trace_on()) /* trace extension: one branch when off */
        slim_server_trace_request(m->name, m->version, req->infer.id ? req->infer.id : req->id,
                                  t, req->t_begin);
}

/* /v2/models/M[/versions/V][/ready|/config|/infer] */
static void route_model(slim_server_request *req, path *p)
{
    const char *name = p->seg[2];
    int rest = 3;
    int64_t version = -1;
    if (p->n >= 5 && strcmp(p->seg[3], "versions") == 0) {
        char *end;
        version = strtoll(p->seg[4], &end, 10);
        /* Canonical digits only: "01", "+1" or " 1" would name version 1 too. */
        if (!p->seg[4][0] || *end || version < 0 ||
            strspn(p->seg[4], "0123456789") != strlen(p->seg[4]) ||
            (p->seg[4][0] == '0' && p->seg[4][1])) {
            slim_server_reply_error(&req->reply, 400, "model version \"%s\" is not a number "
                                    "(digits, no leading zero)", p->seg[4]);
            return;
        }
        rest = 5;
    }
    const char *action = rest < p->n ? p->seg[rest] : "";
    if (p->n > rest + 1 || (action[0] && strcmp(action, "ready") != 0 &&
                            strcmp(action, "config") != 0 && strcmp(action, "infer") != 0 &&
                            strcmp(action, "stats") != 0)) {
        slim_server_reply_error(&req->reply, 404, "unknown endpoint %s", req->url);
        return;
    }
    if (!method_ok(req, strcmp(action, "infer") == 0))
        return;
    if (strcmp(action, "stats") == 0) {
        slim_server_stats_route(req, name, version);
        return;
    }
    int status = 404;
    char msg[1200];
    bool waiting = false;
    /* A model that is not resident loads first (residency.c); the request
     * waits, suspended, and comes back here when it is. Readiness only
     * says: a probe must not load every model it asks about. */
    slim_server_model *m =
        strcmp(action, "ready") == 0
            ? slim_server_repo_acquire(&req->srv->repo, name, version, &status, msg, sizeof(msg))
            : slim_server_residency_acquire(req, name, version, &status, msg, sizeof(msg),
                                            &waiting);
    if (waiting)
        return;
    if (!m) {
        slim_server_reply_error(&req->reply, status, "%s", msg);
        return;
    }
    if (strcmp(action, "infer") == 0) {
        route_infer(req, m);
        return;
    }
    if (strcmp(action, "ready") == 0)
        reply_empty(&req->reply, 200);
    else if (strcmp(action, "config") == 0)
        slim_server_reply_json(&req->reply, 200, slim_server_config_to_json(&m->cfg));
    else
        route_model_metadata(req, m);
    slim_server_model_release(m);
}

/* /v2/{system,cuda}sharedmemory[/region/R]/{status,register,unregister}
 * (shm_api.c answers): status is a GET, the others POSTs. */
static void route_shared_memory(slim_server_request *req, path *p)
{
    bool region = p->n == 5 && strcmp(p->seg[2], "region") == 0;
    const char *action = p->seg[p->n - 1];
    bool status = strcmp(action, "status") == 0;
    if ((p->n != 3 && !region) || (!status && strcmp(action, "register") != 0 &&
                                   strcmp(action, "unregister") != 0)) {
        slim_server_reply_error(&req->reply, 404, "unknown endpoint %s", req->url);
        return;
    }
    if (method_ok(req, !status))
        slim_server_shm_route(p->seg[1][0] == 'c' ? SLIM_SHM_CUDA : SLIM_SHM_SYSTEM,
                              region ? p->seg[3] : NULL, action, req->body, req->body_len,
                              &req->reply);
}

void slim_server_route(slim_server_request *req)
{
    char url[2048];
    snprintf(url, sizeof(url), "%s", req->url);
    path p;
    path_result pr = split_path(url, &p);
    if (pr == PATH_EMPTY_SEGMENT) {
        slim_server_reply_error(&req->reply, 400, "the path %s has an empty segment "
                                "(\"//\", or a \"/\" at either end)", req->url);
        return;
    }
    if (pr == PATH_UNKNOWN)
        goto unknown;
    if (atomic_load(&req->srv->stopping)) {
        slim_server_reply_error(&req->reply, 503, "the server is shutting down");
        return;
    }
    if (p.n == 1 && strcmp(p.seg[0], "metrics") == 0) {
        if (method_ok(req, false))
            route_metrics(req);
        return;
    }
    if (p.n == 0 || strcmp(p.seg[0], "v2") != 0)
        goto unknown;
    if (p.n == 1) {
        if (method_ok(req, false))
            route_server_metadata(req);
        return;
    }
    if (p.n == 3 && strcmp(p.seg[1], "health") == 0 &&
        (strcmp(p.seg[2], "live") == 0 || strcmp(p.seg[2], "ready") == 0)) {
        if (method_ok(req, false))
            reply_empty(&req->reply, p.seg[2][0] == 'r' && !atomic_load(&req->srv->serving)
                                         ? 503 : 200);
        return;
    }
    /* Triton's path: a model called "stats" has its metadata at
     * /v2/models/stats/versions/V only. */
    if (p.n == 3 && strcmp(p.seg[1], "models") == 0 && strcmp(p.seg[2], "stats") == 0) {
        if (method_ok(req, false))
            slim_server_stats_route(req, NULL, -1);
        return;
    }
    if (p.n == 5 && strcmp(p.seg[1], "models") == 0 && strcmp(p.seg[3], "trace") == 0 &&
        strcmp(p.seg[4], "setting") == 0) {
        if (method_ok(req, is_post(req)))
            slim_server_route_trace(req, p.seg[2], is_post(req));
        return;
    }
    if (p.n >= 3 && strcmp(p.seg[1], "models") == 0) {
        route_model(req, &p);
        return;
    }
    if ((p.n == 2 && strcmp(p.seg[1], "logging") == 0) ||
        (p.n == 3 && strcmp(p.seg[1], "trace") == 0 && strcmp(p.seg[2], "setting") == 0)) {
        if (!method_ok(req, is_post(req)))
            return;
        if (p.n == 2)
            slim_server_route_logging(req, is_post(req));
        else
            slim_server_route_trace(req, NULL, is_post(req));
        return;
    }
    if (p.n == 3 && strcmp(p.seg[1], "repository") == 0 && strcmp(p.seg[2], "index") == 0) {
        if (method_ok(req, true))
            route_index(req);
        return;
    }
    if (p.n == 3 && strcmp(p.seg[1], "debug") == 0 && strcmp(p.seg[2], "memory") == 0) {
        if (method_ok(req, false)) {
            const char *fmt = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND,
                                                          "format");
            if (fmt && strcmp(fmt, "text") != 0 && strcmp(fmt, "json") != 0) {
                slim_server_reply_error(&req->reply, 400, "format \"%s\" is not one of "
                                        "\"json\", \"text\"", fmt);
                return;
            }
            slim_server_memory_debug(&req->srv->repo, fmt && strcmp(fmt, "text") == 0,
                                     &req->reply);
        }
        return;
    }
    if (p.n == 4 && strcmp(p.seg[1], "debug") == 0 && strcmp(p.seg[2], "memory") == 0 &&
        strcmp(p.seg[3], "reset_peaks") == 0) {
        if (method_ok(req, true))
            slim_server_memory_reset_peaks(&req->srv->repo, &req->reply);
        return;
    }
    if (p.n == 5 && strcmp(p.seg[1], "repository") == 0 && strcmp(p.seg[2], "models") == 0 &&
        (strcmp(p.seg[4], "load") == 0 || strcmp(p.seg[4], "unload") == 0)) {
        if (method_ok(req, true))
            route_load_unload(req, p.seg[3], strcmp(p.seg[4], "load") == 0);
        return;
    }
    if (p.n >= 3 && (strcmp(p.seg[1], "systemsharedmemory") == 0 ||
                     strcmp(p.seg[1], "cudasharedmemory") == 0)) {
        route_shared_memory(req, &p);
        return;
    }
unknown:
    slim_server_reply_error(&req->reply, 404, "unknown endpoint %s", req->url);
}

/* ---- shutdown ------------------------------------------------------------ */

bool slim_server_drain(slim_server *srv)
{
    int64_t now = slim_server_now_us();
    int64_t grace_end = now + (int64_t)srv->opts.shutdown_grace_s * 1000000;
    while (atomic_load(&srv->in_flight) > 0 && now < grace_end) {
        usleep(10000);
        now = slim_server_now_us();
    }
    if (atomic_load(&srv->in_flight) == 0)
        return true;
    /* Past the grace period: what still runs is cancelled (each answered
     * 503), and stops at its next check. The wait covers that and the
     * answers going out; MHD_stop_daemon would cut them off. */
    int64_t pending = slim_server_batchers_pending();
    if (pending)
        slim_server_log(SLIM_LOG_WARN, NULL, "shutdown: cancelling %lld requests still queued "
                        "or running after the %d s grace period", (long long)pending,
                        srv->opts.shutdown_grace_s);
    slim_server_batchers_cancel_all(SLIM_CANCEL_SHUTDOWN);
    int64_t end = slim_server_now_us() + SHUTDOWN_CANCEL_WAIT_US;
    while ((slim_server_batchers_pending() > 0 || atomic_load(&srv->in_flight) > 0) &&
           slim_server_now_us() < end)
        usleep(5000);
    if (slim_server_batchers_pending() == 0) {
        /* The last run may have ended just as the wait did: its answer is
         * queued on a resumed connection that MHD has not written yet, and
         * MHD_stop_daemon would close it unanswered (seen under ASan: a
         * request logged with status 0). A moment for the answers. */
        end = slim_server_now_us() + SHUTDOWN_LAST_ANSWERS_US;
        while (atomic_load(&srv->in_flight) > 0 && slim_server_now_us() < end)
            usleep(5000);
        return true;
    }
    /* Their clients get a 503 all the same. A run may have ended just now,
     * its task no longer in a run but not yet answered: a moment for it. */
    int64_t left = slim_server_batchers_abandon();
    end = slim_server_now_us() + SHUTDOWN_LAST_ANSWERS_US;
    while ((slim_server_batchers_pending() > left || atomic_load(&srv->in_flight) > left) &&
           slim_server_now_us() < end)
        usleep(5000);
    return slim_server_batchers_pending() == 0;
}
