/*
 * conv_cudnn.cu - 2-D convolution through cuDNN, when the machine has it
 * and SLIM_CUDNN=1 asks for it.
 *
 * im2col + cuBLAS (conv.cu) writes every patch out before multiplying: at
 * batch 32 the example ResNet spent 86% of its fp16 time in Conv and ran
 * at 0.79x onnxruntime-gpu on an H100 (2026-11-26), which uses cuDNN.
 * cuDNN's implicit-GEMM and Winograd kernels read the image in place.
 *
 * Measured, it lost: on an H100 (2026-11-26, cuDNN 9.19) the example
 * ResNet in fp16 took 0.634 / 0.482 / 0.613 ms at batch 1 / 8 / 32 through
 * here against 0.296 / 0.260 / 0.528 ms through im2col (fp32: 0.640 /
 * 0.698 / 0.596 against 0.274 / 0.285 / 0.621), so it is opt-in:
 * SLIM_CUDNN=1. Likely causes, not yet separated: the legacy API's cost
 * per call in cuDNN 9 (it goes through the graph API) and the heuristic's
 * choice for NCHW halves. docs/benchmarks.md, gpu_h100_2026-11-26b_*.
 *
 * cuDNN is optional twice over: built only when the toolkit has cudnn.h
 * (SLIM_HAVE_CUDNN), and loaded with dlopen at the first convolution, so a
 * machine without libcudnn.so.9 runs every convolution through im2col.
 *
 * The algorithm is cuDNN's heuristic first choice (no timing runs, which
 * would allocate outside the caching allocator) among deterministic ones
 * with a workspace of at most DNN_WS_MAX, taken from the node's scratch.
 * fp32 may use TF32 unless the model is fp32-strict (then FMA math); halves use tensor
 * cores with fp32 accumulation. In row-invariant mode each image is its
 * own N = 1 call, so its result does not depend on the batch it came in.
 */
#include "common.cuh"

#include <cudnn.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DNN_PLANS 64
#define DNN_WS_MAX ((size_t)64 << 20)

/* The entry points used, loaded from libcudnn.so.9 (which forwards to its
 * sub-libraries). */
#define DNN_FNS(X)                                                                          \
    X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetErrorString)                 \
    X(cudnnCreateTensorDescriptor) X(cudnnSetTensor4dDescriptor)                            \
    X(cudnnDestroyTensorDescriptor) X(cudnnCreateFilterDescriptor)                          \
    X(cudnnSetFilter4dDescriptor) X(cudnnDestroyFilterDescriptor)                           \
    X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolution2dDescriptor)                  \
    X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)                         \
    X(cudnnDestroyConvolutionDescriptor) X(cudnnGetConvolution2dForwardOutputDim)           \
    X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnConvolutionForward)

static struct {
    bool ok;
#define DNN_DECL(f) decltype(&::f) f;
    DNN_FNS(DNN_DECL)
#undef DNN_DECL
} dnn;
static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;

static void dnn_load(void)
{
    const char *env = getenv("SLIM_CUDNN");
    if (!env || strcmp(env, "1") != 0)
        return;
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return; /* no cuDNN here: im2col */
    bool all = true;
#define DNN_SYM(f) all = all && (*(void **)&dnn.f = dlsym(lib, #f)) != NULL;
    DNN_FNS(DNN_SYM)
#undef DNN_SYM
    if (!all) {
        dlclose(lib);
        return;
    }
    dnn.ok = true;
}

#define DNN_CHECK(call, err)                                                              \
    do {                                                                                  \
        cudnnStatus_t s_ = (call);                                                        \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                   \
            return slim_errf((err), s_ == CUDNN_STATUS_ALLOC_FAILED ? SLIM_EOOM           \
                                                                    : SLIM_EINTERNAL,     \
                             "cuDNN error %s in %s at %s:%d", dnn.cudnnGetErrorString(s_), \
                             #call, __FILE__, __LINE__);                                  \
    } while (0)

#define DNN_KEY 16

typedef struct dnn_plan {
    bool used, ok;              /* ok: cuDNN runs this shape */
    int64_t key[DNN_KEY];
    uint64_t last;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    int oh, ow;                 /* cuDNN's output size, checked against Y's */
} dnn_plan;

struct slim_cuda_dnn {
    cudnnHandle_t handle;
    uint64_t clock;
    dnn_plan plans[DNN_PLANS];
};

static void plan_clear(dnn_plan *p)
{
    if (p->xd)
        dnn.cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd)
        dnn.cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd)
        dnn.cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd)
        dnn.cudnnDestroyConvolutionDescriptor(p->cd);
    memset(p, 0, sizeof(*p));
}

