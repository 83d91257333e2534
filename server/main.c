/*
 * main.c - `slimserve --model-repository DIR [options]`
 *
 * Parses the command line, starts the server, and waits for SIGTERM or
 * SIGINT; then it stops accepting, lets in-flight requests finish for up to
 * --shutdown-grace seconds, cancels what still runs (answered 503) and
 * exits 0. The signals are blocked in every thread and taken with sigwait
 * here, so no handler runs in the middle of a request.
 */
#include "alloc.h"
#include "batcher.h"
#include "device.h"
#include "grpc.h"
#include "log.h"
#include "memory.h"
#include "metrics_port.h"
#include "residency.h"
#include "server.h"
#include "trace.h"
#include "version.h"
#include "slim_init.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: slimserve --model-repository DIR [options]\n"
            "  --model-repository DIR   models as DIR/<name>/[config.json] and\n"
            "                           DIR/<name>/<version>/model.onnx\n"
            "  --host ADDR              address to listen on (default 127.0.0.1)\n"
            "  --http-port N            port (default 8000; 0 picks a free one)\n"
            "  --grpc-port N            the KServe v2 / Triton gRPC service's port (default\n"
            "                           8001; 0: no gRPC)\n"
            "  --metrics-port N         /metrics on a port of its own too, as Triton serves it\n"
            "                           (default 8002, skipped with a warning when taken;\n"
            "                           0: off)\n"
            "  --max-request-bytes N    largest request body (default 67108864)\n"
            "  --max-response-bytes N   largest answer; a larger one is refused 507 before\n"
            "                           it is built (default 1GiB; JSON counted at the\n"
            "                           longest each element can print; 0: no limit)\n"
            "  --workers N              threads running each model, unless its config.json\n"
            "                           sets instance_count (default: cores, at most 8)\n"
            "  --queue-size N           requests a model queues before it answers 503, unless\n"
            "                           its config.json sets max_queue_size (default: 64 per\n"
            "                           worker)\n"
            "  --http-threads N         threads parsing and answering HTTP (default 4)\n"
            "  --memory-limit SIZE      cap on the memory the CPU allocator holds, e.g. 2GiB\n"
            "                           (default: none); runs past it fail with out-of-memory;\n"
            "                           DEVICE=SIZE caps that device (cuda:0=20GiB), repeatable\n"
            "  --model-control-mode M   none: load every model at start (default);\n"
            "                           explicit: only --load-model's and the repository\n"
            "                           API's; on-demand: every model listed, loaded at its\n"
            "                           first request. In both, loads evict the least\n"
            "                           recently used idle models to stay under\n"
            "                           --memory-limit (docs/memory.md)\n"
            "  --load-model NAME        load NAME at start (explicit mode), repeatable\n"
            "  --device DEV             where models run unless config.json says (cpu, cuda:N)\n"
            "  --precision P            how they run unless config.json says: fp32 (on a GPU\n"
            "                           products on TF32, as onnxruntime-gpu), fp32-strict\n"
            "                           (no TF32), fp16, bf16 or int8\n"
            "  --convert-cache DIR      convert every ONNX model to .slim once, into DIR,\n"
            "                           and serve the converted file (config.json\n"
            "                           \"convert\": false opts a model out; \"convert\": true\n"
            "                           opts one in without this flag, into\n"
            "                           $SLIMSERVE_CACHE_DIR or ~/.cache/slimserve)\n"
            "  --body-timeout S         a request body not complete S seconds after its\n"
            "                           headers is answered 408 (default 30)\n"
            "  --idle-timeout S         a connection with no request in progress (or whose\n"
            "                           headers are still arriving) is closed after S\n"
            "                           seconds (default 30)\n"
            "  --max-connections N      open connections at most (default 1000)\n"
            "  --max-connections-per-client N\n"
            "                           connections one client address may hold; more are\n"
            "                           closed at once; 0: no limit (default 128)\n"
            "  --api-key KEY            requests need \"Authorization: Bearer KEY\" or\n"
            "                           \"X-API-Key: KEY\" (health checks and /metrics exempt);\n"
            "                           the environment's SLIMSERVE_API_KEY does the same\n"
            "  --api-key-metrics        /metrics needs the key too\n"
            "  --load-timeout S         a model load that takes longer fails (default 300;\n"
            "                           0: no bound)\n"
            "  --shutdown-grace S       on SIGTERM, running requests get S seconds to finish\n"
            "                           before they are cancelled (default 60)\n"
            "  --log-format text|json   log lines as text (default) or one JSON object each\n"
            "  --access-log on|off      one log line per request (default on)\n"
            "  --log-dir DIR            the logging extension may set log_file to a file\n"
            "                           in DIR (without it, log_file stays \"\": stderr)\n"
            "  --trace-dir DIR          the trace extension may set trace_file to a file in\n"
            "                           DIR (without it, nothing can be traced)\n"
            "  --trace-max-bytes SIZE   trace lines one trace_file takes at most; then a\n"
            "                           warning and no more (default 64M)\n");
}

