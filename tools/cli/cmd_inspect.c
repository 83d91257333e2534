/*
 * cmd_inspect.c - `slim inspect MODEL`: what a model takes, gives and holds.
 *
 * Prints inputs and outputs (dtypes, shapes with symbolic dims by name),
 * IR version, opset, producer, node count, op counts (most used first),
 * parameter count and weight bytes.
 *
 * A model that slimserve cannot run (an operator it lacks) is still worth
 * inspecting - that is often why one inspects it - so when loading fails
 * with EUNSUPPORTED the graph is read again without finalizing it, and the
 * report ends with the reason the model would not run.
 *
 * The graph is shown as written; --optimized shows it after the load-time
 * passes (passes/pass.h), node by node, which is what runs.
 *
 * With --memory [--batch N] it prints the activation arena plan for batch
 * N instead (plan.h): one line per arena buffer, then "arena_bytes: N",
 * "lower_bound_bytes: N" and friends as plain integers for scripts, and
 * the weight bytes.
 */
#include "cli.h"
#include "int8.h"
#include "half.h"
#include "prune.h"
#include "model.h"
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct op_count {
    const char *domain;
    const char *op_type;
    int count;
} op_count;

static void print_io(const char *title, int n, const slim_io_info *const *infos)
{
    printf("%s (%d):\n", title, n);
    int width = 0;
    for (int i = 0; i < n; i++) {
        int len = (int)strlen(infos[i]->name);
        width = len > width ? len : width;
    }
    for (int i = 0; i < n; i++) {
        char shape[512];
        printf("  %-*s  %s %s\n", width, infos[i]->name,
               infos[i]->dtype ? slim_dtype_name(infos[i]->dtype) : "(type unknown)",
               slim_cli_declared_shape(infos[i], shape, sizeof(shape)));
    }
}

static int cmp_op_count(const void *a, const void *b)
{
    const op_count *x = a, *y = b;
    if (x->count != y->count)
        return y->count - x->count;
    int d = strcmp(x->domain, y->domain);
    return d ? d : strcmp(x->op_type, y->op_type);
}

static void print_ops(const slim_graph *g)
{
    op_count *counts = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(*counts));
    if (!counts) {
        fprintf(stderr, "slim inspect: out of memory\n");
        return;
    }
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *node = &g->nodes[i];
        const char *domain = node->domain ? node->domain : "";
        int j = 0;
        while (j < n && (strcmp(counts[j].op_type, node->op_type) != 0 ||
                         strcmp(counts[j].domain, domain) != 0))
            j++;
        if (j == n)
            counts[n++] = (op_count){domain, node->op_type, 0};
        counts[j].count++;
    }
    qsort(counts, (size_t)n, sizeof(*counts), cmp_op_count);
    printf("nodes: %d\n", g->n_nodes);
    printf("ops (%d types):\n", n);
    for (int i = 0; i < n; i++) {
        char label[256];
        if (counts[i].domain[0] && strcmp(counts[i].domain, "ai.onnx") != 0)
            snprintf(label, sizeof(label), "%s.%s", counts[i].domain, counts[i].op_type);
        else
            snprintf(label, sizeof(label), "%s", counts[i].op_type);
        printf("  %-24s %d\n", label, counts[i].count);
    }
    free(counts);
}

static void print_size(size_t bytes)
{
    if (bytes >= (size_t)1 << 30)
        printf(" (%.2f GiB)", (double)bytes / (double)((size_t)1 << 30));
    else if (bytes >= (size_t)1 << 20)
        printf(" (%.2f MiB)", (double)bytes / (double)((size_t)1 << 20));
    else if (bytes >= 1024)
        printf(" (%.2f KiB)", (double)bytes / 1024.0);
}

/* Everything but the parameter figures reads the graph; the io tables come
 * from the model when there is one, else from the raw graph's values. */
