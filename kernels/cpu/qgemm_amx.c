/*
 * qgemm_amx.c - the int8 product's AMX tiles (Intel Sapphire Rapids and
 * later): 16 rows x one full 64-channel panel of exact int32 sums, for the
 * AVX-512 VNNI path of qgemm.c, which keeps its quantization and epilogue.
 *
 * Why: one tdpbusd is 16 x 16 x 64 multiply-adds, and a core retires about
 * 8x the multiply-adds of its vpdpbusd pipes with it (bench_qgemm); the
 * encoder's products are nearly all full panels of many rows. The sums
 * are the same exact integers as vpdpbusd's (u8 x s8 into int32), so the
 * outputs are bitwise the VNNI path's, whatever rows a tile takes.
 *
 * Layout: qgemm.c packs a panel as k groups of 4 bytes, each group 64
 * channels x 4 bytes (256 bytes). A B tile (16 k-groups x 16 channels x 4
 * bytes) is then 16 rows of 64 bytes at a stride of 256, read straight from
 * the packed weights: no second packing. An A tile is 16 quantized rows x
 * 64 bytes of k (stride k4). K beyond the last whole 64 is added with
 * vpdpbusd on the stored sums.
 *
 * Linux hands out the tile registers per process on request
 * (arch_prctl ARCH_REQ_XCOMP_PERM), asked once; where that fails, or
 * CPUID has no AMX, the VNNI loops run as before. Each task loads the tile
 * configuration and releases the tiles when done, so an idle thread does
 * not carry 8 KiB of tile state through every context switch.
 */
#include "qgemm_impl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define QGEMM_AMX 1
#endif

#ifdef QGEMM_AMX
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define AMX_TARGET \
    __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni")))

/* The 64-byte tile configuration (palette 1). */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

static bool amx_probe(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1))
        return false;
    if (!slim_qgemm_isa_supported(SLIM_QGEMM_AVX512VNNI))
        return false;
    /* The OS must also save the tile state (XCR0 bits 17 and 18). */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1))
        return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
        return false;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#endif

/* -1 not yet probed, 0 no, 1 yes; the probe runs once. */
static _Atomic int amx_have = -1;
/* What SLIM_INT8_AMX and slim_qgemm_set_amx say: -1 not read yet. */
static _Atomic int amx_want = -1;

static bool amx_supported(void)
{
    int h = atomic_load(&amx_have);
    if (h < 0) {
#ifdef QGEMM_AMX
        h = amx_probe();
#else
        h = 0;
#endif
        atomic_store(&amx_have, h);
    }
    return h == 1;
}

bool slim_qgemm_set_amx(bool on)
{
    atomic_store(&amx_want, on ? 1 : 0);
    return on && amx_supported();
}

bool slim_qgemm_amx_active(void)
{
    int w = atomic_load(&amx_want);
    if (w < 0) {
        const char *env = getenv("SLIM_INT8_AMX");
        w = !(env && strcmp(env, "0") == 0);
        atomic_store(&amx_want, w);
    }
    return w == 1 && amx_supported();
}

#ifdef QGEMM_AMX
AMX_TARGET void slim__qgemm_amx_begin(void)
{
    amx_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    /* GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes, and
     * the stores of the rest were dropped (a #GP on ldtilecfg): the whole
     * struct as the operand instead. */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

AMX_TARGET void slim__qgemm_amx_end(void)
{
    _tile_release();
}

AMX_TARGET static void k_tail(const uint8_t *qx, int64_t k4, const int8_t *b, int32_t *acc,
                              int rows);

/* Tiles: 0-3 the sums of channels 0-15 .. 48-63, 4 the rows, 5 and 6 the
 * weights (two, so that one loads while the other multiplies). */
AMX_TARGET void slim__qgemm_amx_tile16(const uint8_t *qx, int64_t k4, const int8_t *b,
                                       int32_t *acc)
{
    int64_t kfull = k4 & ~(int64_t)63;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kb = 0; kb < kfull; kb += 64) {
        /* 16 k-groups of the panel: 16 x 256 bytes from group kb / 4. */
        const int8_t *bk = b + kb * SLIM_QGEMM_PANEL;
        _tile_loadd(4, qx + kb, k4);
        _tile_loadd(5, bk, 4 * SLIM_QGEMM_PANEL);
        _tile_loadd(6, bk + 64, 4 * SLIM_QGEMM_PANEL);
        _tile_dpbusd(0, 4, 5);
        _tile_loadd(5, bk + 128, 4 * SLIM_QGEMM_PANEL);
        _tile_dpbusd(1, 4, 6);
        _tile_loadd(6, bk + 192, 4 * SLIM_QGEMM_PANEL);
        _tile_dpbusd(2, 4, 5);
        _tile_dpbusd(3, 4, 6);
    }
    _tile_stored(0, acc, 4 * SLIM_QGEMM_PANEL);
    _tile_stored(1, acc + 16, 4 * SLIM_QGEMM_PANEL);
    _tile_stored(2, acc + 32, 4 * SLIM_QGEMM_PANEL);
    _tile_stored(3, acc + 48, 4 * SLIM_QGEMM_PANEL);
    k_tail(qx, k4, b, acc, 16);
}