static bool parse_count(const char *flag, const char *v, long long lo, long long hi,
                        long long *out)
{
    char *end;
    long long n = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || n < lo || n > hi) {
        slim_server_log(SLIM_LOG_ERROR, NULL, "%s expects an integer from %lld to %lld", flag,
                        lo, hi);
        return false;
    }
    *out = n;
    return true;
}

/* --metrics-port: kept here, it only concerns main (metrics_port.h). */
static int metrics_port = 8002;
static bool metrics_port_given;
/* --grpc-port: beside the HTTP server's options, which do not know gRPC. */
static int grpc_port = 8001;
static bool grpc_port_given;

/* Takes --grpc-port N out of argv (parse_args sees the rest): the gRPC
 * service is started here, beside the HTTP server, whose options it is not. */
static int take_grpc_port(int *argc, char **argv)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--grpc-port") != 0) {
            argv[out++] = argv[i];
            continue;
        }
        long long n;
        if (!parse_count(argv[i], i + 1 < *argc ? argv[i + 1] : NULL, 0, 65535, &n))
            return 2;
        grpc_port = (int)n;
        grpc_port_given = true;
        i++;
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

/* The options that take a count into an int field of slim_server_opts. */
typedef struct {
    const char *flag;
    long long min, max;
    size_t offset;
} int_flag;

static const int_flag int_flags[] = {
    {"--http-port", 0, 65535, offsetof(slim_server_opts, port)},
    {"--workers", 1, 256, offsetof(slim_server_opts, workers)},
    {"--http-threads", 1, 256, offsetof(slim_server_opts, http_threads)},
    {"--body-timeout", 1, 86400, offsetof(slim_server_opts, body_timeout_s)},
    {"--idle-timeout", 1, 86400, offsetof(slim_server_opts, idle_timeout_s)},
    {"--max-connections", 1, 1000000, offsetof(slim_server_opts, max_connections)},
    {"--max-connections-per-client", 0, 1000000,
     offsetof(slim_server_opts, max_connections_per_client)},
    {"--load-timeout", 0, 86400, offsetof(slim_server_opts, load_timeout_s)},
    {"--shutdown-grace", 0, 3600, offsetof(slim_server_opts, shutdown_grace_s)},
};

static const int_flag *find_int_flag(const char *a)
{
    for (size_t i = 0; i < sizeof(int_flags) / sizeof(int_flags[0]); i++)
        if (strcmp(a, int_flags[i].flag) == 0)
            return &int_flags[i];
    return NULL;
}

/* --memory-limit SIZE caps the CPU; DEVICE=SIZE caps that device
 * (repeatable). false after logging why not. */
static bool parse_memory_limit(const char *v, slim_server_opts *o)
{
    slim_err err = {0};
    const char *eq = strchr(v, '=');
    size_t bytes;
    if (!slim_parse_bytes(eq ? eq + 1 : v, &bytes, &err)) {
        slim_server_log(SLIM_LOG_ERROR, NULL, "--memory-limit: %s", err.msg);
        return false;
    }
    if (!eq || (eq - v == 3 && strncmp(v, "cpu", 3) == 0)) {
        o->memory_limit = bytes;
        return true;
    }
    char name[64];
    slim_device *dev;
    snprintf(name, sizeof(name), "%.*s", (int)(eq - v), v);
    if (slim_device_get(name, &dev, &err) != SLIM_OK) {
        slim_server_log(SLIM_LOG_ERROR, NULL, "--memory-limit %s: %s", v, err.msg);
        return false;
    }
    slim_allocator_set_limit(dev->alloc, bytes);
    return true;
}