static void print_model(const char *path, const slim_graph *g, const slim_model *m,
                        int64_t params, size_t weight_bytes)
{
    printf("model: %s\n", path);
    if (g->name && g->name[0])
        printf("graph: %s\n", g->name);
    printf("ir_version: %lld\n", (long long)g->ir_version);
    printf("opset: %d\n", g->opset);
    printf("producer: %s\n", g->producer_name && g->producer_name[0] ? g->producer_name
                                                                      : "(none)");

    int n_in = m ? slim_model_num_inputs(m) : g->n_inputs;
    int n_out = m ? slim_model_num_outputs(m) : g->n_outputs;
    const slim_io_info **infos = malloc(sizeof(*infos) * (size_t)(n_in + n_out + 1));
    if (!infos) {
        fprintf(stderr, "slim inspect: out of memory\n");
        return;
    }
    for (int i = 0; i < n_in; i++)
        infos[i] = m ? slim_model_input(m, i) : &g->values[g->inputs[i]].info;
    for (int i = 0; i < n_out; i++)
        infos[n_in + i] = m ? slim_model_output(m, i) : &g->values[g->outputs[i]].info;
    print_io("inputs", n_in, infos);
    print_io("outputs", n_out, infos + n_in);
    free(infos);

    print_ops(g);
    printf("parameters: %lld\n", (long long)params);
    printf("weight bytes: %zu", weight_bytes);
    print_size(weight_bytes);
    printf("\n");
}

/* The arena plan for one batch size. Each input's first dim is the batch
 * when it is dynamic; other dynamic dims take 1, said on stderr, as the
 * model declares no better guess. */
