/*
 * qgemm_peak.c - bench_qgemm's machine probes: --peak (int8 vpdpbusd) and
 * --peak-f32 (float32 FMA), each on registers only, and what the machine
 * is (CPUID: model, family/model, the ISA flags that matter).
 *
 * Why chains are tried: an FMA has a latency of 4-5 cycles and a core
 * issues one or two a cycle, so a loop needs latency x issue independent
 * accumulators to keep its pipes full. Zen 4 splits a 512-bit FMA into two
 * 256-bit halves (one a cycle), Zen 5 and the big Xeons have two full
 * 512-bit pipes; a count that suits one under-reports the other, so each
 * of 8, 12, 16 and 24 chains is timed and the best one is the peak.
 *
 * The frequency estimate is a chain of dependent integer adds (one cycle
 * each on every x86 core), run on every thread right after the FMA
 * rounds: GHz = adds / ns. FMA per cycle = per-core GFLOP/s / (GHz x flops
 * per instruction) says whether the probe reached the pipes' width.
 *
 * Prints one JSON object (bench_models.py and bench_qgemm.py read
 * peak_gflops / peak_gops from it).
 */
#include "qgemm_peak.h"

#include "kernel.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#define PEAK_ITERS 2400000LL /* instructions a thread a round: about a millisecond */
#define PEAK_ROUNDS 30

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ---- what the machine is ------------------------------------------------- */

typedef struct {
    char model[64];
    int family, model_no;
    bool avx2, fma, avx512f, avx512vnni, avx_vnni, avx512bf16, vp2intersect, amx_tile,
        amx_int8;
} cpu_desc;

static void describe_cpu(cpu_desc *d)
{
    memset(d, 0, sizeof(*d));
    strcpy(d->model, "?");
#if defined(__x86_64__)
    unsigned a, b, c, e;
    if (__get_cpuid(1, &a, &b, &c, &e)) {
        int fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
        /* The extended fields count only where the base ones say so. */
        if (fam == 0xf)
            fam += (a >> 20) & 0xff;
        if (fam == 0x6 || fam >= 0xf)
            mod += ((a >> 16) & 0xf) << 4;
        d->family = fam;
        d->model_no = mod;
    }
    unsigned brand[12] = {0};
    if (__get_cpuid(0x80000000, &a, &b, &c, &e) && a >= 0x80000004) {
        for (unsigned l = 0; l < 3; l++)
            __get_cpuid(0x80000002 + l, &brand[4 * l], &brand[4 * l + 1], &brand[4 * l + 2],
                        &brand[4 * l + 3]);
        const char *s = (const char *)brand;
        while (*s == ' ')
            s++;
        snprintf(d->model, sizeof(d->model), "%.47s", s);
    }
    /* __builtin_cpu_supports also checks that the OS saves the registers;
     * the newer bits are read from CPUID leaf 7 directly (GCC 12 does not
     * know all of their names). */
    d->avx2 = __builtin_cpu_supports("avx2");
    d->fma = __builtin_cpu_supports("fma");
    d->avx512f = __builtin_cpu_supports("avx512f");
    d->avx512vnni = d->avx512f && __builtin_cpu_supports("avx512vnni");
    if (__get_cpuid_count(7, 0, &a, &b, &c, &e)) {
        d->vp2intersect = d->avx512f && (e >> 8 & 1);
        d->amx_tile = e >> 24 & 1;
        d->amx_int8 = e >> 25 & 1;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &e)) {
        d->avx_vnni = d->avx2 && (a >> 4 & 1);
        d->avx512bf16 = d->avx512f && (a >> 5 & 1);
    }
#endif
}

static void print_flags(const cpu_desc *d)
{
    const struct {
        bool on;
        const char *name;
    } f[] = {{d->avx2, "avx2"},         {d->fma, "fma"},
             {d->avx512f, "avx512f"},   {d->avx512vnni, "avx512_vnni"},
             {d->avx_vnni, "avx_vnni"}, {d->avx512bf16, "avx512_bf16"},
             {d->vp2intersect, "avx512_vp2intersect"},
             {d->amx_tile, "amx_tile"}, {d->amx_int8, "amx_int8"}};
    bool first = true;
    printf("\"flags\": \"");
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (f[i].on) {
            printf("%s%s", first ? "" : " ", f[i].name);
            first = false;
        }
    printf("\"");
}