/* --log-dir / --trace-dir: the directory the extensions may write in. */
static const char *trace_dir;
static size_t trace_max_bytes;

static bool dir_arg(const char *flag, const char *v)
{
    struct stat st;
    if (!*v || stat(v, &st) != 0 || !S_ISDIR(st.st_mode)) {
        slim_server_log(SLIM_LOG_ERROR, NULL, "%s %s: not a directory", flag, v);
        return false;
    }
    if (strcmp(flag, "--log-dir") == 0)
        slim_server_log_set_dir(v);
    else
        trace_dir = v;
    return true;
}

/* What the options say together; 0, or 2 after logging why not. */
static int check_args(slim_server_opts *o)
{
    if (!o->repository) {
        slim_server_log(SLIM_LOG_ERROR, NULL, "--model-repository is required");
        usage(stderr);
        return 2;
    }
    if (o->max_connections < o->http_threads) {
        /* MHD shares the limit out among its polling threads. */
        slim_server_log(SLIM_LOG_ERROR, NULL, "--max-connections %d is below --http-threads %d",
                        o->max_connections, o->http_threads);
        return 2;
    }
    if (o->control.n_load && o->control.mode != SLIM_SERVER_CONTROL_EXPLICIT) {
        slim_server_log(SLIM_LOG_ERROR, NULL, "--load-model needs --model-control-mode explicit");
        return 2;
    }
    /* The environment keeps the key out of `ps` (a Kubernetes Secret). */
    const char *env_key = getenv("SLIMSERVE_API_KEY");
    if (!o->api_key && env_key && *env_key)
        o->api_key = env_key;
    if (o->api_key_metrics && !o->api_key) {
        slim_server_log(SLIM_LOG_ERROR, NULL, "--api-key-metrics needs --api-key (or "
                        "SLIMSERVE_API_KEY)");
        return 2;
    }
    return 0;
}