static int print_memory(const char *path, const slim_model *m, int64_t batch)
{
    int n = slim_model_num_inputs(m);
    slim_tensor *sig = calloc((size_t)(n ? n : 1), sizeof(slim_tensor));
    if (!sig) {
        fprintf(stderr, "slim inspect: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const slim_io_info *info = slim_model_input(m, i);
        if (info->dtype == SLIM_DTYPE_UNDEFINED || info->ndim < 0) {
            fprintf(stderr, "slim inspect: input \"%s\" declares no %s, so its memory cannot "
                    "be planned\n", info->name, info->ndim < 0 ? "rank" : "data type");
            free(sig);
            return 1;
        }
        sig[i].dtype = info->dtype;
        sig[i].ndim = info->ndim;
        for (int d = 0; d < info->ndim; d++) {
            int64_t dim = info->dims[d];
            if (dim >= 0) {
                if (d == 0 && dim != batch)
                    fprintf(stderr, "note: input \"%s\" has a fixed first dim %lld; "
                            "--batch %lld does not change it\n", info->name, (long long)dim,
                            (long long)batch);
            } else if (d == 0) {
                dim = batch;
            } else {
                dim = 1;
                fprintf(stderr, "note: input \"%s\" dim %d%s%s%s is dynamic: planned as 1\n",
                        info->name, d, info->dim_names[d] ? " (" : "",
                        info->dim_names[d] ? info->dim_names[d] : "",
                        info->dim_names[d] ? ")" : "");
            }
            sig[i].dims[d] = dim;
        }
    }
    slim_plan *plan = NULL;
    slim_err err;
    slim_status st = slim_plan_build(m, sig, &plan, &err);
    free(sig);
    if (st) {
        fprintf(stderr, "slim inspect: planning memory for batch %lld: %s\n", (long long)batch,
                err.msg);
        return 1;
    }
    printf("model: %s\n", path);
    slim_plan_print(m, plan, stdout);
    printf("weight_bytes: %zu\n", m->weight_bytes);
    slim_plan_free(plan);
    return 0;
}

#define INSPECT_USAGE "usage: slim inspect MODEL [--optimized] [--memory [--batch N]] " \
                      "[--fit [--memory-limit SIZE] [--actual]] " \
                      "[--device DEV] [--precision P] [--int8-exclude LIST] " \
                      "[--int8-max-error X] [--prune SPEC [--prune-scope S]]\n"

/* Every node in run order: name, operator, inputs -> outputs. */
static void print_nodes(const slim_graph *g)
{
    printf("graph after the passes (%d nodes, run order):\n", g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        printf("  %-24s %s%s%-20s ", n->name, n->domain[0] ? n->domain : "",
               n->domain[0] ? "." : "", n->op_type);
        for (int k = 0; k < n->n_in; k++)
            printf("%s%s", k ? ", " : "", n->in[k] >= 0 ? g->values[n->in[k]].name : "-");
        printf(" -> ");
        for (int k = 0; k < n->n_out; k++)
            printf("%s%s", k ? ", " : "", n->out[k] >= 0 ? g->values[n->out[k]].name : "-");
        printf("\n");
    }
}

/* With --precision int8: each candidate layer, its precision, weight bytes
 * before and after, the weights' relative quantization error, and the
 * layer's measured output error (relative L2, on sample inputs drawn from
 * the input specs, its own error given float inputs). */
static void print_int8(const slim_int8_report *r)
{
    int width = 5, q = 0;
    for (int i = 0; i < r->n_layers; i++) {
        int len = (int)strlen(r->layers[i].name);
        width = len > width ? len : width;
        q += r->layers[i].quantized;
    }
    printf("int8 layers (%d of %d quantized):\n", q, r->n_layers);
    printf("  %-*s  %-7s %-9s %12s %12s %9s %9s  %s\n", width, "layer", "op", "precision",
           "bytes_fp32", "bytes_now", "w_error", "error", "note");
    for (int i = 0; i < r->n_layers; i++) {
        const slim_int8_layer *l = &r->layers[i];
        printf("  %-*s  %-7s %-9s %12zu %12zu ", width, l->name, l->op_type,
               l->quantized ? "int8" : "fp32", l->bytes_before, l->bytes_after);
        if (l->quantized || l->error >= 0)
            printf("%9.2e ", l->weight_error);
        else
            printf("%9s ", "-");
        char note[64] = "";
        if (l->why)
            snprintf(note, sizeof(note), "%s", l->why);
        else if (l->n_outliers)
            snprintf(note, sizeof(note), "%d outlier input channels", l->n_outliers);
        if (l->error >= 0)
            printf("%9.2e  %s\n", l->error, note);
        else
            printf("%9s  %s\n", "-", note);
    }
    if (r->unmeasured[0])
        printf("output errors not measured: %s\n", r->unmeasured);
    if (r->bytes_before)
        printf("int8 weight bytes: %zu -> %zu (%.3fx)\n", r->bytes_before, r->bytes_after,
               (double)r->bytes_after / (double)r->bytes_before);
}

/* What the command line asked for. */
typedef struct inspect_args {
    const char *path;
    bool memory, optimized;
    bool fit, actual;           /* --fit: the predicted footprint (inspect_fit.c) */
    size_t memory_limit;        /* --memory-limit, for --fit's verdict */
    int64_t batch;
    const char *exclude_arg;
    slim_cli_prune prune;
    slim_cli_half half;
} inspect_args;

static void inspect_help(void)
{
    printf(INSPECT_USAGE
           "  --optimized the graph after the load-time passes, node by node\n"
           "  --memory    the activation arena plan: buffers, arena_bytes,\n"
           "              lower_bound_bytes, weight bytes\n"
           "  --batch N   plan for batch N (default 1); with --fit the largest batch\n"
           "  --fit       the predicted footprint before loading (weights, arenas at\n"
           "              batch 1 and N, workspace) and whether it fits --memory-limit\n"
           "  --memory-limit SIZE  the limit --fit judges against (default: this machine's)\n"
           "  --actual    with --fit, then load it and print the measured footprint too\n"
           "  --device D  place the model on D (cpu, cuda, cuda:N) and print where\n"
           "              each node runs and the copies between devices\n"
           "  --precision fp32, fp16, bf16 or int8 (int8 also prints each\n"
           "              layer's precision, weight bytes and quantization error)\n"
           "  --int8-exclude LIST  comma-separated node names or op types kept in fp32\n"
           "  --int8-max-error X   layers whose measured output error is over X stay fp32\n"
           SLIM_CLI_HALF_USAGE
           SLIM_CLI_PRUNE_USAGE
           "              (--prune prints each layer's sparsity, storage and bytes)\n");
}

/* Reads the command line into a and opts: 0 to go on, -1 after --help,
 * else the exit code (the half and prune options are the caller's to free). */
static int parse_inspect_args(int argc, char **argv, inspect_args *a, slim_load_opts *opts)
{
    for (int i = 1; i < argc; i++) {
        int hr = slim_cli_half_arg(&a->half, "slim inspect", argc, argv, &i, opts);
        if (!hr)
            hr = slim_cli_prune_arg(argc, argv, &i, &a->prune, "inspect");
        if (hr < 0)
            return 2;
        if (hr)
            continue;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            inspect_help();
            return -1;
        }
        if ((strcmp(argv[i], "--device") == 0 || strcmp(argv[i], "--precision") == 0) &&
            i + 1 < argc) {
            if (argv[i][2] == 'd')
                opts->place.device = argv[i + 1];
            else
                opts->compress.precision = argv[i + 1];
            i++;
            continue;
        }
        if (strcmp(argv[i], "--int8-exclude") == 0 && i + 1 < argc) {
            a->exclude_arg = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--int8-max-error") == 0 && i + 1 < argc) {
            char *end;
            opts->compress.int8.max_error = strtod(argv[++i], &end);
            double me = opts->compress.int8.max_error;
            if (*end || !(me > 0) || me > 1e30) {
                fprintf(stderr, "slim inspect: --int8-max-error needs a positive number, got "
                        "\"%s\"\n" INSPECT_USAGE, argv[i]);
                return 2;
            }
            continue;
        }
        if (strcmp(argv[i], "--memory") == 0) {
            a->memory = true;
            continue;
        }
        if (strcmp(argv[i], "--fit") == 0 || strcmp(argv[i], "--actual") == 0) {
            a->fit = true;
            a->actual = a->actual || argv[i][2] == 'a';
            continue;
        }
        if (strcmp(argv[i], "--memory-limit") == 0 && i + 1 < argc) {
            slim_err err;
            if (!slim_parse_bytes(argv[++i], &a->memory_limit, &err)) {
                fprintf(stderr, "slim inspect: --memory-limit: %s\n" INSPECT_USAGE, err.msg);
                return 2;
            }
            continue;
        }
        if (strcmp(argv[i], "--optimized") == 0) {
            a->optimized = true;
            continue;
        }
        if (strcmp(argv[i], "--batch") == 0) {
            char *end = NULL;
            long long v = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || !argv[i + 1][0] || *end || v < 1 || v > (1LL << 31)) {
                fprintf(stderr, "slim inspect: --batch needs a positive whole number, got "
                        "\"%s\"\n" INSPECT_USAGE, i + 1 < argc ? argv[i + 1] : "");
                return 2;
            }
            a->batch = v;
            i++;
            continue;
        }
        if (argv[i][0] == '-' || a->path) {
            fprintf(stderr, "slim inspect: unexpected argument \"%s\"\n" INSPECT_USAGE, argv[i]);
            return 2;
        }
        a->path = argv[i];
    }
    if (!a->path) {
        fprintf(stderr, INSPECT_USAGE);
        return 2;
    }
    if (a->batch != 1 && !a->memory && !a->fit) {
        fprintf(stderr, "slim inspect: --batch only applies with --memory or --fit\n"
                INSPECT_USAGE);
        return 2;
    }
    return 0;
}