/* ---- the register-only loops --------------------------------------------- */

#if defined(__x86_64__)
/* One loop per (instruction, chain count): NC accumulators, each its own
 * dependency chain, fully unrolled so that they stay in registers (24
 * chains and two operands take 26 of AVX-512's 32). The sums go to a
 * volatile sink so that nothing is optimized away. */
#define PEAK_FN(NAME, TARGET, VEC, ZERO, INIT, STEP, SINK, NC)                        \
    TARGET static void NAME##_##NC(int64_t b, int64_t e, void *user)               \
    {                                                                               \
        VEC acc[NC];                                                                \
        INIT;                                                                       \
        for (int i = 0; i < NC; i++)                                                \
            acc[i] = ZERO(i);                                                       \
        for (int64_t t = b; t < e; t++)                                             \
            for (long long it = 0; it < PEAK_ITERS / NC; it++) {                    \
                _Pragma("GCC unroll 32") for (int i = 0; i < NC; i++) acc[i] = STEP; \
            }                                                                       \
        for (int i = 1; i < NC; i++)                                                \
            acc[0] = SINK(acc[0], acc[i]);                                          \
        memcpy(user, &acc[0], sizeof(acc[0]) < 32 ? sizeof(acc[0]) : 32);           \
    }

#define T512F __attribute__((target("avx512f")))
#define T512VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define T2 __attribute__((target("avx2,fma")))
#define TAVXVNNI __attribute__((target("avx2,avxvnni")))

#define F512_INIT const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f)
#define F512_ZERO(i) _mm512_set1_ps((float)(i))
#define F512_STEP _mm512_fmadd_ps(acc[i], x, y)
#define I512_INIT const __m512i x = _mm512_set1_epi32(0x01020304), w = _mm512_set1_epi32(0x01ff01ff)
#define I512_ZERO(i) _mm512_set1_epi32(i)
#define I512_STEP _mm512_dpbusd_epi32(acc[i], x, w)
#define F256_INIT const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f)
#define F256_ZERO(i) _mm256_set1_ps((float)(i))
#define F256_STEP _mm256_fmadd_ps(acc[i], x, y)
#define I256_INIT const __m256i x = _mm256_set1_epi32(0x01020304), w = _mm256_set1_epi32(0x01ff01ff)
#define I256_ZERO(i) _mm256_set1_epi32(i)
#define I256_STEP _mm256_dpbusd_avx_epi32(acc[i], x, w)

#define F512(NC) PEAK_FN(f512, T512F, __m512, F512_ZERO, F512_INIT, F512_STEP, _mm512_add_ps, NC)
#define I512(NC) \
    PEAK_FN(i512, T512VNNI, __m512i, I512_ZERO, I512_INIT, I512_STEP, _mm512_add_epi32, NC)
#define F256(NC) PEAK_FN(f256, T2, __m256, F256_ZERO, F256_INIT, F256_STEP, _mm256_add_ps, NC)
#define I256(NC) \
    PEAK_FN(i256, TAVXVNNI, __m256i, I256_ZERO, I256_INIT, I256_STEP, _mm256_add_epi32, NC)

F512(8) F512(12) F512(16) F512(24)
I512(8) I512(12) I512(16) I512(24)
/* 16 ymm registers: up to 12 chains without spilling. */
F256(8) F256(12)
I256(8) I256(12)

/* A chain of dependent adds, 20 an iteration: as many cycles as adds (the
 * loop counter's dec/jnz run beside it). */
#define ADD_ITERS 50000LL
static void add_chain(int64_t b, int64_t e, void *user)
{
    double *ghz = user;
    for (int64_t t = b; t < e; t++) {
        double best = 1e30;
        for (int r = 0; r < 40; r++) {
            uint64_t v = 0, n = ADD_ITERS;
            double t0 = now_ns();
            __asm__ volatile("1:\n\t.rept 20\n\tadd %2, %0\n\t.endr\n\tdec %1\n\tjnz 1b"
                             : "+r"(v), "+r"(n)
                             : "r"((uint64_t)1)
                             : "cc");
            double dt = now_ns() - t0;
            best = dt < best ? dt : best;
        }
        ghz[t] = 20.0 * ADD_ITERS / best;
    }
}
#endif

