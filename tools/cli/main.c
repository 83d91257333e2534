/* main.c - the `slim` command: inspect, run and test models. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: slim COMMAND [ARGS]\n"
            "\n"
            "  inspect MODEL                   inputs, outputs, opset, ops, parameters\n"
            "  run MODEL --input NAME=FILE.npy ... [--output-dir DIR]\n"
            "                                  run a model on NumPy inputs\n"
            "  conformance DIR [--filter REGEX] [--verbose]\n"
            "                                  run ONNX backend node tests under DIR\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "inspect") == 0)
        return slim_cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return slim_cmd_run(argc - 1, argv + 1);
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
