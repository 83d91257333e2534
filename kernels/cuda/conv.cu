/*
 * conv.cu - 2-D convolution as im2col + cuBLAS.
 *
 * Each image's patches are unfolded into a [C/group * KH * KW, OH * OW]
 * matrix in scratch, and each group's filter [M/group, C/group * KH * KW]
 * multiplies it on tensor cores (fp32 accumulation for fp16). A 1x1
 * stride-1 unpadded convolution skips the unfolding: the image already is
 * that matrix. Every image is its own product of one fixed shape, so an
 * image's result does not depend on the batch it ran in. Bias is added
 * after the product.
 *
 * With SLIM_CUDNN=1 cuDNN runs the convolution instead where it can
 * (conv_cudnn.cu, which says why that is not the default).
 */
#include "common.cuh"

#include <string.h>

typedef struct conv_geom {
    int64_t c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
} conv_geom;

/* col[img][(c * kh + ky) * kw + kx][oy * ow + ox] for one group's
 * channels; images are x_img_stride elements apart in x. */
__global__ void im2col_kernel(const void *x, void *col, int64_t n, conv_geom g,
                              int64_t x_img_stride, int dt)
{
    int64_t per_img = g.c * g.kh * g.kw * g.oh * g.ow;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t img = i / per_img, j = i % per_img;
        int64_t ox = j % g.ow, oy = (j / g.ow) % g.oh;
        int64_t r = j / (g.ow * g.oh);
        int64_t kx = r % g.kw, ky = (r / g.kw) % g.kh, c = r / (g.kw * g.kh) +
                     img * (x_img_stride / (g.h * g.w));
        int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
        float v = (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
                      ? slim_ld(x, (c * g.h + iy) * g.w + ix, dt)
                      : 0.0f;
        slim_st(col, i, dt, v);
    }
}

__global__ void add_channel_bias_kernel(void *y, const void *b, int64_t n, int64_t channels,
                                        int64_t spatial, int dt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        slim_st(y, i, dt, slim_ld(y, i, dt) + slim_ld(b, (i / spatial) % channels, dt));
}

static slim_status conv_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    slim_status blas = slim_cuda_blas(cu, ctx->err);
    if (blas)
        return blas;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1];
    const slim_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_tensor *y = ctx->out[0];
    if (slim_tensor_numel(y) == 0)
        return SLIM_OK;
    if (x->ndim != 4)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "the GPU convolution is 2-D only; this "
                         "input has %d dims (load the model on the CPU)", x->ndim);
    int64_t group = slim_attr_int(ctx->node, "group", 1);
    int64_t s[2] = {1, 1}, p[4] = {0, 0, 0, 0}, d[2] = {1, 1};
    slim_attr_ints(ctx->node, "strides", s, 2);
    slim_attr_ints(ctx->node, "pads", p, 4);
    slim_attr_ints(ctx->node, "dilations", d, 2);
    int64_t N = x->dims[0], C = x->dims[1], M = y->dims[1];
    int64_t cg = C / group, mg = M / group;
    conv_geom g = {cg, x->dims[2], x->dims[3], y->dims[2], y->dims[3], w->dims[2], w->dims[3],
                   s[0], s[1], p[0], p[1], d[0], d[1]};
    int64_t kdim = cg * g.kh * g.kw, spatial = g.oh * g.ow;
    if (kdim > INT32_MAX || spatial > INT32_MAX || mg > INT32_MAX)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "convolution too large for one product");
    size_t es = slim_dtype_size(x->dtype);
    bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 &&
                  p[2] == 0 && p[3] == 0;
    void *col = NULL;
    slim_status st;
    cudaDataType_t t = x->dtype == SLIM_F16 ? CUDA_R_16F
                     : x->dtype == SLIM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct = x->dtype == SLIM_F32 && cu->allow_tf32
                                 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    float one = 1.0f, zero = 0.0f;
