/*
 * auth.c - the optional API key (--api-key KEY, or SLIMSERVE_API_KEY).
 *
 * With a key set, a request must carry it as "Authorization: Bearer KEY"
 * or "X-API-Key: KEY" (either; the first is what HTTP clients and proxies
 * know, the second what tritonclient's `headers=` makes easy). Otherwise
 * it is answered 401 with WWW-Authenticate: Bearer, before any of its body
 * is read, so an unauthenticated client cannot make the server buffer 64
 * MiB either.
 *
 * Exempt: /v2/health/live and /v2/health/ready, which kubelets and load
 * balancers probe without credentials, and /metrics unless
 * --api-key-metrics: Prometheus scrapes are usually configured without
 * headers, and the figures there name models, not data.
 *
 * The key is compared in constant time (the time depends on the key's
 * length only, never on how many leading bytes a guess got right).
 */
#include "auth.h"
#include "buf.h"
#include "codec.h"
#include "http.h"
#include "server.h"

#include <microhttpd.h>

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* 0 when equal; the loop always runs over the whole key. */
static unsigned diff_const_time(const char *key, const char *given)
{
    size_t nk = strlen(key), ng = strlen(given);
    unsigned diff = nk != ng;
    for (size_t i = 0; i < nk; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < ng ? given[i] : 0);
    return diff;
}

static bool exempt(const slim_server *srv, const char *url)
{
    return strcmp(url, "/v2/health/live") == 0 || strcmp(url, "/v2/health/ready") == 0 ||
           (strcmp(url, "/metrics") == 0 && !srv->opts.api_key_metrics);
}

bool slim_server_auth_key_ok(const char *key, const char *auth, const char *xkey)
{
    bool ok = false;
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
        const char *token = auth + 7;
        while (*token == ' ')
            token++;
        ok = diff_const_time(key, token) == 0;
    }
    if (!ok && xkey)
        ok = diff_const_time(key, xkey) == 0;
    return ok;
}

bool slim_server_auth_check(slim_server_request *req)
{
    const char *key = req->srv->opts.api_key;
    if (!key || exempt(req->srv, req->url))
        return true;
    const char *auth = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    const char *xkey = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-API-Key");
    bool ok = slim_server_auth_key_ok(key, auth, xkey);
    if (ok)
        return true;
    atomic_fetch_add(&req->srv->unauthorized, 1);
    slim_server_reply_error(&req->reply, 401, "%s",
                            (auth || xkey) ? "the API key given is not valid"
                                           : "this endpoint needs an API key: send "
                                             "\"Authorization: Bearer KEY\" or \"X-API-Key: KEY\"");
    req->reply.auth_challenge = true;
    return false;
}

void slim_server_auth_metrics(slim_server *srv, slim_server_buf *out)
{
    slim_server_buf_printf(out,
                           "# HELP slim_http_unauthorized_total Requests answered 401 for a "
                           "missing or wrong API key\n"
                           "# TYPE slim_http_unauthorized_total counter\n"
                           "slim_http_unauthorized_total %llu\n",
                           (unsigned long long)atomic_load(&srv->unauthorized));
}
