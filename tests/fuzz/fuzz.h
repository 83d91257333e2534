/*
 * fuzz.h - what the fuzz targets share.
 *
 * Each target defines LLVMFuzzerTestOneInput. Built with clang and
 * -fsanitize=fuzzer (SLIM_FUZZ=ON, `make fuzz`) libFuzzer drives it; in the
 * ordinary builds driver.c gives it a main() that runs the files named on
 * the command line once each, so the seed corpora and every saved
 * reproducer (tests/fuzz/regressions/) run under ASan/UBSan in `make test`
 * even where clang is absent.
 */
#ifndef SLIM_FUZZ_H
#define SLIM_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct slim_graph;

/* Loads an ONNX model from bytes and, when it loads, runs it once on small
 * inputs made from its declared shapes under a memory limit (onnx_harness.c). */
void slim_fuzz_onnx(const uint8_t *data, size_t size);
/* The same for a graph already read (taken over). */
void slim_fuzz_run_graph(struct slim_graph *g, uint32_t seed);

#endif