/* 32 rows: two row tiles against two weight tiles at a time (channels 0-31,
 * then 32-63), so that each weight tile, which comes from L2, serves 32
 * rows instead of 16: per 64 bytes of k, 4 KiB of weights for 8 tdpbusd
 * instead of 8 KiB. Tiles: 0-3 sums (rows 0-15 / 16-31 x the two channel
 * blocks), 4 and 5 the rows, 6 and 7 the weights. */
AMX_TARGET void slim__qgemm_amx_tile32(const uint8_t *qx, int64_t k4, const int8_t *b,
                                       int32_t *acc)
{
    int64_t kfull = k4 & ~(int64_t)63;
    const uint8_t *qx2 = qx + 16 * k4;
    for (int half = 0; half < 2; half++) {
        const int8_t *bh = b + half * 128;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t kb = 0; kb < kfull; kb += 64) {
            const int8_t *bk = bh + kb * SLIM_QGEMM_PANEL;
            _tile_loadd(4, qx + kb, k4);
            _tile_loadd(6, bk, 4 * SLIM_QGEMM_PANEL);
            _tile_loadd(7, bk + 64, 4 * SLIM_QGEMM_PANEL);
            _tile_loadd(5, qx2 + kb, k4);
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
            _tile_dpbusd(2, 5, 6);
            _tile_dpbusd(3, 5, 7);
        }
        int32_t *ah = acc + half * 32;
        _tile_stored(0, ah, 4 * SLIM_QGEMM_PANEL);
        _tile_stored(1, ah + 16, 4 * SLIM_QGEMM_PANEL);
        _tile_stored(2, ah + 16 * SLIM_QGEMM_PANEL, 4 * SLIM_QGEMM_PANEL);
        _tile_stored(3, ah + 16 * SLIM_QGEMM_PANEL + 16, 4 * SLIM_QGEMM_PANEL);
    }
    k_tail(qx, k4, b, acc, 32);
}

/* The last k4 % 64 bytes of rows rows: vpdpbusd on the stored sums, a row
 * at a time. */
AMX_TARGET static void k_tail(const uint8_t *qx, int64_t k4, const int8_t *b, int32_t *acc,
                              int rows)
{
    int64_t kfull = k4 & ~(int64_t)63;
    if (kfull == k4)
        return;
    for (int i = 0; i < rows; i++) {
        int32_t *ai = acc + i * SLIM_QGEMM_PANEL;
        __m512i s0 = _mm512_loadu_si512(ai), s1 = _mm512_loadu_si512(ai + 16);
        __m512i s2 = _mm512_loadu_si512(ai + 32), s3 = _mm512_loadu_si512(ai + 48);
        for (int64_t g = kfull / 4; g < k4 / 4; g++) {
            const int8_t *bg = b + g * 4 * SLIM_QGEMM_PANEL;
            int32_t quad;
            memcpy(&quad, qx + i * k4 + g * 4, 4);
            __m512i xv = _mm512_set1_epi32(quad);
            s0 = _mm512_dpbusd_epi32(s0, xv, _mm512_loadu_si512(bg));
            s1 = _mm512_dpbusd_epi32(s1, xv, _mm512_loadu_si512(bg + 64));
            s2 = _mm512_dpbusd_epi32(s2, xv, _mm512_loadu_si512(bg + 128));
            s3 = _mm512_dpbusd_epi32(s3, xv, _mm512_loadu_si512(bg + 192));
        }
        _mm512_storeu_si512(ai, s0);
        _mm512_storeu_si512(ai + 16, s1);
        _mm512_storeu_si512(ai + 32, s2);
        _mm512_storeu_si512(ai + 48, s3);
    }
}
#else
/* Never called: slim_qgemm_amx_active() is false without AMX. */
void slim__qgemm_amx_begin(void) {}
void slim__qgemm_amx_end(void) {}
void slim__qgemm_amx_tile16(const uint8_t *qx, int64_t k4, const int8_t *b, int32_t *acc)
{
    (void)qx, (void)k4, (void)b, (void)acc;
}
void slim__qgemm_amx_tile32(const uint8_t *qx, int64_t k4, const int8_t *b, int32_t *acc)
{
    (void)qx, (void)k4, (void)b, (void)acc;
}
#endif
