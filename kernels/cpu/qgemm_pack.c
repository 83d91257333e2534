/*
 * qgemm_pack.c - the int8 product's weight layout (qgemm.h): packing a
 * weight matrix into 64-channel panels of k groups of 4 bytes (what the
 * VNNI, AVX2 and AMX loops read), its column sums, and unpacking. Moved
 * out of qgemm.c, which keeps the products.
 */
#include "qgemm.h"
#include "qgemm_impl.h"

#include <string.h>

int64_t slim_qgemm_k4(int64_t k)
{
    return (k + 3) & ~(int64_t)3;
}

int64_t slim_qgemm_n16(int64_t n)
{
    return (n + 15) & ~(int64_t)15;
}

size_t slim_qgemm_packed_bytes(int64_t n, int64_t k)
{
    return (size_t)slim_qgemm_n16(n) * (size_t)slim_qgemm_k4(k);
}

static size_t packed_index(int64_t n16, int64_t k4, int64_t j, int64_t kk)
{
    int64_t p = j / SLIM_QGEMM_PANEL, w = slim__qgemm_panel_width(n16, p);
    return (size_t)(p * SLIM_QGEMM_PANEL * k4 + (kk / 4) * w * 4 + (j % SLIM_QGEMM_PANEL) * 4 +
                    kk % 4);
}

void slim_qgemm_pack(const int8_t *wq, int64_t n, int64_t k, int8_t *packed, int32_t *colsum)
{
    int64_t n16 = slim_qgemm_n16(n), k4 = slim_qgemm_k4(k);
    memset(packed, 0, slim_qgemm_packed_bytes(n, k));
    for (int64_t j = 0; j < n; j++) {
        int32_t s = 0;
        for (int64_t kk = 0; kk < k; kk++) {
            packed[packed_index(n16, k4, j, kk)] = wq[j * k + kk];
            s += wq[j * k + kk];
        }
        colsum[j] = s;
    }
}

void slim_qgemm_pack_kn(const int8_t *b, int64_t k, int64_t n, int64_t ldb, int8_t *packed,
                        int32_t *colsum)
{
    int64_t n16 = slim_qgemm_n16(n), k4 = slim_qgemm_k4(k);
    memset(packed, 0, slim_qgemm_packed_bytes(n, k));
    memset(colsum, 0, sizeof(int32_t) * (size_t)n);
    for (int64_t p = 0; p * SLIM_QGEMM_PANEL < n16; p++) {
        int64_t w = slim__qgemm_panel_width(n16, p), n0 = p * SLIM_QGEMM_PANEL;
        int64_t cols = n - n0 < w ? n - n0 : w;
        int8_t *dst = packed + p * SLIM_QGEMM_PANEL * k4;
        for (int64_t kk = 0; kk < k; kk++) {
            const int8_t *src = b + kk * ldb + n0;
            int8_t *d = dst + (kk / 4) * w * 4 + kk % 4;
            for (int64_t c = 0; c < cols; c++) {
                d[c * 4] = src[c];
                colsum[n0 + c] += src[c];
            }
        }
    }
}

void slim_qgemm_unpack(const int8_t *packed, int64_t n, int64_t k, int8_t *wq)
{
    int64_t n16 = slim_qgemm_n16(n), k4 = slim_qgemm_k4(k);
    for (int64_t j = 0; j < n; j++)
        for (int64_t kk = 0; kk < k; kk++)
            wq[j * k + kk] = packed[packed_index(n16, k4, j, kk)];
}
