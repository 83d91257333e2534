/* dtype.c - data type tables and the scalar conversions every kernel uses. */
#include "slim.h"

#include <math.h>
#include <string.h>

static const struct {
    size_t size;
    const char *name;
    int onnx;
} dtype_info[SLIM_DTYPE_COUNT] = {
    [SLIM_DTYPE_UNDEFINED] = {0, "undefined", 0},
#define SLIM__DTYPE_INFO(e, size, text, onnx) [SLIM_##e] = {size, text, onnx},
    SLIM_DTYPE_MAP(SLIM__DTYPE_INFO)
#undef SLIM__DTYPE_INFO
};

size_t slim_dtype_size(slim_dtype t)
{
    return (unsigned)t < SLIM_DTYPE_COUNT ? dtype_info[t].size : 0;
}

const char *slim_dtype_name(slim_dtype t)
{
    return (unsigned)t < SLIM_DTYPE_COUNT ? dtype_info[t].name : "invalid";
}

slim_dtype slim_dtype_from_name(const char *name)
{
    for (int t = 1; t < SLIM_DTYPE_COUNT; t++)
        if (strcmp(dtype_info[t].name, name) == 0)
            return (slim_dtype)t;
    return SLIM_DTYPE_UNDEFINED;
}

slim_dtype slim_dtype_from_onnx(int code)
{
    for (int t = 1; t < SLIM_DTYPE_COUNT; t++)
        if (dtype_info[t].onnx == code)
            return (slim_dtype)t;
    return SLIM_DTYPE_UNDEFINED;
}

int slim_dtype_to_onnx(slim_dtype t)
{
    return (unsigned)t < SLIM_DTYPE_COUNT ? dtype_info[t].onnx : 0;
}

bool slim_dtype_is_float(slim_dtype t)
{
    return t == SLIM_F32 || t == SLIM_F16 || t == SLIM_BF16 || t == SLIM_F64;
}

bool slim_dtype_is_signed(slim_dtype t)
{
    return t == SLIM_I8 || t == SLIM_I16 || t == SLIM_I32 || t == SLIM_I64;
}

bool slim_dtype_is_int(slim_dtype t)
{
    return slim_dtype_is_signed(t) || t == SLIM_U8 || t == SLIM_U16 ||
           t == SLIM_U32 || t == SLIM_U64;
}

/* IEEE half: 1 sign, 5 exponent, 10 mantissa bits. */
float slim_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t slim_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) /* NaN: keep it quiet */
        return sign | 0x7e00 | (uint16_t)((absx >> 13) & 0x3ff);
    if (absx >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return sign | 0x7c00;
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal */
        if (absx < 0x33000000u) /* < 2^-25 rounds to zero */
            return sign;
        uint32_t mant = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(absx >> 23); /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return sign | (uint16_t)half;
    }
    uint32_t base = absx - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t half = base >> 13;
    uint32_t rem = base & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++;
    return sign | (uint16_t)half;
}

float slim_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t slim_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

double slim_load_f64(slim_dtype t, const void *data, int64_t i)
{
    switch (t) {
    case SLIM_F32: return ((const float *)data)[i];
    case SLIM_F64: return ((const double *)data)[i];
    case SLIM_F16: return slim_f16_to_f32(((const uint16_t *)data)[i]);
    case SLIM_BF16: return slim_bf16_to_f32(((const uint16_t *)data)[i]);
    case SLIM_I8: return ((const int8_t *)data)[i];
    case SLIM_U8: return ((const uint8_t *)data)[i];
    case SLIM_I16: return ((const int16_t *)data)[i];
    case SLIM_U16: return ((const uint16_t *)data)[i];
    case SLIM_I32: return ((const int32_t *)data)[i];
    case SLIM_U32: return ((const uint32_t *)data)[i];
    case SLIM_I64: return (double)((const int64_t *)data)[i];
    case SLIM_U64: return (double)((const uint64_t *)data)[i];
    case SLIM_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: return 0;
    }
}

int64_t slim_load_i64(slim_dtype t, const void *data, int64_t i)
{
    switch (t) {
    case SLIM_I64: return ((const int64_t *)data)[i];
    case SLIM_U64: return (int64_t)((const uint64_t *)data)[i];
    case SLIM_I32: return ((const int32_t *)data)[i];
    case SLIM_U32: return ((const uint32_t *)data)[i];
    case SLIM_I16: return ((const int16_t *)data)[i];
    case SLIM_U16: return ((const uint16_t *)data)[i];
    case SLIM_I8: return ((const int8_t *)data)[i];
    case SLIM_U8: return ((const uint8_t *)data)[i];
    case SLIM_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: {
        double v = slim_load_f64(t, data, i);
        if (isnan(v))
            return 0;
        if (v >= 9.2e18)
            return INT64_MAX;
        if (v <= -9.2e18)
            return INT64_MIN;
        return (int64_t)v;
    }
    }
}

void slim_store_f64(slim_dtype t, void *data, int64_t i, double v)
{
    switch (t) {
    case SLIM_F32: ((float *)data)[i] = (float)v; break;
    case SLIM_F64: ((double *)data)[i] = v; break;
    case SLIM_F16: ((uint16_t *)data)[i] = slim_f32_to_f16((float)v); break;
    case SLIM_BF16: ((uint16_t *)data)[i] = slim_f32_to_bf16((float)v); break;
    case SLIM_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    default: slim_store_i64(t, data, i, (int64_t)v); break;
    }
}

void slim_store_i64(slim_dtype t, void *data, int64_t i, int64_t v)
{
    switch (t) {
    case SLIM_I64: ((int64_t *)data)[i] = v; break;
    case SLIM_U64: ((uint64_t *)data)[i] = (uint64_t)v; break;
    case SLIM_I32: ((int32_t *)data)[i] = (int32_t)v; break;
    case SLIM_U32: ((uint32_t *)data)[i] = (uint32_t)v; break;
    case SLIM_I16: ((int16_t *)data)[i] = (int16_t)v; break;
    case SLIM_U16: ((uint16_t *)data)[i] = (uint16_t)v; break;
    case SLIM_I8: ((int8_t *)data)[i] = (int8_t)v; break;
    case SLIM_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
    case SLIM_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    /* No number is stored into a string slot (nor into nothing). */
    case SLIM_STRING: case SLIM_DTYPE_UNDEFINED: break;
    default: slim_store_f64(t, data, i, (double)v); break;
    }
}
