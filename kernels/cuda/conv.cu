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

/* One group's geometry; conv_exec checks that every size fits 32 bits. */
typedef struct conv_geom32 {
    unsigned c, h, w, oh, ow, kh, kw, sh, sw, dh, dw;
    int ph, pw;
} conv_geom32;

/* col[img][(c * kh + ky) * kw + kx][oy * ow + ox] for one group's
 * channels, images x_img_stride elements apart in x: a block row (y) per
 * row of the unfolded matrix, threads along its output positions, so a
 * thread divides once (32-bit) and copies; the first version decoded all
 * six indices per element in 64-bit arithmetic through a dtype switch. */
template <typename T>
__global__ void im2col_kernel(const T *x, T *col, conv_geom32 g, unsigned rows, unsigned kdim,
                              size_t x_img_stride)
{
    unsigned spatial = g.oh * g.ow;
    for (unsigned row = blockIdx.y; row < rows; row += gridDim.y) {
        unsigned img = row / kdim, r = row - img * kdim;
        unsigned kx = r % g.kw, ky = (r / g.kw) % g.kh, c = r / (g.kw * g.kh);
        const T *xc = x + img * x_img_stride + (size_t)c * g.h * g.w;
        T *dst = col + (size_t)row * spatial;
        for (unsigned p = blockIdx.x * blockDim.x + threadIdx.x; p < spatial;
             p += gridDim.x * blockDim.x) {
            unsigned oy = p / g.ow, ox = p - oy * g.ow;
            int iy = (int)(oy * g.sh + ky * g.dh) - g.ph, ix = (int)(ox * g.sw + kx * g.dw) - g.pw;
            dst[p] = iy >= 0 && iy < (int)g.h && ix >= 0 && ix < (int)g.w
                         ? xc[(unsigned)iy * g.w + (unsigned)ix]
                         : static_cast<T>(0.0f);
        }
    }
}

/* y[img][ch][p] += b[ch]: a block row per (image, channel). */
template <typename T>
__global__ void channel_bias_kernel(T *y, const T *b, unsigned rows, unsigned channels,
                                    unsigned spatial)
{
    for (unsigned row = blockIdx.y; row < rows; row += gridDim.y) {
        float bias = to_f32(b[row % channels]);
        T *yr = y + (size_t)row * spatial;
        for (unsigned p = blockIdx.x * blockDim.x + threadIdx.x; p < spatial;
             p += gridDim.x * blockDim.x)
            from_f32(&yr[p], to_f32(yr[p]) + bias);
    }
}

/* A grid of rows x (spatial / block) blocks, both capped (kernels loop). */
static dim3 rows_grid(int64_t rows, int64_t spatial)
{
    int64_t bx = (spatial + SLIM_CUDA_BLOCK - 1) / SLIM_CUDA_BLOCK;
    return dim3((unsigned)(bx < 1 ? 1 : bx > 1024 ? 1024 : bx),
                (unsigned)(rows < 1 ? 1 : rows > 65535 ? 65535 : rows));
}

template <typename T>
static void launch_im2col(const void *x, void *col, const conv_geom32 &g, int64_t images,
                          int64_t kdim, int64_t x_img_stride, cudaStream_t st)
{
    im2col_kernel<T><<<rows_grid(images * kdim, (int64_t)g.oh * g.ow), SLIM_CUDA_BLOCK, 0, st>>>(
        (const T *)x, (T *)col, g, (unsigned)(images * kdim), (unsigned)kdim,
        (size_t)x_img_stride);
}

static void im2col(slim_dtype dt, const void *x, void *col, const conv_geom32 &g,
                   int64_t images, int64_t kdim, int64_t x_img_stride, cudaStream_t st)
{
    if (dt == SLIM_F16)
        launch_im2col<__half>(x, col, g, images, kdim, x_img_stride, st);
    else if (dt == SLIM_BF16)
        launch_im2col<__nv_bfloat16>(x, col, g, images, kdim, x_img_stride, st);
    else
        launch_im2col<float>(x, col, g, images, kdim, x_img_stride, st);
}

