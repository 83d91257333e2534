/*
 * onnx_harness.c - the body of the model fuzz targets (ONNX and .slim):
 * load, validate, and run what loads.
 *
 * Loading alone would leave kernels unexercised, and the crashes the issue
 * found were in kernels reached by graphs that loaded. So a model that loads
 * runs once, on inputs of its declared shapes (unknown dims become 2, an
 * unknown rank becomes [2]), filled with small values (integers in [0, 3],
 * so index-like inputs are mostly in range and kernels go past their
 * checks); a declared sequence gets two such tensors, an optional one or
 * none. The CPU allocator is capped so a graph asking for terabytes gets
 * an out-of-memory error, as it would in the server. Some seeds run the
 * graph passes first, odd ones place the model on emul:0 (below).
 */
#include "container.h"
#include "fuzz.h"
#include "device.h"
#include "model.h"
#include "pass.h"
#include "pipeline.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define FUZZ_MEMORY_LIMIT ((size_t)256 << 20)
#define FUZZ_MAX_INPUT_ELEMS ((int64_t)1 << 16)
#define FUZZ_MAX_INPUTS 16

static void fill(slim_tensor *t, uint32_t seed)
{
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        int64_t small = (int64_t)(seed >> 30); /* 0..3 */
        /* Strings: one of four, UTF-8 and the empty one among them. */
        static const char *const words[4] = {"", "a", "b c.d", "\xe6\x97\xa5\xe6\x9c\xac"};
        if (t->dtype == SLIM_STRING)
            slim_tensor_string_set(t, i, words[small], strlen(words[small]), NULL);
        else if (slim_dtype_is_float(t->dtype))
            slim_store_f64(t->dtype, t->data, i, ((double)(seed >> 8) / (1 << 24)) * 4.0 - 2.0);
        else
            slim_store_i64(t->dtype, t->data, i, t->dtype == SLIM_BOOL ? (small & 1) : small);
    }
}

/* A tensor of io's declared type and shape (unknowns as above), filled. */
static slim_status make_tensor(const slim_io_info *io, uint32_t seed, slim_tensor *t)
{
    slim_err err;
    memset(t, 0, sizeof(*t));
    t->dtype = io->dtype == SLIM_DTYPE_UNDEFINED ? SLIM_F32 : io->dtype;
    t->ndim = io->ndim < 0 ? 1 : io->ndim;
    for (int d = 0; d < t->ndim; d++)
        t->dims[d] = io->ndim < 0 || io->dims[d] < 0 ? 2 : io->dims[d];
    if (slim_tensor_numel(t) > FUZZ_MAX_INPUT_ELEMS)
        return SLIM_EINVAL;
    slim_status st = slim_tensor_alloc(t, &err);
    if (!st)
        fill(t, seed);
    return st;
}

/* A sequence of two such tensors, or an optional holding one (or a
 * sequence), empty for odd seeds: the containers a model declares. */
static slim_status make_value(const slim_io_info *io, uint32_t seed, slim_tensor *out)
{
    if (io->kind == SLIM_KIND_TENSOR)
        return make_tensor(io, seed, out);
    slim_err err;
    bool seq = io->kind == SLIM_KIND_SEQUENCE;
    slim_status st = slim_container_new(io->kind, io->dtype, seq ? 2 : 1, out, &err);
    for (int k = 0; !st && k < (seq ? 2 : (int)(seed & 1)); k++) {
        slim_tensor e;
        if (!seq && io->elem_kind == SLIM_KIND_SEQUENCE) {
            slim_io_info inner = *io;
            inner.kind = SLIM_KIND_SEQUENCE;
            st = make_value(&inner, seed + 7, &e);
        } else {
            st = make_tensor(io, seed + (uint32_t)k, &e);
        }
        if (!st)
            st = slim_container_take(out, &e, &err);
    }
    if (st)
        slim_tensor_release(out);
    return st;
}