extern "C" void slim_cuda_dnn_release(slim_cuda_ctx *cu)
{
    struct slim_cuda_dnn *d = cu->dnn;
    if (!d)
        return;
    for (int i = 0; i < DNN_PLANS; i++)
        plan_clear(&d->plans[i]);
    if (d->handle)
        dnn.cudnnDestroy(d->handle);
    free(d);
    cu->dnn = NULL;
}

/* key: dtype, tf32, N, C, H, W, M, KH, KW, pad h/w, stride h/w, dilation
 * h/w, group. */
static slim_status plan_build(struct slim_cuda_dnn *d, dnn_plan *p, slim_err *err)
{
    const int64_t *k = p->key;
    slim_dtype dt = (slim_dtype)k[0];
    cudnnDataType_t t = dt == SLIM_F16 ? CUDNN_DATA_HALF
                      : dt == SLIM_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    int n = (int)k[2], c = (int)k[3], h = (int)k[4], w = (int)k[5], m = (int)k[6];
    int group = (int)k[15];
    DNN_CHECK(dnn.cudnnCreateTensorDescriptor(&p->xd), err);
    DNN_CHECK(dnn.cudnnCreateTensorDescriptor(&p->yd), err);
    DNN_CHECK(dnn.cudnnCreateFilterDescriptor(&p->wd), err);
    DNN_CHECK(dnn.cudnnCreateConvolutionDescriptor(&p->cd), err);
    DNN_CHECK(dnn.cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NCHW, t, n, c, h, w), err);
    DNN_CHECK(dnn.cudnnSetFilter4dDescriptor(p->wd, t, CUDNN_TENSOR_NCHW, m, c / group,
                                             (int)k[7], (int)k[8]), err);
    DNN_CHECK(dnn.cudnnSetConvolution2dDescriptor(p->cd, (int)k[9], (int)k[10], (int)k[11],
                                                  (int)k[12], (int)k[13], (int)k[14],
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              err);
    DNN_CHECK(dnn.cudnnSetConvolutionGroupCount(p->cd, group), err);
    cudnnMathType_t math = dt != SLIM_F32 ? CUDNN_TENSOR_OP_MATH
                         : k[1] ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    DNN_CHECK(dnn.cudnnSetConvolutionMathType(p->cd, math), err);
    int on, oc, oh, ow;
    DNN_CHECK(dnn.cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &on, &oc, &oh,
                                                        &ow), err);
    (void)oc;
    p->oh = oh;
    p->ow = ow;
    DNN_CHECK(dnn.cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NCHW, t, on, m, oh, ow), err);
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    DNN_CHECK(dnn.cudnnGetConvolutionForwardAlgorithm_v7(d->handle, p->xd, p->wd, p->cd, p->yd,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                         &found, perf), err);
    for (int i = 0; i < found; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > DNN_WS_MAX ||
            perf[i].determinism != CUDNN_DETERMINISTIC)
            continue;
        /* fp32 without TF32 takes FMA algorithms only. */
        if (dt == SLIM_F32 && !k[1] && perf[i].mathType != CUDNN_FMA_MATH)
            continue;
        DNN_CHECK(dnn.cudnnSetConvolutionMathType(p->cd, perf[i].mathType), err);
        p->algo = perf[i].algo;
        p->ws = perf[i].memory;
        p->ok = true;
        break;
    }
    return SLIM_OK;
}

