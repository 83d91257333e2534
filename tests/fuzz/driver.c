/*
 * driver.c - main() for a fuzz target outside libFuzzer: runs each file (or
 * each file in each folder) named on the command line once. A crash is the
 * sanitizer's report and a non-zero exit, as under libFuzzer.
 */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int main(int argc, char **argv)
{
    int runs = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "fuzz driver: no such file %s\n", argv[i]);
            return 2;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad += run_file(argv[i]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            bad += run_file(path);
            runs++;
        }
        if (d)
            closedir(d);
    }
    printf("%s: ran %d inputs\n", argv[0], runs);
    return bad ? 1 : 0;
}

/* The structure-aware mutator calls libFuzzer's byte mutator as a
 * fallback; outside libFuzzer nothing mutates. */
__attribute__((weak)) size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size)
{
    (void)data;
    (void)max_size;
    return size;
}