static void run_once(const slim_model *m, uint32_t seed)
{
    int n = slim_model_num_inputs(m);
    if (n > FUZZ_MAX_INPUTS)
        return;
    slim_tensor in[FUZZ_MAX_INPUTS];
    const char *names[FUZZ_MAX_INPUTS];
    memset(in, 0, sizeof(in));
    int made = 0;
    slim_err err;
    for (int i = 0; i < n; i++, made++) {
        const slim_io_info *io = slim_model_input(m, i);
        names[i] = io->name;
        if (make_value(io, seed + (uint32_t)i, &in[i]))
            goto done;
    }
    slim_tensor *out = NULL;
    int n_out = 0;
    if (slim_model_run(m, n, names, in, &out, &n_out, &err) == SLIM_OK)
        slim_tensors_free(out, n_out);
done:
    for (int i = 0; i < made; i++)
        slim_tensor_release(&in[i]);
}

/* libFuzzer checks for slow inputs from a SIGALRM handler installed
 * without SA_ONSTACK, so it runs on whatever stack the interrupted code is
 * using. Seen on fuzz_slim and fuzz_onnx a few times an hour: the alarm
 * interrupted oneDNN JIT code (a frame in no module), and the handler's
 * clock_gettime wrote its result into heap memory 3 KiB left of a libdnnl
 * allocation, which ASan reports as a heap overflow of ours. On an
 * alternate stack the handler's frame is where it should be. */
static void alarm_on_alt_stack(void)
{
    struct sigaction sa;
    if (sigaction(SIGALRM, NULL, &sa) != 0 || sa.sa_handler == SIG_DFL ||
        sa.sa_handler == SIG_IGN || (sa.sa_flags & SA_ONSTACK))
        return;
    stack_t ss;
    if (sigaltstack(NULL, &ss) != 0)
        return;
    if (ss.ss_flags & SS_DISABLE) {
        size_t size = (size_t)1 << 20;
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return;
        ss = (stack_t){.ss_sp = p, .ss_size = size, .ss_flags = 0};
        if (sigaltstack(&ss, NULL) != 0) {
            munmap(p, size);
            return;
        }
    }
    sa.sa_flags |= SA_ONSTACK;
    sigaction(SIGALRM, &sa, NULL);
}

void slim_fuzz_run_graph(slim_graph *g, uint32_t seed)
{
    static int limited;
    if (!limited) {
        alarm_on_alt_stack();
        slim_allocator_set_limit(slim_device_cpu()->alloc, FUZZ_MEMORY_LIMIT);
        /* A Loop that never ends by itself stops here well inside the
         * fuzzer's per-input timeout. 1000, not more: a body that inserts
         * into a carried sequence copies it each iteration (containers are
         * immutable), so the work grows with the square of the count; at
         * 10000 one such graph ran 14-30 s under ASan. */
        setenv("SLIM_LOOP_MAX_ITERATIONS", "1000", 0);
        limited = 1;
    }
    slim_model *m = NULL;
    slim_err err;
    /* Every load in the server runs the graph passes before the schema
     * check, so they meet hostile graphs first: inputs with bit 1 of the
     * seed set go through them, for the host or (odd seeds, placed below)
     * for a device. */
    if ((seed & 2) && slim_passes_run_for(g, !(seed & 1), &err) != SLIM_OK) {
        slim_graph_free(g);
        return;
    }
    if (slim_model_from_graph(g, &m, &err) != SLIM_OK)
        return; /* from_graph frees g on failure */
    /* Every other input is placed on emul:0, the host dressed as a device
     * (runtime/device_emul.c), so hostile graphs also go through what
     * `--device cuda:0` does to them: the partition pass's rebuild, copies,
     * uploaded weights. A placement that fails leaves the model unusable;
     * it is freed without a run. */
    if (seed & 1) {
        slim_device *emul = slim_device_emul();
        static int emul_limited;
        if (!emul_limited && emul->alloc) {
            slim_allocator_set_limit(emul->alloc, FUZZ_MEMORY_LIMIT);
            emul_limited = 1;
        }
        if (slim_model_place(m, emul, &err) != SLIM_OK) {
            slim_model_free(m);
            return;
        }
    }
    run_once(m, seed);
    slim_model_free(m);
}

void slim_fuzz_onnx(const uint8_t *data, size_t size)
{
    slim_graph *g = NULL;
    slim_err err;
    if (slim_onnx_load_buffer(data, size, NULL, &g, &err) == SLIM_OK)
        slim_fuzz_run_graph(g, (uint32_t)size);
}
