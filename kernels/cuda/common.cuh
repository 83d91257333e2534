/*
 * common.cuh - device helpers the .cu files share: element loads and
 * stores of every float type as fp32, and the dtype of a tensor as a CUDA
 * library type.
 */
#ifndef SLIM_CUDA_COMMON_CUH
#define SLIM_CUDA_COMMON_CUH

#include "cuda_impl.h"

#include <cuda_bf16.h>

/* Loads/stores element i of a float buffer of dtype dt as fp32: kernels
 * compute in fp32 whatever the storage type, so fp16 tensors accumulate in
 * fp32 ("guarded" reductions) and round once on store. */
__device__ __forceinline__ float slim_ld(const void *p, int64_t i, int dt)
{
    if (dt == SLIM_F16)
        return __half2float(((const __half *)p)[i]);
    if (dt == SLIM_BF16)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}

__device__ __forceinline__ void slim_st(void *p, int64_t i, int dt, float v)
{
    if (dt == SLIM_F16)
        ((__half *)p)[i] = __float2half_rn(v);
    else if (dt == SLIM_BF16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else
        ((float *)p)[i] = v;
}

/* The same for typed pointers (kernels templated on the storage type). */
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void from_f32(float *p, float v) { *p = v; }
__device__ __forceinline__ void from_f32(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void from_f32(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

static inline bool slim_cuda_is_float(slim_dtype dt)
{
    return dt == SLIM_F32 || dt == SLIM_F16 || dt == SLIM_BF16;
}

/* Shapes up to 8 dims travel to kernels by value. */
typedef struct slim_cuda_shape {
    int ndim;
    int64_t dims[SLIM_MAX_DIMS];
    int64_t strides[SLIM_MAX_DIMS]; /* in elements */
} slim_cuda_shape;

#define SLIM_CUDA_BLOCK 256

#endif
