/*
 * version_policy.c - which version folders of a model are loaded, from
 * config.json's "version_policy", with Triton's three forms:
 *
 *     "version_policy": {"latest": {"num_versions": 2}}    the 2 highest
 *     "version_policy": {"all": {}}                        every one
 *     "version_policy": {"specific": {"versions": [1, 3]}} those listed
 *
 * Absent, it is Triton's default, {"latest": {"num_versions": 1}}: a
 * repository that keeps old versions on disk does not pay memory for them.
 * A version left out is never loaded; repository.c lists it UNAVAILABLE
 * ("unloaded by version policy") and answers requests for it 404.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#define MAX_VERSION 999999999999999.0 /* 15 digits: repository.c's folder names */

static bool is_int(const cJSON *v, double lo, double hi)
{
    return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi &&
           v->valuedouble == (double)(int64_t)v->valuedouble;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static slim_status parse_latest(const cJSON *o, slim_server_version_policy *p, slim_err *err)
{
    p->kind = SLIM_SERVER_VERSIONS_LATEST;
    p->num_versions = 1;
    for (const cJSON *k = o->child; k; k = k->next) {
        if (strcmp(k->string, "num_versions") != 0)
            return slim_errf(err, SLIM_EINVAL, "config.json: version_policy.latest: unknown key "
                             "\"%s\" (expected \"num_versions\")", k->string);
        if (!is_int(k, 1, 1 << 20))
            return slim_errf(err, SLIM_EINVAL, "config.json: version_policy.latest.num_versions: "
                             "expected an integer from 1 to %d", 1 << 20);
        p->num_versions = (int)k->valuedouble;
    }
    return SLIM_OK;
}

static slim_status parse_specific(const cJSON *o, slim_server_version_policy *p, slim_err *err)
{
    p->kind = SLIM_SERVER_VERSIONS_SPECIFIC;
    const cJSON *vs = NULL;
    for (const cJSON *k = o->child; k; k = k->next) {
        if (strcmp(k->string, "versions") != 0)
            return slim_errf(err, SLIM_EINVAL, "config.json: version_policy.specific: unknown key "
                             "\"%s\" (expected \"versions\")", k->string);
        vs = k;
    }
    int n = cJSON_IsArray(vs) ? cJSON_GetArraySize(vs) : 0;
    if (n == 0 || n > 256)
        return slim_errf(err, SLIM_EINVAL, "config.json: version_policy.specific.versions: "
                         "expected a list of 1 to 256 version numbers");
    if (!(p->versions = calloc((size_t)n, sizeof(*p->versions))))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    for (const cJSON *e = vs->child; e; e = e->next) {
        if (!is_int(e, 0, MAX_VERSION))
            return slim_errf(err, SLIM_EINVAL, "config.json: version_policy.specific.versions: "
                             "expected version numbers (integers >= 0)");
        p->versions[p->n_versions++] = (int64_t)e->valuedouble;
    }
    qsort(p->versions, (size_t)p->n_versions, sizeof(int64_t), cmp_i64);
    for (int i = 1; i < p->n_versions; i++)
        if (p->versions[i] == p->versions[i - 1])
            return slim_errf(err, SLIM_EINVAL, "config.json: version_policy.specific.versions: "
                             "version %lld is listed twice", (long long)p->versions[i]);
    return SLIM_OK;
}

slim_status slim_server_version_policy_parse(const cJSON *v, slim_server_version_policy *p,
                                             slim_err *err)
{
    slim_server_version_policy_free(p);
    if (!cJSON_IsObject(v) || !v->child || v->child->next)
        return slim_errf(err, SLIM_EINVAL, "config.json: \"version_policy\": expected an object "
                         "with one key: \"latest\", \"all\" or \"specific\"");
    const cJSON *k = v->child;
    if (!cJSON_IsObject(k))
        return slim_errf(err, SLIM_EINVAL, "config.json: version_policy.%.40s: expected an object",
                         k->string);
    if (strcmp(k->string, "latest") == 0)
        return parse_latest(k, p, err);
    if (strcmp(k->string, "specific") == 0)
        return parse_specific(k, p, err);
    if (strcmp(k->string, "all") == 0) {
        if (k->child)
            return slim_errf(err, SLIM_EINVAL, "config.json: version_policy.all: expected {} "
                             "(it takes no keys; \"%s\" given)", k->child->string);
        p->kind = SLIM_SERVER_VERSIONS_ALL;
        return SLIM_OK;
    }
    return slim_errf(err, SLIM_EINVAL, "config.json: version_policy: unknown policy \"%s\" "
                     "(expected \"latest\", \"all\" or \"specific\")", k->string);
}

bool slim_server_version_policy_selects(const slim_server_version_policy *p,
                                        const int64_t *all, int n, int i)
{
    switch (p->kind) {
    case SLIM_SERVER_VERSIONS_ALL:
        return true;
    case SLIM_SERVER_VERSIONS_SPECIFIC:
        return bsearch(&all[i], p->versions, (size_t)p->n_versions, sizeof(int64_t),
                       cmp_i64) != NULL;
    default: /* latest: `all` is ascending */
        return i >= n - (p->num_versions > 0 ? p->num_versions : 1);
    }
}

cJSON *slim_server_version_policy_to_json(const slim_server_version_policy *p)
{
    cJSON *o = cJSON_CreateObject(), *inner = cJSON_CreateObject();
    if (!o || !inner) {
        cJSON_Delete(o);
        cJSON_Delete(inner);
        return NULL;
    }
    if (p->kind == SLIM_SERVER_VERSIONS_ALL) {
        cJSON_AddItemToObject(o, "all", inner);
    } else if (p->kind == SLIM_SERVER_VERSIONS_SPECIFIC) {
        cJSON *vs = cJSON_AddArrayToObject(inner, "versions");
        for (int i = 0; vs && i < p->n_versions; i++)
            cJSON_AddItemToArray(vs, cJSON_CreateNumber((double)p->versions[i]));
        cJSON_AddItemToObject(o, "specific", inner);
    } else {
        cJSON_AddNumberToObject(inner, "num_versions", p->num_versions > 0 ? p->num_versions : 1);
        cJSON_AddItemToObject(o, "latest", inner);
    }
    return o;
}

void slim_server_version_policy_free(slim_server_version_policy *p)
{
    free(p->versions);
    memset(p, 0, sizeof(*p));
    p->kind = SLIM_SERVER_VERSIONS_LATEST;
    p->num_versions = 1;
}
