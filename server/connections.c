/*
 * connections.c - every open connection, its deadline, and how many there
 * may be.
 *
 * Slow and lying clients. libmicrohttpd (0.9.75) times a connection out only
 * after it has been silent for MHD_OPTION_CONNECTION_TIMEOUT, and then just
 * closes it; it calls us only when bytes arrive, and once a body has begun
 * it lets us queue no reply until the whole body is in. So a client that
 * declares more bytes than it sends, or trickles them, would hold a request
 * open with nothing to tell it why. Deadlines are therefore ours: every
 * connection has a phase (idle, receiving a body, busy) and a deadline, and
 * a watchdog thread acts on the ones that pass. A body past --body-timeout
 * is answered 408 by writing the reply to the socket ourselves (MHD has sent
 * nothing on it while the body is being read) and shutting the socket down,
 * which MHD sees as the client leaving; an idle connection (no request in
 * progress, including one whose headers never finished) is shut down after
 * --idle-timeout. MHD's own timeout stays, longer, as the backstop for a
 * client that stops reading its reply.
 *
 * How many: see slim__conn_accept.
 */
#include "batcher.h"
#include "buf.h"
#include "clock.h"
#include "connections_impl.h"
#include "http.h"
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define HEALTH_LANE 16 /* connections past --max-connections, for health checks */

static void conn_set_locked(slim_server *srv, struct slim_server_conn *c, conn_phase phase)
{
    int timeout_s = phase == CONN_IDLE ? srv->opts.idle_timeout_s
                    : phase == CONN_BODY ? srv->opts.body_timeout_s : 0;
    c->phase = phase;
    c->deadline = timeout_s ? slim_server_now_us() + (int64_t)timeout_s * 1000000 : 0;
}

/* Moves c to phase; false when a deadline already closed it (c NULL: a
 * connection we could not track, left to MHD's timeout). */
bool slim__conn_set(slim_server *srv, struct slim_server_conn *c, conn_phase phase)
{
    if (!c)
        return true;
    pthread_mutex_lock(&srv->conns_mu);
    bool open = c->phase != CONN_CLOSING;
    if (open)
        conn_set_locked(srv, c, phase);
    pthread_mutex_unlock(&srv->conns_mu);
    return open;
}

bool slim__conn_closing(slim_server *srv, struct slim_server_conn *c)
{
    if (!c)
        return false;
    pthread_mutex_lock(&srv->conns_mu);
    bool closing = c->phase == CONN_CLOSING;
    pthread_mutex_unlock(&srv->conns_mu);
    return closing;
}

struct slim_server_conn *slim__conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/* Set by slim__conn_accept for the connection it lets in, read by the
 * "started" notification that follows on the same MHD thread. */
static __thread bool next_in_lane;

void slim__conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    slim_server *srv = cls;
    struct slim_server_conn *c = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!info || !(c = calloc(1, sizeof(*c))))
            return; /* untracked: MHD's timeout still applies */
        c->fd = info->connect_fd;
        c->lane = next_in_lane;
        next_in_lane = false;
        pthread_mutex_lock(&srv->conns_mu);
        conn_set_locked(srv, c, CONN_IDLE);
        c->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = c;
        srv->conns = c;
        srv->n_conns++;
        *(c->lane ? &srv->n_lane : &srv->n_open) += 1;
        pthread_mutex_unlock(&srv->conns_mu);
        *socket_context = c;
    } else if (c) { /* MHD_CONNECTION_NOTIFY_CLOSED */
        pthread_mutex_lock(&srv->conns_mu);
        if (c->prev)
            c->prev->next = c->next;
        else
            srv->conns = c->next;
        if (c->next)
            c->next->prev = c->prev;
        srv->n_conns--;
        if (c->phase != CONN_CLOSING)
            *(c->lane ? &srv->n_lane : &srv->n_open) -= 1;
        bool sender = c->sender;
        pthread_mutex_unlock(&srv->conns_mu);
        if (sender)
            slim_server_batchers_connections(-1);
        free(c);
        *socket_context = NULL;
    }
}

/* Counted from a connection's first inference rather than from its opening:
 * a connection that only asks for health, metadata or statistics (a
 * readiness probe, a metrics scraper on keep-alive) sends no request a batch
 * could wait for, and counting it made every lone request wait the whole
 * max_queue_delay_microseconds while it was open (or for a second after it
 * opened). */
void slim__conn_mark_sender(slim_server *srv, struct slim_server_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&srv->conns_mu);
    bool first = !c->sender && !c->lane;
    if (first)
        c->sender = true;
    pthread_mutex_unlock(&srv->conns_mu);
    if (first)
        slim_server_batchers_connections(1);
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* MHD hands the access handler the path as a C string, decoded: "%00"
 * would end it there, so /v2/models/mlp%00/config read as
 * /v2/models/mlp and answered mlp's metadata. A path or query that
 * decodes to a control byte (or holds one) is marked on its connection,
 * and its request refused 404 before it is routed. */