#ifdef SLIM_HAVE_CUDNN
    bool by_dnn = false;
    if ((st = slim_cuda_conv_dnn(cu, x, w, y, group, s, p, d, &by_dnn, ctx->err)))
        return st;
    if (by_dnn)
        N = 0; /* done: the bias below */
#endif
    if (group == 1 && N > 1 && !slim_gemm_row_invariant()) {
        /* Every image at once: unfold the batch, then one strided-batched
         * product with the filter shared (stride 0). Outside batch-
         * invariant mode only: the batch count may change cuBLAS's kernel. */
        const void *B = x->data;
        int64_t bstride = C * g.h * g.w;
        if (!direct) {
            void *all;
            if ((st = slim_cuda_scratch(cu, (size_t)(N * kdim * spatial) * es, &all, ctx->err)))
                return st;
            int64_t n = N * kdim * spatial;
            im2col_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0,
                            cu->stream>>>(x->data, all, n, g, C * g.h * g.w, x->dtype);
            SLIM_CUDA_LAUNCH_CHECK(ctx->err);
            B = all;
            bstride = kdim * spatial;
        }
        SLIM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
                              cu->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)spatial, (int)mg,
                              (int)kdim, &one, B, t, (int)spatial, bstride, w->data, t,
                              (int)kdim, 0, &zero, y->data, t, (int)spatial, M * spatial,
                              (int)N, ct, CUBLAS_GEMM_DEFAULT), ctx->err);
        N = 0; /* done */
    }
    /* One image's unfolded input, reused image by image. */
    if (N > 0 && !direct &&
        (st = slim_cuda_scratch(cu, (size_t)(kdim * spatial) * es, &col, ctx->err)))
        return st;
    for (int64_t img = 0; img < N; img++) {
        for (int64_t gi = 0; gi < group; gi++) {
            const char *xin = (const char *)x->data + ((img * C + gi * cg) * g.h * g.w) * es;
            const void *B = xin;
            if (!direct) {
                int64_t n = kdim * spatial;
                im2col_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0,
                                cu->stream>>>(xin, col, n, g, C * g.h * g.w, x->dtype);
                SLIM_CUDA_LAUNCH_CHECK(ctx->err);
                B = col;
            }
            /* Row-major Y_g[mg, spatial] = W_g[mg, kdim] * B[kdim, spatial],
             * as column-major Y^T = B^T W^T. */
            const char *wg = (const char *)w->data + (gi * mg * kdim) * es;
            char *yg = (char *)y->data + ((img * M + gi * mg) * spatial) * es;
            SLIM_CUBLAS_CHECK(cublasGemmEx(cu->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)spatial,
                                           (int)mg, (int)kdim, &one, B, t, (int)spatial, wg, t,
                                           (int)kdim, &zero, yg, t, (int)spatial, ct,
                                           CUBLAS_GEMM_DEFAULT), ctx->err);
        }
    }
    if (b && slim_tensor_numel(b) > 0) {
        int64_t n = slim_tensor_numel(y);
        add_channel_bias_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0,
                                  cu->stream>>>(y->data, b->data, n, M, spatial, y->dtype);
    }
    return SLIM_OK;
}

static bool conv_ok(const slim_node *n, const slim_dtype *in)
{
    if (!slim_cuda_is_float(in[0]) || in[1] != in[0])
        return false;
    if (n->n_in > 2 && in[2] != SLIM_DTYPE_UNDEFINED && in[2] != in[0])
        return false;
    const char *pad = slim_attr_str(n, "auto_pad", "NOTSET");
    if (strcmp(pad, "NOTSET") != 0 && strcmp(pad, "VALID") != 0)
        return false;
    /* 2-D only. Without kernel_shape the rank is W's, which placement
     * cannot see here: such a Conv stays on the CPU rather than fail. */
    int64_t k[8];
    return slim_attr_ints(n, "kernel_shape", k, 8) == 2;
}

extern "C" const slim_cuda_op slim__cuda_ops_conv[] = {
    {"Conv", 1, 0, conv_ok, conv_exec},
    {NULL, 0, 0, NULL, NULL},
};