static int parse_args(int argc, char **argv, slim_server_opts *o)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long long n;
    int queue = 0;
    *o = (slim_server_opts){.host = "127.0.0.1", .port = 8000,
                            .max_request_bytes = 64u << 20,
                            .max_response_bytes = (size_t)1 << 30,
                            .workers = cores < 1 ? 1 : cores > 8 ? 8 : (int)cores,
                            .http_threads = 4, .body_timeout_s = 30, .idle_timeout_s = 30,
                            .max_connections = 1000, .max_connections_per_client = 128,
                            .shutdown_grace_s = 60, .load_timeout_s = 300};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int_flag *f = find_int_flag(a);
        if (f) {
            if (!parse_count(a, v, f->min, f->max, &n))
                return 2;
            *(int *)((char *)o + f->offset) = (int)n;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--model-repository") == 0 && v) {
            o->repository = v;
        } else if (strcmp(a, "--host") == 0 && v) {
            o->host = v;
        } else if (strcmp(a, "--metrics-port") == 0) {
            if (!parse_count(a, v, 0, 65535, &n))
                return 2;
            metrics_port = n ? (int)n : -1;
            metrics_port_given = true;
        } else if (strcmp(a, "--max-request-bytes") == 0) {
            if (!parse_count(a, v, 1024, 1LL << 40, &n))
                return 2;
            o->max_request_bytes = (size_t)n;
        } else if (strcmp(a, "--max-response-bytes") == 0 && v) {
            slim_err err = {0};
            if (!slim_parse_bytes(v, &o->max_response_bytes, &err)) {
                slim_server_log(SLIM_LOG_ERROR, NULL, "--max-response-bytes: %s", err.msg);
                return 2;
            }
        } else if (strcmp(a, "--queue-size") == 0) {
            if (!parse_count(a, v, 1, 1 << 20, &n))
                return 2;
            queue = (int)n;
        } else if (strcmp(a, "--model-control-mode") == 0 && v) {
            if (!slim_server_control_mode_parse(v, &o->control.mode)) {
                slim_server_log(SLIM_LOG_ERROR, NULL, "--model-control-mode expects none, "
                                "explicit or on-demand");
                return 2;
            }
        } else if (strcmp(a, "--load-model") == 0 && v) {
            static const char *names[256];
            if (o->control.n_load == 256) {
                slim_server_log(SLIM_LOG_ERROR, NULL, "--load-model: at most 256");
                return 2;
            }
            names[o->control.n_load++] = v;
            o->control.load = names;
        } else if (strcmp(a, "--device") == 0 && v) {
            o->device = v;
        } else if (strcmp(a, "--precision") == 0 && v) {
            o->precision = v;
        } else if (strcmp(a, "--convert-cache") == 0 && v) {
            o->convert_cache = v;
        } else if (strcmp(a, "--memory-limit") == 0 && v) {
            if (!parse_memory_limit(v, o))
                return 2;
        } else if (strcmp(a, "--api-key") == 0 && v) {
            if (!*v) {
                slim_server_log(SLIM_LOG_ERROR, NULL, "--api-key: the key is empty");
                return 2;
            }
            o->api_key = v;
        } else if (strcmp(a, "--api-key-metrics") == 0) {
            o->api_key_metrics = true;
            continue; /* takes no value */
        } else if (strcmp(a, "--log-format") == 0 && v) {
            slim_log_format f;
            if (!slim_server_log_parse_format(v, &f)) {
                slim_server_log(SLIM_LOG_ERROR, NULL, "--log-format expects text or json");
                return 2;
            }
            slim_server_log_init(f, slim_server_log_access_enabled());
        } else if ((strcmp(a, "--log-dir") == 0 || strcmp(a, "--trace-dir") == 0) && v) {
            if (!dir_arg(a, v))
                return 2;
        } else if (strcmp(a, "--trace-max-bytes") == 0 && v) {
            slim_err err = {0};
            if (!slim_parse_bytes(v, &trace_max_bytes, &err) || !trace_max_bytes) {
                slim_server_log(SLIM_LOG_ERROR, NULL, "--trace-max-bytes: %s",
                                err.msg[0] ? err.msg : "must be above 0");
                return 2;
            }
        } else if (strcmp(a, "--access-log") == 0 && v) {
            if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
                slim_server_log(SLIM_LOG_ERROR, NULL, "--access-log expects on or off");
                return 2;
            }
            slim_server_log_init(slim_server_log_format(), strcmp(v, "on") == 0);
        } else {
            slim_server_log(SLIM_LOG_ERROR, NULL, "unknown or incomplete option \"%s\"", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    o->queue_capacity = queue ? queue : 64 * o->workers;
    return check_args(o);
}

/* Each connection is a file descriptor, and the common soft limit of 1024
 * would run out before --max-connections 1000 does (models and threads hold
 * some too): raise it toward the hard limit, and say when that is short. */
static void raise_fd_limit(int max_connections)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)max_connections + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < want)
        slim_server_log(SLIM_LOG_WARN, NULL, "warning: only %llu file descriptors (ulimit -n) "
                        "for --max-connections %d; connections past that are refused",
                        (unsigned long long)rl.rlim_cur, max_connections);
}

static pid_t main_tid;

/* Runs on a thread that does not block the stop signals (see main):
 * tgkill is async-signal-safe, and the main thread takes the signal from
 * its pending set with sigtimedwait. */
static void forward_stop_signal(int sig)
{
    syscall(SYS_tgkill, (pid_t)getpid(), main_tid, sig);
}

