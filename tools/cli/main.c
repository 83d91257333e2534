/* main.c - the `slim` command: inspect, run and test models. */
#include "cli.h"
#include "slim_init.h"

#include <stdio.h>
#include <string.h>

/* "[batch,3,32,32]": declared dims by symbolic name, "?" when unnamed. */
int slim_cli_split_list(char *s, const char **out, int cap)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ","))
        if (tok[0]) {
            if (n < cap)
                out[n] = tok;
            n++;
        }
    return n;
}

/* " in a sequence" after the shape of a container's tensors. */
static void kind_suffix(const slim_io_info *info, char *buf, size_t cap)
{
    size_t used = strlen(buf);
    if (info->kind == SLIM_KIND_TENSOR || used >= cap)
        return;
    snprintf(buf + used, cap - used, " in %s",
             info->kind == SLIM_KIND_SEQUENCE        ? "a sequence"
             : info->elem_kind == SLIM_KIND_SEQUENCE ? "an optional sequence"
                                                     : "an optional");
}

char *slim_cli_declared_shape(const slim_io_info *info, char *buf, size_t cap)
{
    if (info->ndim < 0) {
        snprintf(buf, cap, "[any rank]");
        kind_suffix(info, buf, cap);
        return buf;
    }
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < info->ndim && used < cap; i++) {
        const char *sep = i ? "," : "";
        if (info->dims[i] >= 0)
            used += (size_t)snprintf(buf + used, cap - used, "%s%lld", sep,
                                     (long long)info->dims[i]);
        else
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", sep,
                                     info->dim_names[i] ? info->dim_names[i] : "?");
    }
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
    kind_suffix(info, buf, cap);
    return buf;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: slim COMMAND [ARGS]\n"
            "\n"
            "  inspect MODEL                   inputs, outputs, opset, ops, parameters\n"
            "  inspect MODEL --memory [--batch N]\n"
            "                                  activation arena plan and weight bytes\n"
            "  run MODEL --input NAME=FILE.npy ... [--output-dir DIR] [--repeat N]\n"
            "                                  run a model on NumPy inputs\n"
            "  conformance DIR [--filter REGEX] [--verbose] [--device DEV]\n"
            "                                  run ONNX backend node tests under DIR\n"
            "  devices                         the devices there are, with their memory\n"
            "  bench MODEL [--batch N] [--threads T] [--precision P] [--compare onnxruntime]\n"
            "                                  latency percentiles, throughput, time per node\n"
            "  convert MODEL -o OUT.slim [--precision P]\n"
            "                                  write the native format (mapped, weights in place)\n");
}

int main(int argc, char **argv)
{
    slim_init();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "inspect") == 0)
        return slim_cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return slim_cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "devices") == 0)
        return slim_cmd_devices(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return slim_cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "convert") == 0)
        return slim_cmd_convert(argc - 1, argv + 1);
    if (strcmp(cmd, "conformance") == 0)
        return slim_cmd_conformance(argc - 1, argv + 1);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "slim: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