static slim_status plan_get(slim_cuda_ctx *cu, const int64_t *key, dnn_plan **out,
                            slim_err *err)
{
    struct slim_cuda_dnn *d = cu->dnn;
    if (!d) {
        d = (struct slim_cuda_dnn *)calloc(1, sizeof(*d));
        if (!d)
            return slim_errf(err, SLIM_ENOMEM, "out of memory for cuDNN's plans");
        cudnnStatus_t s = dnn.cudnnCreate(&d->handle);
        if (s == CUDNN_STATUS_SUCCESS)
            s = dnn.cudnnSetStream(d->handle, cu->stream);
        if (s != CUDNN_STATUS_SUCCESS) {
            if (d->handle)
                dnn.cudnnDestroy(d->handle);
            free(d);
            return slim_errf(err, s == CUDNN_STATUS_ALLOC_FAILED ? SLIM_EOOM : SLIM_EINTERNAL,
                             "cudnnCreate failed: %s", dnn.cudnnGetErrorString(s));
        }
        cu->dnn = d;
    }
    d->clock++;
    dnn_plan *victim = &d->plans[0];
    for (int i = 0; i < DNN_PLANS; i++) {
        dnn_plan *p = &d->plans[i];
        if (p->used && memcmp(p->key, key, sizeof(p->key)) == 0) {
            p->last = d->clock;
            *out = p;
            return SLIM_OK;
        }
        if (!p->used || (victim->used && p->last < victim->last))
            victim = p;
    }
    plan_clear(victim);
    victim->used = true;
    memcpy(victim->key, key, sizeof(victim->key));
    victim->last = d->clock;
    slim_status st = plan_build(d, victim, err);
    if (st) {
        plan_clear(victim);
        return st;
    }
    *out = victim;
    return SLIM_OK;
}

extern "C" slim_status slim_cuda_conv_dnn(slim_cuda_ctx *cu, const slim_tensor *x,
                                          const slim_tensor *w, slim_tensor *y, int64_t group,
                                          const int64_t *strides, const int64_t *pads,
                                          const int64_t *dilations, bool *done, slim_err *err)
{
    *done = false;
    pthread_once(&dnn_once, dnn_load);
    /* Symmetric pads only (cuDNN's descriptor has one per axis); sizes in
     * cuDNN's ints. */
    if (!dnn.ok || pads[0] != pads[2] || pads[1] != pads[3] || group < 1 ||
        slim_tensor_numel(x) > INT32_MAX || slim_tensor_numel(y) > INT32_MAX ||
        slim_tensor_numel(w) > INT32_MAX)
        return SLIM_OK;
    bool each = slim_gemm_row_invariant() && x->dims[0] > 1;
    int64_t key[DNN_KEY] = {x->dtype, cu->allow_tf32, each ? 1 : x->dims[0], x->dims[1],
                            x->dims[2], x->dims[3], w->dims[0], w->dims[2], w->dims[3], pads[0],
                            pads[1], strides[0], strides[1], dilations[0], dilations[1], group};
    dnn_plan *p = NULL;
    slim_status st = plan_get(cu, key, &p, err);
    if (st || !p->ok || p->oh != y->dims[2] || p->ow != y->dims[3] || y->dims[1] != w->dims[0])
        return st;
    void *ws = NULL;
    if (p->ws && (st = slim_cuda_scratch(cu, p->ws, &ws, err)))
        return st;
    float one = 1.0f, zero = 0.0f;
    int64_t images = each ? x->dims[0] : 1;
    size_t es = slim_dtype_size(x->dtype);
    size_t xs = (size_t)(slim_tensor_numel(x) / x->dims[0]) * es;
    size_t ys = (size_t)(slim_tensor_numel(y) / y->dims[0]) * es;
    for (int64_t i = 0; i < images; i++)
        DNN_CHECK(dnn.cudnnConvolutionForward(cu->dnn->handle, &one, p->xd, (const char *)x->data + i * xs,
                                              p->wd, w->data, p->cd, p->algo, ws, p->ws, &zero,
                                              p->yd, (char *)y->data + i * ys),
                  err);
    *done = true;
    return SLIM_OK;
}