/* The reports of a model that loaded (the memory plan, or the summary and
 * whichever per-layer tables the options asked for); frees the reports
 * and the model. Returns the exit code. */
static int print_loaded(const inspect_args *a, const slim_load_opts *opts, slim_model *m,
                        slim_int8_report *int8, slim_prune_report *prep,
                        slim_half_report *half_rep)
{
    int rc = 0;
    if (a->memory)
        rc = print_memory(a->path, m, a->batch);
    else
        print_model(a->path, m->graph, m, m->param_count, m->weight_bytes);
    if (!a->memory && a->optimized)
        print_nodes(m->graph);
    if (!a->memory && opts->compress.precision && strcmp(opts->compress.precision, "int8") == 0)
        print_int8(int8);
    slim_int8_report_free(int8);
    if (!a->memory && opts->compress.prune)
        slim_cli_print_prune(prep);
    slim_prune_report_free(prep);
    const char *prec = opts->compress.precision;
    if (!a->memory && half_rep->n_layers)
        slim_cli_print_half(half_rep, prec && strcmp(prec, "int8") ? prec
                                                                   : opts->compress.int8.fallback);
    slim_half_report_free(half_rep);
    if (opts->place.device)
        slim_model_print_placement(m, stdout);
    slim_model_free(m);
    return rc;
}

