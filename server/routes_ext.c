/*
 * routes_ext.c - the HTTP endpoints of Triton's logging and trace
 * extensions (docs/triton-extensions.md):
 *
 *   GET|POST /v2/logging                        log settings (log.c)
 *   GET|POST /v2/trace/setting                  global trace settings (trace.c)
 *   GET|POST /v2/models/M/trace/setting         model M's trace settings
 *
 * A POST changes only the settings it names, all or none (a bad one is
 * 400 naming the field), and answers the settings now in effect, as GET
 * does. Both are behind the API key like every endpoint but health.
 */
#include "codec.h"
#include "http.h"
#include "log.h"
#include "repository.h"
#include "routes.h"
#include "server.h"
#include "trace.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* More keys than any extension defines: a body with more is refused
 * before anything is looked at. */
#define MAX_SETTINGS 16

/* The body as a JSON object (an empty body is {}); NULL with the reply set. */
static cJSON *settings_body(slim_server_request *req)
{
    slim_err err = {0};
    cJSON *o = req->body_len ? slim_server_json_parse(req->body, req->body_len, &err)
                             : cJSON_CreateObject();
    if (!o) {
        slim_server_reply_error(&req->reply, 400, "%s", err.msg[0] ? err.msg : "out of memory");
        return NULL;
    }
    if (!cJSON_IsObject(o) || cJSON_GetArraySize(o) > MAX_SETTINGS) {
        slim_server_reply_error(&req->reply, 400, cJSON_IsObject(o)
                                ? "the request body names more than %d settings"
                                : "the request body must be a JSON object of settings",
                                MAX_SETTINGS);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- logging ------------------------------------------------------------ */

static void reply_log_settings(slim_server_request *req)
{
    slim_server_log_settings s;
    slim_server_log_settings_get(&s);
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "log_file", s.file);
        cJSON_AddBoolToObject(o, "log_info", s.info);
        cJSON_AddBoolToObject(o, "log_warnings", s.warnings);
        cJSON_AddBoolToObject(o, "log_errors", s.errors);
        cJSON_AddNumberToObject(o, "log_verbose_level", s.verbose_level);
        cJSON_AddStringToObject(o, "log_format", slim_server_log_format_name(s.format));
    }
    slim_server_reply_json(&req->reply, 200, o);
}

void slim_server_route_logging(slim_server_request *req, bool post)
{
    if (!post) {
        reply_log_settings(req);
        return;
    }
    cJSON *o = settings_body(req);
    if (!o)
        return;
    slim_server_log_value vals[MAX_SETTINGS];
    size_t n = 0;
    for (const cJSON *e = o->child; e; e = e->next, n++) {
        slim_server_log_value *v = &vals[n];
        *v = (slim_server_log_value){.key = e->string};
        if (cJSON_IsBool(e)) {
            v->type = SLIM_LOG_VALUE_BOOL, v->b = cJSON_IsTrue(e);
        } else if (cJSON_IsString(e)) {
            v->type = SLIM_LOG_VALUE_STRING, v->s = e->valuestring;
        } else if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble <= 4294967295.0 &&
                   floor(e->valuedouble) == e->valuedouble) {
            v->type = SLIM_LOG_VALUE_UINT, v->u = (uint64_t)e->valuedouble;
        } else {
            slim_server_reply_error(&req->reply, 400, "log setting \"%.100s\" must be a boolean, "
                                    "an unsigned 32-bit integer or a string", e->string);
            cJSON_Delete(o);
            return;
        }
    }
    char err[600];
    bool ok = slim_server_log_settings_update(vals, n, err, sizeof(err));
    cJSON_Delete(o);
    if (!ok) {
        slim_server_reply_error(&req->reply, 400, "%s", err);
        return;
    }
    reply_log_settings(req);
}

/* ---- trace -------------------------------------------------------------- */

static void reply_trace_settings(slim_server_request *req, const char *model)
{
    slim_server_trace_view v;
    slim_server_trace_get(model, &v);
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddItemToObject(o, "trace_level", cJSON_CreateStringArray(&v.level, 1));
        cJSON_AddStringToObject(o, "trace_rate", v.rate);
        cJSON_AddStringToObject(o, "trace_count", v.count);
        cJSON_AddStringToObject(o, "log_frequency", v.log_frequency);
        cJSON_AddStringToObject(o, "trace_file", v.file);
    }
    slim_server_reply_json(&req->reply, 200, o);
}

/* One member of the body as the values of a setting: a string, a list of
 * strings, a whole number (written as Triton's strings are), or null
 * (clear it). num holds the number's text. */
static bool trace_value(const cJSON *e, const char *vals[MAX_SETTINGS], char num[24],
                        slim_server_trace_value *out)
{
    *out = (slim_server_trace_value){.key = e->string, .vals = vals};
    if (cJSON_IsNull(e))
        return true;
    if (cJSON_IsString(e)) {
        vals[0] = e->valuestring, out->n = 1;
        return true;
    }
    if (cJSON_IsNumber(e) && fabs(e->valuedouble) < 1e15 &&
        floor(e->valuedouble) == e->valuedouble) {
        snprintf(num, 24, "%.0f", e->valuedouble);
        vals[0] = num, out->n = 1;
        return true;
    }
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) > MAX_SETTINGS)
        return false;
    for (const cJSON *x = e->child; x; x = x->next) {
        if (!cJSON_IsString(x))
            return false;
        vals[out->n++] = x->valuestring;
    }
    return true;
}

void slim_server_route_trace(slim_server_request *req, const char *model, bool post)
{
    /* Settings of a model the repository does not have are refused; one
     * that is not loaded now (unloaded, not resident) may have them. */
    if (model) {
        int status = 404;
        char msg[1200];
        slim_server_model *m = slim_server_repo_acquire(&req->srv->repo, model, -1, &status,
                                                        msg, sizeof(msg));
        slim_server_model_release(m);
        if (!m && status == 404) {
            slim_server_reply_error(&req->reply, 404, "%s", msg);
            return;
        }
    }
    if (!post) {
        reply_trace_settings(req, model);
        return;
    }
    cJSON *o = settings_body(req);
    if (!o)
        return;
    const char *strs[MAX_SETTINGS][MAX_SETTINGS];
    char nums[MAX_SETTINGS][24];
    slim_server_trace_value vals[MAX_SETTINGS];
    size_t n = 0;
    for (const cJSON *e = o->child; e; e = e->next, n++)
        if (!trace_value(e, strs[n], nums[n], &vals[n])) {
            slim_server_reply_error(&req->reply, 400, "trace setting \"%.100s\" must be a "
                                    "string, a list of strings or null", e->string);
            cJSON_Delete(o);
            return;
        }
    char err[600];
    bool ok = slim_server_trace_update(model, vals, n, err, sizeof(err));
    cJSON_Delete(o);
    if (!ok) {
        slim_server_reply_error(&req->reply, 400, "%s", err);
        return;
    }
    reply_trace_settings(req, model);
}
