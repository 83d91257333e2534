/*
 * driver.c - main() for a fuzz target outside libFuzzer: runs each file (or
 * each file in each folder) named on the command line once. A crash is the
 * sanitizer's report and a non-zero exit, as under libFuzzer.
 *
 * This is the replay `make test` relies on (fuzz_replay), so it has no time
 * limit per input: a fixed set of inputs either passes or fails, whatever
 * the machine's load; how long the slowest input took is printed instead,
 * so a slow one is seen rather than turned into a chance failure.
 */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct replay_stats {
    int runs, bad;
    double total_s, slowest_s;
    char slowest[4096];
} replay_stats;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz driver: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    fclose(f);
    if (!buf || got != (size_t)(n > 0 ? n : 0)) {
        free(buf);
        fprintf(stderr, "fuzz driver: cannot read %s\n", path);
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

static void run_timed(const char *path, replay_stats *rs)
{
    double t0 = now_s();
    rs->bad += run_file(path);
    double t = now_s() - t0;
    rs->runs++;
    rs->total_s += t;
    if (t > rs->slowest_s) {
        rs->slowest_s = t;
        snprintf(rs->slowest, sizeof(rs->slowest), "%s", path);
    }
}

int main(int argc, char **argv)
{
    replay_stats rs = {0};
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "fuzz driver: no such file %s\n", argv[i]);
            return 2;
        }
        if (!S_ISDIR(sb.st_mode)) {
            run_timed(argv[i], &rs);
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            run_timed(path, &rs);
        }
        if (d)
            closedir(d);
    }
    printf("%s: ran %d inputs in %.1f s; slowest %.2f s (%s)\n", argv[0], rs.runs, rs.total_s,
           rs.slowest_s, rs.runs ? rs.slowest : "none");
    return rs.bad ? 1 : 0;
}

/* The structure-aware mutator calls libFuzzer's byte mutator as a
 * fallback; outside libFuzzer nothing mutates. */
__attribute__((weak)) size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size)
{
    (void)data;
    (void)max_size;
    return size;
}