size_t slim__conn_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    bool control = false;
    for (const char *p = s; *p; p++) {
        int c = (unsigned char)*p, hi, lo;
        if (*p == '%' && (hi = hex_digit(p[1])) >= 0 && (lo = hex_digit(p[2])) >= 0)
            c = hi * 16 + lo;
        control |= c < 0x20 || c == 0x7f;
    }
    struct slim_server_conn *c = control ? slim__conn_of(conn) : NULL;
    if (c) {
        pthread_mutex_lock(&((slim_server *)cls)->conns_mu);
        c->control_in_url = true;
        pthread_mutex_unlock(&((slim_server *)cls)->conns_mu);
    }
    return MHD_http_unescape(s);
}

/* Whether the request's path or query held a control byte; clears the mark
 * for the connection's next request. */
bool slim__conn_take_control_mark(slim_server *srv, struct slim_server_conn *c)
{
    if (!c)
        return false;
    pthread_mutex_lock(&srv->conns_mu);
    bool marked = c->control_in_url;
    c->control_in_url = false;
    pthread_mutex_unlock(&srv->conns_mu);
    return marked;
}

/* The 408, written straight to the socket: MHD cannot queue a reply while
 * a body is being read (see the top of this file). Best effort: the socket
 * is non-blocking and its send buffer is empty at this point, so the short
 * reply goes out whole or the client is gone. */
static void send_408(const slim_server *srv, int fd)
{
    char body[160], msg[400];
    int nb = snprintf(body, sizeof(body),
                      "{\"error\":\"the request body did not arrive within %d s "
                      "(--body-timeout)\"}", srv->opts.body_timeout_s);
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", nb, body);
    if (n > 0 && (size_t)n < sizeof(msg))
        (void)send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Shuts c's socket both ways: the client reads EOF after anything sent,
 * and MHD's next read sees the end too and closes the connection.
 * srv->conns_mu held. */
static void close_conn_locked(slim_server *srv, struct slim_server_conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
    c->phase = CONN_CLOSING;
    c->deadline = 0;
    *(c->lane ? &srv->n_lane : &srv->n_open) -= 1;
}

/* Acts on passed deadlines; sleeps until the next one, at most a second, so
 * a deadline set meanwhile (always at least a second away) is never late. */
static void *watchdog_main(void *arg)
{
    slim_server *srv = arg;
    pthread_mutex_lock(&srv->conns_mu);
    while (!srv->watchdog_stop) {
        int64_t now = slim_server_now_us(), next = now + 1000000;
        for (struct slim_server_conn *c = srv->conns; c; c = c->next) {
            if (!c->deadline)
                continue;
            if (c->deadline > now) {
                next = c->deadline < next ? c->deadline : next;
                continue;
            }
            if (c->phase == CONN_BODY) {
                send_408(srv, c->fd);
                atomic_fetch_add(&srv->body_timeouts, 1);
            } else {
                atomic_fetch_add(&srv->idle_closes, 1);
            }
            close_conn_locked(srv, c);
        }
        struct timespec ts = {.tv_sec = next / 1000000, .tv_nsec = (next % 1000000) * 1000};
        pthread_cond_timedwait(&srv->conns_cv, &srv->conns_mu, &ts);
    }
    pthread_mutex_unlock(&srv->conns_mu);
    return NULL;
}

void slim_server_http_metrics(slim_server *srv, slim_server_buf *out)
{
    pthread_mutex_lock(&srv->conns_mu);
    int64_t n = srv->n_conns;
    pthread_mutex_unlock(&srv->conns_mu);
    slim_server_buf_printf(
        out,
        "# HELP slim_http_connections Open HTTP connections\n"
        "# TYPE slim_http_connections gauge\n"
        "slim_http_connections %lld\n"
        "# HELP slim_http_timeouts_total Connections closed at a deadline: a request body "
        "late past --body-timeout (answered 408), or idle past --idle-timeout\n"
        "# TYPE slim_http_timeouts_total counter\n"
        "slim_http_timeouts_total{phase=\"body\"} %llu\n"
        "slim_http_timeouts_total{phase=\"idle\"} %llu\n"
        "# HELP slim_http_connections_at_limit_total Connections at --max-connections: "
        "idle ones closed to make room (evicted), new ones let in for health checks only "
        "(health_lane) or closed at once (refused)\n"
        "# TYPE slim_http_connections_at_limit_total counter\n"
        "slim_http_connections_at_limit_total{action=\"evicted\"} %llu\n"
        "slim_http_connections_at_limit_total{action=\"health_lane\"} %llu\n"
        "slim_http_connections_at_limit_total{action=\"refused\"} %llu\n",
        (long long)n, (unsigned long long)atomic_load(&srv->body_timeouts),
        (unsigned long long)atomic_load(&srv->idle_closes),
        (unsigned long long)atomic_load(&srv->evicted),
        (unsigned long long)atomic_load(&srv->laned),
        (unsigned long long)atomic_load(&srv->refused));
}

/* ---- the watchdog --------------------------------------------------------- */

/* The deadlines' lock, clock and thread; the watchdog runs before MHD
 * starts, so the first connection already has one. */
slim_status slim__conn_watchdog_start(slim_server *srv, slim_err *err)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* slim_server_now_us's clock */
    pthread_mutex_init(&srv->conns_mu, NULL);
    pthread_cond_init(&srv->conns_cv, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&srv->watchdog, NULL, watchdog_main, srv) != 0) {
        pthread_cond_destroy(&srv->conns_cv);
        pthread_mutex_destroy(&srv->conns_mu);
        return slim_errf(err, SLIM_EIO, "could not start the connection watchdog thread");
    }
    return SLIM_OK;
}