int main(int argc, char **argv)
{
    slim_init();
    slim_server_opts opts;
    int rc = take_grpc_port(&argc, argv);
    if (!rc)
        rc = parse_args(argc, argv, &opts);
    if (rc)
        return rc;

    slim_server_trace_init(trace_dir, trace_max_bytes);
    raise_fd_limit(opts.max_connections);
    slim_server_memory_tune_heap();

    /* Block before any thread starts, so every thread inherits the mask. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    /* Threads a library started before main (OpenBLAS's pool, at load)
     * did not inherit the mask: a stop signal the kernel gives one of them
     * is handed on to this thread instead of killing the process. */
    main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction fwd = {.sa_handler = forward_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&fwd.sa_mask);
    sigaction(SIGINT, &fwd, NULL);
    sigaction(SIGTERM, &fwd, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Before any model loads, so weights count against the limit too. */
    if (opts.memory_limit)
        slim_allocator_set_limit(slim_device_cpu()->alloc, opts.memory_limit);

    slim_server srv;
    slim_err err = {0};
    if (slim_server_start(&srv, &opts, &err) != SLIM_OK) {
        slim_server_log(SLIM_LOG_ERROR, NULL, "%s", err.msg);
        return 1;
    }
    /* After the models have loaded, like the HTTP port. The default port
     * may be taken (a second server on the machine): that costs only the
     * extra port, /metrics stays on the HTTP one. One asked for must work. */
    slim_server_metrics_port *mp = NULL;
    if (metrics_port >= 0 && !(mp = slim_server_metrics_port_start(&srv, metrics_port, &err))) {
        if (metrics_port_given) {
            slim_server_log(SLIM_LOG_ERROR, NULL, "%s", err.msg);
            slim_server_stop(&srv);
            return 1;
        }
        slim_server_log(SLIM_LOG_WARN, NULL, "%s; /metrics is served on the HTTP port only",
                        err.msg);
    }
    if (mp)
        slim_server_log(SLIM_LOG_INFO, NULL, "metrics on http://%s:%d/metrics", opts.host,
                        slim_server_metrics_port_bound(mp));
    /* gRPC beside HTTP. A build without it serves HTTP alone, and says so
     * when the port was asked for by name. */
    slim_server_grpc *grpc = NULL;
    if (grpc_port && slim_server_grpc_available()) {
        if (slim_server_grpc_start(&srv, opts.host, grpc_port, &grpc, &err) != SLIM_OK) {
            /* Asked for by name, a port that cannot be had is fatal; the
             * default one (another server on this host holds 8001) is not. */
            if (grpc_port_given) {
                slim_server_log(SLIM_LOG_ERROR, NULL, "%s", err.msg);
                slim_server_metrics_port_stop(mp);
                slim_server_stop(&srv);
                return 1;
            }
            slim_server_log(SLIM_LOG_WARN, NULL, "%s; serving HTTP only", err.msg);
        } else {
            slim_server_log(SLIM_LOG_INFO, NULL, "gRPC (inference.GRPCInferenceService) on "
                            "%s:%d", opts.host, slim_server_grpc_port(grpc));
        }
    } else if (grpc_port && grpc_port_given) {
        slim_server_log(SLIM_LOG_WARN, NULL, "--grpc-port %d: this slimserve was built without "
                        "gRPC (libgrpc-dev was not found); serving HTTP only", grpc_port);
    }
    atomic_store(&srv.serving, true);
    /* Text: on stdout, as it always was. JSON: a log line like the rest. */
    if (slim_server_log_format() == SLIM_LOG_TEXT) {
        printf("slimserve %s: listening on http://%s:%d (repository %s, %d workers)\n",
               SLIM_SERVER_VERSION, opts.host, srv.port, opts.repository, opts.workers);
        fflush(stdout);
    } else {
        slim_server_log(SLIM_LOG_INFO, NULL, "slimserve %s: listening on http://%s:%d "
                        "(repository %s, %d workers%s)", SLIM_SERVER_VERSION, opts.host,
                        srv.port, opts.repository, opts.workers,
                        opts.api_key ? ", API key required" : "");
    }

    /* The main thread waits for a stop signal and, meanwhile, hands the
     * heaps' free pages back every few seconds, so resident memory follows
     * the load down instead of keeping its high-water mark. */
    int sig;
    do {
        struct timespec every = {.tv_sec = 5};
        sig = sigtimedwait(&stop_signals, NULL, &every);
        if (sig < 0)
            slim_server_memory_trim_heap();
    } while (sig < 0);
    slim_server_log(SLIM_LOG_INFO, NULL, "%s received, finishing in-flight requests "
                    "(--shutdown-grace %d s)", sig == SIGINT ? "SIGINT" : "SIGTERM",
                    opts.shutdown_grace_s);
    slim_server_metrics_port_stop(mp);
    /* No new gRPC calls; those under way drain with the HTTP requests. */
    slim_server_grpc_shutdown(grpc);
    if (!slim_server_stop(&srv)) {
        /* A run that does not stop when cancelled (a kernel that never
         * checks) holds its connection suspended, and libmicrohttpd aborts
         * when stopped with one: leave without freeing, as promised, 0. */
        slim_server_log(SLIM_LOG_WARN, NULL, "stopped with %lld requests still running after "
                        "being cancelled", (long long)slim_server_batchers_pending());
        fflush(NULL);
        _exit(0);
    }
    slim_server_grpc_free(grpc);
    slim_server_trace_close();
    slim_server_log(SLIM_LOG_INFO, NULL, "stopped");
    return 0;
}