typedef void (*peak_fn)(int64_t, int64_t, void *);

/* The fastest of PEAK_ROUNDS rounds of fn on `threads` threads (1: the
 * caller alone), in ops per ns = GOPS. */
static double time_peak(peak_fn fn, int nc, int threads, double ops_per_inst)
{
    _Alignas(64) unsigned char sink[32];
    double best = 1e30;
    for (int r = 0; r < PEAK_ROUNDS; r++) {
        double t0 = now_ns();
        if (threads == 1)
            fn(0, 1, sink);
        else
            slim_parallel_for(threads, 1, fn, sink);
        double t = now_ns() - t0;
        best = t < best ? t : best;
    }
    __asm__ volatile("" : : "r"(sink) : "memory");
    return (double)threads * (double)(PEAK_ITERS / nc * nc) * ops_per_inst / best;
}

int slim_bench_peak(bool f32)
{
    cpu_desc d;
    describe_cpu(&d);
    int threads = slim_num_threads();
    peak_fn fns[4] = {0};
    const int chains[4] = {8, 12, 16, 24};
    const char *isa = NULL;
    double lanes = 0, ops_per_lane = 0;
#if defined(__x86_64__)
    if (f32 && d.avx512f) {
        fns[0] = f512_8, fns[1] = f512_12, fns[2] = f512_16, fns[3] = f512_24;
        isa = "avx512f vfmadd231ps zmm", lanes = 16, ops_per_lane = 2;
    } else if (f32 && d.avx2 && d.fma) {
        fns[0] = f256_8, fns[1] = f256_12;
        isa = "avx2 vfmadd231ps ymm", lanes = 8, ops_per_lane = 2;
    } else if (!f32 && d.avx512vnni) {
        fns[0] = i512_8, fns[1] = i512_12, fns[2] = i512_16, fns[3] = i512_24;
        isa = "avx512_vnni vpdpbusd zmm", lanes = 16, ops_per_lane = 8;
    } else if (!f32 && d.avx_vnni) {
        fns[0] = i256_8, fns[1] = i256_12;
        isa = "avx_vnni vpdpbusd ymm", lanes = 8, ops_per_lane = 8;
    }
#endif
    const char *key = f32 ? "peak_gflops" : "peak_gops";
    printf("{\"cpu\": \"%s\", \"family\": %d, \"model\": %d, ", d.model, d.family, d.model_no);
    print_flags(&d);
    printf(", \"threads\": %d, ", threads);
    if (!isa) {
        printf("\"isa\": null, \"%s\": null}\n", key);
        return 0;
    }
    /* Every chain count on all threads; the best one again on one. */
    double all[4] = {0}, best = 0;
    int bi = 0;
    for (int i = 0; i < 4; i++) {
        if (!fns[i])
            continue;
        all[i] = time_peak(fns[i], chains[i], threads, lanes * ops_per_lane);
        if (all[i] > best)
            best = all[i], bi = i;
    }
    double one = time_peak(fns[bi], chains[bi], 1, lanes * ops_per_lane);
    double ghz = 0;
#if defined(__x86_64__)
    double per[256];
    int nt = threads < 256 ? threads : 256;
    slim_parallel_for(nt, 1, add_chain, per);
    for (int i = 0; i < nt; i++)
        ghz += per[i] / nt;
#endif
    printf("\"isa\": \"%s\", \"chains\": %d, \"by_chains\": {", isa, chains[bi]);
    for (int i = 0, first = 1; i < 4; i++)
        if (fns[i]) {
            printf("%s\"%d\": %.1f", first ? "" : ", ", chains[i], all[i]);
            first = 0;
        }
    printf("}, \"ghz_est\": %.2f, \"%s_1t\": %.1f, \"per_cycle_1t\": %.2f, \"%s\": %.1f}\n", ghz,
           f32 ? "gflops" : "gops", one, ghz > 0 ? one / (ghz * lanes * ops_per_lane) : 0.0, key,
           best);
    return 0;
}