void slim__conn_watchdog_stop(slim_server *srv)
{
    pthread_mutex_lock(&srv->conns_mu);
    srv->watchdog_stop = true;
    pthread_cond_signal(&srv->conns_cv);
    pthread_mutex_unlock(&srv->conns_mu);
    pthread_join(srv->watchdog, NULL);
    pthread_cond_destroy(&srv->conns_cv);
    pthread_mutex_destroy(&srv->conns_mu);
}

/* ---- how many ------------------------------------------------------------- */

/* Every connection is accepted, and --max-connections is kept here rather
 * than by libmicrohttpd. At its limit MHD stops accepting: new connections
 * then wait in the listen backlog, health checks among them, for as long
 * as the connections holding the slots stay (issue 29: 1000 half-open
 * connections from 10 addresses left /v2/health/ready unanswered). Here, a
 * connection that comes at the limit:
 *
 *   1. takes the slot of the connection that has been idle longest (no
 *      request in progress: its headers never finished, or it is kept
 *      alive between requests), which is closed at once; else
 *   2. when every slot is in use (bodies arriving, requests being served),
 *      enters the health lane: HEALTH_LANE connections past the limit that
 *      are answered only /v2/health/live and /v2/health/ready, anything
 *      else 503 at once, and closed after their one reply. A lane
 *      connection is idle until its request is in, and then done within
 *      the call that answers it, so when the lane is full a newcomer takes
 *      the slot of its oldest idle connection: no flood can hold the lane;
 *   3. is closed at once when even that fails (never, in practice).
 *
 * So neither half-open connections nor slow bodies can keep a probe out,
 * and no connection waits unaccepted. MHD's own limit is set high enough
 * never to bind first.
 *
 * Once stopping, a new connection is closed as it is accepted. This is what
 * MHD_quiesce_daemon was for, but libmicrohttpd 0.9.75 aborts the process in
 * it ("Failed to remove listen FD from epoll set") when its thread pool has
 * taken the listen socket out of a worker's epoll set (at the connection
 * limit, under load at shutdown: server_admission_e2e under ASan). */
/* The oldest idle connection of the kind (lane or not); srv->conns_mu
 * held. Idle connections' deadlines were all set idle_timeout_s after
 * they became idle, so the earliest is the oldest. */
static struct slim_server_conn *oldest_idle(slim_server *srv, bool lane)
{
    struct slim_server_conn *oldest = NULL;
    for (struct slim_server_conn *c = srv->conns; c; c = c->next)
        if (c->phase == CONN_IDLE && c->lane == lane && (!oldest || c->deadline < oldest->deadline))
            oldest = c;
    return oldest;
}

enum MHD_Result slim__conn_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    slim_server *srv = cls;
    (void)addr;
    (void)addrlen;
    next_in_lane = false;
    if (atomic_load(&srv->stopping))
        return MHD_NO;
    pthread_mutex_lock(&srv->conns_mu);
    bool room = srv->n_open < srv->opts.max_connections;
    struct slim_server_conn *gone = NULL;
    if (!room && (gone = oldest_idle(srv, false))) {
        close_conn_locked(srv, gone);
        atomic_fetch_add(&srv->evicted, 1);
        room = true;
    }
    if (!room && (srv->n_lane < HEALTH_LANE || (gone = oldest_idle(srv, true)))) {
        if (gone)
            close_conn_locked(srv, gone);
        next_in_lane = room = true;
        atomic_fetch_add(&srv->laned, 1);
    }
    if (!room)
        atomic_fetch_add(&srv->refused, 1);
    pthread_mutex_unlock(&srv->conns_mu);
    return room ? MHD_YES : MHD_NO;
}

bool slim__conn_is_lane(slim_server *srv, struct slim_server_conn *c)
{
    if (!c)
        return false;
    pthread_mutex_lock(&srv->conns_mu);
    bool lane = c->lane;
    pthread_mutex_unlock(&srv->conns_mu);
    return lane;
}

/* MHD shares its limit out among its polling threads, and one thread may
 * take every connection: each share must hold all of ours, plus the ones
 * closed to make room that MHD has not reaped yet. */
#define EVICTED_SLACK (HEALTH_LANE + 48)

unsigned slim__conn_mhd_limit(const slim_server_opts *opts)
{
    uint64_t n = ((uint64_t)opts->max_connections + EVICTED_SLACK) * (uint64_t)opts->http_threads;
    return n > 1000000000u ? 1000000000u : (unsigned)n;
}