static void channel_bias(slim_dtype dt, void *y, const void *b, int64_t rows, int64_t channels,
                         int64_t spatial, cudaStream_t st)
{
    dim3 grid = rows_grid(rows, spatial);
    if (dt == SLIM_F16)
        channel_bias_kernel<__half><<<grid, SLIM_CUDA_BLOCK, 0, st>>>(
            (__half *)y, (const __half *)b, (unsigned)rows, (unsigned)channels, (unsigned)spatial);
    else if (dt == SLIM_BF16)
        channel_bias_kernel<__nv_bfloat16><<<grid, SLIM_CUDA_BLOCK, 0, st>>>(
            (__nv_bfloat16 *)y, (const __nv_bfloat16 *)b, (unsigned)rows, (unsigned)channels,
            (unsigned)spatial);
    else
        channel_bias_kernel<float><<<grid, SLIM_CUDA_BLOCK, 0, st>>>(
            (float *)y, (const float *)b, (unsigned)rows, (unsigned)channels, (unsigned)spatial);
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
    int64_t H = x->dims[2], W = x->dims[3], OH = y->dims[2], OW = y->dims[3];
    int64_t KH = w->dims[2], KW = w->dims[3];
    int64_t kdim = cg * KH * KW, spatial = OH * OW;
    /* The kernels index in 32 bits: the reach of the last output into the
     * input, an image plane, the unfolded rows. */
    bool fits = kdim <= INT32_MAX && spatial <= INT32_MAX && mg <= INT32_MAX &&
                H * W <= INT32_MAX && N * kdim <= INT32_MAX && N * M <= INT32_MAX;
    for (int i = 0; i < 2 && fits; i++) {
        int64_t out = i ? OW : OH, k = i ? KW : KH, in = i ? W : H;
        fits = s[i] >= 1 && d[i] >= 1 && p[i] >= 0 && p[i] <= INT32_MAX / 4 && in <= INT32_MAX &&
               s[i] <= INT32_MAX / 4 && d[i] <= INT32_MAX / 4 &&
               (out - 1) * s[i] + (k - 1) * d[i] <= INT32_MAX / 2;
    }
    if (!fits)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "convolution of [%lld,%lld,%lld,%lld] by "
                         "[%lld,%lld,%lld,%lld] is past the GPU kernels' 32-bit indexing",
                         (long long)N, (long long)C, (long long)H, (long long)W,
                         (long long)w->dims[0], (long long)w->dims[1], (long long)KH,
                         (long long)KW);
    conv_geom32 g = {(unsigned)cg, (unsigned)H, (unsigned)W, (unsigned)OH, (unsigned)OW,
                     (unsigned)KH, (unsigned)KW, (unsigned)s[0], (unsigned)s[1], (unsigned)d[0],
                     (unsigned)d[1], (int)p[0], (int)p[1]};
    size_t es = slim_dtype_size(x->dtype);
    bool direct = KH == 1 && KW == 1 && s[0] == 1 && s[1] == 1 && p[0] == 0 && p[1] == 0 &&
                  p[2] == 0 && p[3] == 0;
    void *col = NULL;
    slim_status st;
    cudaDataType_t t = x->dtype == SLIM_F16 ? CUDA_R_16F
                     : x->dtype == SLIM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct = slim_cuda_compute(x->dtype, cu);
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
        int64_t bstride = C * H * W;
        if (!direct) {
            void *all;
            if ((st = slim_cuda_scratch(cu, (size_t)(N * kdim * spatial) * es, &all, ctx->err)))
                return st;
            im2col(x->dtype, x->data, all, g, N, kdim, C * H * W, cu->stream);
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
            const char *xin = (const char *)x->data + ((img * C + gi * cg) * H * W) * es;
            const void *B = xin;
            if (!direct) {
                im2col(x->dtype, xin, col, g, 1, kdim, C * H * W, cu->stream);
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
        channel_bias(y->dtype, y->data, b->data, y->dims[0] * M, M, spatial, cu->stream);
        SLIM_CUDA_LAUNCH_CHECK(ctx->err);
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