/* Loadable but not runnable (reason says why): describe the raw graph. */
static int describe_raw(const char *path, const char *reason)
{
    slim_err err;
    slim_graph *g = NULL;
    if (slim_onnx_load_file(path, &g, &err) != SLIM_OK) {
        fprintf(stderr, "slim inspect: %s\n", reason);
        return 1;
    }
    int64_t params = 0;
    size_t bytes = 0;
    for (int i = 0; i < g->n_values; i++) {
        const slim_value *v = &g->values[i];
        if (v->kind != SLIM_VALUE_INITIALIZER)
            continue;
        params += slim_tensor_numel(&v->init);
        bytes += slim_tensor_nbytes(&v->init);
    }
    print_model(path, g, NULL, params, bytes);
    printf("runnable: no - %s\n", reason);
    slim_graph_free(g);
    return 0;
}

int slim_cmd_inspect(int argc, char **argv)
{
    inspect_args a = {.batch = 1};
    slim_load_opts opts = {0};
    slim_prune_report prep = {0};
    int prc = parse_inspect_args(argc, argv, &a, &opts);
    if (prc) {
        slim_cli_half_free(&a.half);
        slim_cli_prune_free(&a.prune);
        return prc < 0 ? 0 : prc;
    }

    if (slim_cli_prune_opts(&a.prune, "inspect", &opts.compress.prune) < 0) {
        slim_cli_prune_free(&a.prune);
        slim_cli_half_free(&a.half);
        return 2;
    }
    a.prune.o.report = &prep;
    slim_err err;
    slim_model *m = NULL;
    slim_int8_report int8 = {0};
    const char *exclude[256];
    char *exclude_buf = a.exclude_arg ? strdup(a.exclude_arg) : NULL;
    if (exclude_buf) {
        int n = slim_cli_split_list(exclude_buf, exclude, 256);
        opts.compress.int8.exclude = exclude;
        opts.compress.int8.n_exclude = n < 256 ? n : 256;
    }
    opts.compress.int8.report = &int8;
    slim_half_report half_rep = {0};
    opts.compress.half.report = &half_rep;
    /* inspect always measures the int8 layers' output error. */
    const char *prec = opts.compress.precision;
    opts.compress.int8.measure = prec && strcmp(prec, "int8") == 0;
    if (a.fit) {
        opts.compress.int8.report = NULL;
        opts.compress.int8.measure = false;
        opts.compress.half.report = NULL;
        a.prune.o.report = NULL;
        int rc = slim_cli_inspect_fit(a.path, &opts, a.batch, a.memory_limit, a.actual);
        free(exclude_buf);
        slim_cli_prune_free(&a.prune);
        slim_cli_half_free(&a.half);
        return rc;
    }
    /* The arena plan is of what runs: the optimized graph. */
    opts.optimize.no_passes = !a.optimized && !a.memory;
    slim_status st = slim_model_load(a.path, &opts, &m, &err);
    free(exclude_buf);
    slim_cli_prune_free(&a.prune);
    slim_cli_half_free(&a.half);
    if (st == SLIM_OK)
        return print_loaded(&a, &opts, m, &int8, &prep, &half_rep);
    slim_half_report_free(&half_rep);
    if (a.memory) {
        fprintf(stderr, "slim inspect: %s\n", err.msg);
        return 1;
    }
    if (st != SLIM_EUNSUPPORTED || opts.place.device || prec || opts.compress.prune) {
        fprintf(stderr, "slim inspect: %s\n", err.msg);
        return 1;
    }
    char reason[sizeof(err.msg)];
    memcpy(reason, err.msg, sizeof(reason));
    return describe_raw(a.path, reason);
}
