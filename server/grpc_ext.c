/*
 * grpc_ext.c - LogSettings and TraceSetting, the gRPC side of Triton's
 * logging and trace extensions: the same settings as GET/POST /v2/logging
 * and /v2[/models/M]/trace/setting (routes_ext.c), through log.c and
 * trace.c, with INVALID_ARGUMENT where HTTP answers 400.
 */
#include "grpc_impl.h"
#include "inference.pb-c.h"
#include "log.h"
#include "repository.h"
#include "server.h"
#include "trace.h"

#include <stdio.h>
#include <string.h>

/* As HTTP's: more settings than any extension defines are refused. */
#define MAX_SETTINGS 16

/* ---- logging ------------------------------------------------------------ */

static void reply_log_settings(slim__grpc_call *c)
{
    slim_server_log_settings s;
    slim_server_log_settings_get(&s);
    Inference__LogSettingsResponse__SettingValue vals[6];
    Inference__LogSettingsResponse__SettingsEntry ents[6], *ep[6];
    static const char *const KEY[6] = {"log_file", "log_info", "log_warnings", "log_errors",
                                       "log_verbose_level", "log_format"};
    for (int i = 0; i < 6; i++) {
        inference__log_settings_response__setting_value__init(&vals[i]);
        inference__log_settings_response__settings_entry__init(&ents[i]);
        ents[i].key = (char *)KEY[i];
        ents[i].value = &vals[i];
        ep[i] = &ents[i];
    }
    vals[0].parameter_choice_case = INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM;
    vals[0].string_param = s.file;
    bool flags[3] = {s.info, s.warnings, s.errors};
    for (int i = 1; i <= 3; i++) {
        vals[i].parameter_choice_case = INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM;
        vals[i].bool_param = flags[i - 1];
    }
    vals[4].parameter_choice_case = INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM;
    vals[4].uint32_param = s.verbose_level;
    vals[5].parameter_choice_case = INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM;
    vals[5].string_param = (char *)slim_server_log_format_name(s.format);
    Inference__LogSettingsResponse r = INFERENCE__LOG_SETTINGS_RESPONSE__INIT;
    r.n_settings = 6;
    r.settings = ep;
    slim__grpc_reply(c, &r.base);
}

void slim__grpc_log_settings(slim__grpc_call *c)
{
    Inference__LogSettingsRequest *q =
        (void *)slim__grpc_unpack(c, &inference__log_settings_request__descriptor);
    if (!q)
        return;
    char err[600] = "";
    bool ok = q->n_settings <= MAX_SETTINGS;
    if (!ok)
        snprintf(err, sizeof(err), "the request names more than %d settings", MAX_SETTINGS);
    slim_server_log_value vals[MAX_SETTINGS];
    for (size_t i = 0; ok && i < q->n_settings; i++) {
        const Inference__LogSettingsRequest__SettingsEntry *e = q->settings[i];
        vals[i] = (slim_server_log_value){.key = e->key ? e->key : ""};
        switch (e->value ? e->value->parameter_choice_case : 0) {
        case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM:
            vals[i].type = SLIM_LOG_VALUE_BOOL, vals[i].b = e->value->bool_param;
            break;
        case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM:
            vals[i].type = SLIM_LOG_VALUE_UINT, vals[i].u = e->value->uint32_param;
            break;
        case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM:
            vals[i].type = SLIM_LOG_VALUE_STRING, vals[i].s = e->value->string_param;
            break;
        default:
            snprintf(err, sizeof(err), "log setting \"%.100s\" has no value", vals[i].key);
            ok = false;
        }
    }
    if (ok)
        ok = slim_server_log_settings_update(vals, q->n_settings, err, sizeof(err));
    inference__log_settings_request__free_unpacked(q, NULL);
    if (!ok) {
        slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
        return;
    }
    reply_log_settings(c);
}

/* ---- trace -------------------------------------------------------------- */

static void reply_trace_settings(slim__grpc_call *c, const char *model)
{
    slim_server_trace_view v;
    slim_server_trace_get(model, &v);
    static const char *const KEY[5] = {"trace_level", "trace_rate", "trace_count",
                                       "log_frequency", "trace_file"};
    char *strs[5] = {(char *)v.level, v.rate, v.count, v.log_frequency, v.file};
    Inference__TraceSettingResponse__SettingValue vals[5];
    Inference__TraceSettingResponse__SettingsEntry ents[5], *ep[5];
    for (int i = 0; i < 5; i++) {
        inference__trace_setting_response__setting_value__init(&vals[i]);
        inference__trace_setting_response__settings_entry__init(&ents[i]);
        vals[i].n_value = 1;
        vals[i].value = &strs[i];
        ents[i].key = (char *)KEY[i];
        ents[i].value = &vals[i];
        ep[i] = &ents[i];
    }
    Inference__TraceSettingResponse r = INFERENCE__TRACE_SETTING_RESPONSE__INIT;
    r.n_settings = 5;
    r.settings = ep;
    slim__grpc_reply(c, &r.base);
}

void slim__grpc_trace_setting(slim__grpc_call *c)
{
    Inference__TraceSettingRequest *q =
        (void *)slim__grpc_unpack(c, &inference__trace_setting_request__descriptor);
    if (!q)
        return;
    const char *model = q->model_name && *q->model_name ? q->model_name : NULL;
    if (model) { /* as HTTP: a model the repository does not have is refused */
        int status = 404;
        char msg[1200];
        slim_server_model *m = slim_server_repo_acquire(&c->g->srv->repo, model, -1, &status,
                                                        msg, sizeof(msg));
        slim_server_model_release(m);
        if (!m && status == 404) {
            inference__trace_setting_request__free_unpacked(q, NULL);
            slim__grpc_fail(c, GRPC_STATUS_NOT_FOUND, "%s", msg);
            return;
        }
    }
    char err[600] = "";
    bool ok = q->n_settings <= MAX_SETTINGS;
    if (!ok)
        snprintf(err, sizeof(err), "the request names more than %d settings", MAX_SETTINGS);
    slim_server_trace_value vals[MAX_SETTINGS];
    for (size_t i = 0; ok && i < q->n_settings; i++) {
        const Inference__TraceSettingRequest__SettingsEntry *e = q->settings[i];
        vals[i] = (slim_server_trace_value){
            .key = e->key ? e->key : "",
            .vals = e->value ? (const char *const *)e->value->value : NULL,
            .n = e->value ? e->value->n_value : 0};
    }
    /* No settings: a get (tritonclient's get_trace_settings sends just
     * the model's name), so over gRPC a model's own settings are cleared
     * one by one (empty values); HTTP's POST {} removes them all. */
    if (ok && q->n_settings)
        ok = slim_server_trace_update(model, vals, q->n_settings, err, sizeof(err));
    if (!ok) {
        inference__trace_setting_request__free_unpacked(q, NULL);
        slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
        return;
    }
    reply_trace_settings(c, model);
    inference__trace_setting_request__free_unpacked(q, NULL);
}
