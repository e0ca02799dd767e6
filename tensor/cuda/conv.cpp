// CUDA conv2d forward / backward through cuDNN (NCHW; f32, f64, and f16 / bf16 with f32
// accumulation on tensor cores for autocast). Algorithms come from cuDNN's heuristics
// (…_v7 queries, no benchmarking), preferring deterministic ones; f32 uses tensor-core
// (TF32) math only when allow_tf32(). Workspaces come from the caching allocator. Builds
// without cuDNN register no conv kernel (the front end then reports that cuda has no
// conv2d kernel).
#ifdef STRATA_WITH_CUDNN
#include <cudnn.h>

#include <new>
#include <vector>

#include <strata/tensor/cuda/handle_pool.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/runtime.h>

#define STRATA_CUDNN_CHECK(call, op)                                                                              \
  do {                                                                                                            \
    const cudnnStatus_t strata_st_ = (call);                                                                      \
    if (strata_st_ != CUDNN_STATUS_SUCCESS)                                                                       \
      ::strata::cuda::detail::throw_library_error("cuDNN", int(strata_st_), "cudnnStatus_t",                      \
                                                  cudnnGetErrorString(strata_st_), #call, op, __FILE__, __LINE__); \
  } while (0)

namespace strata::cuda {
namespace {

cudnnHandle_t create_handle(int) {
  cudnnHandle_t h = nullptr;
  STRATA_CUDNN_CHECK(cudnnCreate(&h), "conv2d");
  return h;
}

detail::HandlePool<cudnnHandle_t>& pool() {
  alignas(detail::HandlePool<cudnnHandle_t>) static unsigned char storage[sizeof(detail::HandlePool<cudnnHandle_t>)];
  static auto* const p = ::new (static_cast<void*>(storage)) detail::HandlePool<cudnnHandle_t>(&create_handle);
  return *p;
}

// RAII cuDNN descriptors.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(cudnnDataType_t dt, int n, int c, int h, int w) {
    STRATA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d), "conv2d");
    STRATA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, dt, n, c, h, w), "conv2d");
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(cudnnDataType_t dt, int o, int c, int h, int w) {
    STRATA_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d), "conv2d");
    STRATA_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, dt, CUDNN_TENSOR_NCHW, o, c, h, w), "conv2d");
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

// The cuDNN storage type of a tensor dtype.
cudnnDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default:
      STRATA_THROW(Error, "[conv2d] unsupported dtype ", dtype_name(dt), " on cuda (expected f32, f64, f16 or bf16)");
  }
}

bool is_16bit(cudnnDataType_t dt) { return dt == CUDNN_DATA_HALF || dt == CUDNN_DATA_BFLOAT16; }

// The convolution's compute type: f32 for f16 / bf16 data (cuDNN's PSEUDO_HALF_CONFIG and
// PSEUDO_BFLOAT16_CONFIG: f32 accumulation, one rounding to 16 bits), else the data type.
cudnnDataType_t compute_type(cudnnDataType_t dt) { return is_16bit(dt) ? CUDNN_DATA_FLOAT : dt; }

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(cudnnDataType_t dt, const ops::Conv2dParams& p) {
    STRATA_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d), "conv2d");
    STRATA_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, int(p.pad_h), int(p.pad_w), int(p.stride_h),
                                                       int(p.stride_w), 1, 1, CUDNN_CROSS_CORRELATION,
                                                       compute_type(dt)),
                       "conv2d");
    STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math_type(dt)), "conv2d");
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  // f32: FMA-only unless TF32 is allowed (as PyTorch); f16 / bf16: tensor cores (no
  // down-conversion is involved, the data already is 16-bit); f64: cuDNN's default
  static cudnnMathType_t math_type(cudnnDataType_t dt) {
    if (is_16bit(dt)) return CUDNN_TENSOR_OP_MATH;
    if (dt != CUDNN_DATA_FLOAT) return CUDNN_DEFAULT_MATH;
    return allow_tf32() ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  }
};

// One conv problem: descriptors of x (N,C,H,W), w (O,C,kh,kw), y (N,O,Ho,Wo).
struct Problem {
  int device;
  cudnnHandle_t h;
  cudnnDataType_t dt;
  bool f64;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  Problem(const Tensor& xt, const Tensor& wt, const Tensor& yt, const ops::Conv2dParams& p)
      : device(xt.device().index),
        h(handle(device)),
        dt(data_type(xt.dtype())),
        f64(xt.dtype() == DType::f64),
        x(dt, dim(xt, 0), dim(xt, 1), dim(xt, 2), dim(xt, 3)),
        y(dt, dim(yt, 0), dim(yt, 1), dim(yt, 2), dim(yt, 3)),
        w(dt, dim(wt, 0), dim(wt, 1), dim(wt, 2), dim(wt, 3)),
        conv(dt, p) {}
  static int dim(const Tensor& t, int i) { return int(t.size(i)); }
  static cudnnHandle_t handle(int device) {
    cudnnHandle_t h = pool().get(device);
    STRATA_CUDNN_CHECK(cudnnSetStream(h, current_stream(device)), "conv2d");
    return h;
  }
  // 1 and 0 in the scaling type cuDNN expects: double for f64, float for f32 / f16 / bf16
  const void* one() const { return f64 ? static_cast<const void*>(&kOneD) : &kOneF; }
  const void* zero() const { return f64 ? static_cast<const void*>(&kZeroD) : &kZeroF; }
  static constexpr float kOneF = 1.0f, kZeroF = 0.0f;
  static constexpr double kOneD = 1.0, kZeroD = 0.0;
};

// The first successful heuristic result, deterministic ones first; tensor-core math
// for f32 only when allow_tf32().
template <class Perf>
Perf pick(const std::vector<Perf>& perfs, int returned, cudnnDataType_t dt, const char* op) {
  const bool no_tf32 = dt == CUDNN_DATA_FLOAT && !allow_tf32();
  const Perf* any = nullptr;
  for (int i = 0; i < returned; ++i) {
    if (perfs[size_t(i)].status != CUDNN_STATUS_SUCCESS) continue;
    if (no_tf32 && (perfs[size_t(i)].mathType == CUDNN_TENSOR_OP_MATH ||
                    perfs[size_t(i)].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    if (perfs[size_t(i)].determinism == CUDNN_DETERMINISTIC) return perfs[size_t(i)];
    if (!any) any = &perfs[size_t(i)];
  }
  STRATA_CHECK(any != nullptr, "[", op, "] cuDNN found no algorithm for this convolution");
  return *any;
}

// The chosen algorithm's math type, except that f32 without allow_tf32() stays on FMA math.
void use_math(const Problem& pr, cudnnMathType_t m, const char* op) {
  if (pr.dt == CUDNN_DATA_FLOAT && !allow_tf32()) return;
  STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(pr.conv.d, m), op);
}

Tensor workspace(size_t bytes, int device) {
  return bytes ? Tensor::empty({int64_t(bytes)}, DType::u8, Device{DeviceType::CUDA, device}) : Tensor();
}
void* ws_ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

}  // namespace

void conv2d_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p) {
  if (y.numel() == 0) return;
  DeviceGuard guard(y.device().index);
  Problem pr(x, w, y, p);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  int returned = 0;
  STRATA_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(pr.h, pr.x.d, pr.w.d, pr.conv.d, pr.y.d,
                                                            int(perfs.size()), &returned, perfs.data()),
                     "conv2d");
  const auto algo = pick(perfs, returned, pr.dt, "conv2d");
  use_math(pr, algo.mathType, "conv2d");
  const Tensor ws = workspace(algo.memory, pr.device);
  // f16 / bf16 with a bias: y starts as the broadcast bias and the convolution blends onto
  // it (beta = 1) in f32, so the sum is rounded to 16 bits once, as a linear's bias + GEMM
  // is; f32 / f64 add the bias after the convolution (cudnnAddTensor).
  const bool bias_first = b.defined() && is_16bit(pr.dt);
  if (bias_first) ops::copy_(y, ops::reshape(b, {b.numel(), 1, 1}));
  STRATA_CUDNN_CHECK(cudnnConvolutionForward(pr.h, pr.one(), pr.x.d, x.raw_data(), pr.w.d, w.raw_data(), pr.conv.d,
                                             algo.algo, ws_ptr(ws), algo.memory, bias_first ? pr.one() : pr.zero(),
                                             pr.y.d, y.raw_data()),
                     "conv2d");
  if (b.defined() && !bias_first) {
    TensorDesc bd(pr.dt, 1, int(b.numel()), 1, 1);
    STRATA_CUDNN_CHECK(cudnnAddTensor(pr.h, pr.one(), bd.d, b.raw_data(), pr.one(), pr.y.d, y.raw_data()), "conv2d");
  }
}

void conv2d_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db,
                            const ops::Conv2dParams& p) {
  DeviceGuard guard(dw.device().index);
  const cudaStream_t s = current_stream(dw.device().index);
  if (dy.numel() == 0) {  // no samples (or an empty output): zero weight / bias gradients, as the CPU
    STRATA_CUDA_CHECK(cudaMemsetAsync(dw.raw_data(), 0, size_t(dw.nbytes()), s), "conv2d_backward");
    if (db.defined())
      STRATA_CUDA_CHECK(cudaMemsetAsync(db.raw_data(), 0, size_t(db.nbytes()), s), "conv2d_backward");
    if (dx.numel() > 0) STRATA_CUDA_CHECK(cudaMemsetAsync(dx.raw_data(), 0, size_t(dx.nbytes()), s), "conv2d_backward");
    return;
  }
  Problem pr(x, w, dy, p);
  {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    int returned = 0;
    STRATA_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(pr.h, pr.w.d, pr.y.d, pr.conv.d, pr.x.d,
                                                                   int(perfs.size()), &returned, perfs.data()),
                       "conv2d_backward");
    const auto algo = pick(perfs, returned, pr.dt, "conv2d_backward");
    use_math(pr, algo.mathType, "conv2d_backward");
    const Tensor ws = workspace(algo.memory, pr.device);
    STRATA_CUDNN_CHECK(cudnnConvolutionBackwardData(pr.h, pr.one(), pr.w.d, w.raw_data(), pr.y.d, dy.raw_data(),
                                                    pr.conv.d, algo.algo, ws_ptr(ws), algo.memory, pr.zero(), pr.x.d,
                                                    dx.raw_data()),
                       "conv2d_backward");
  }
  {
    STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(pr.conv.d, ConvDesc::math_type(pr.dt)), "conv2d_backward");
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    int returned = 0;
    STRATA_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(pr.h, pr.x.d, pr.y.d, pr.conv.d, pr.w.d,
                                                                     int(perfs.size()), &returned, perfs.data()),
                       "conv2d_backward");
    const auto algo = pick(perfs, returned, pr.dt, "conv2d_backward");
    use_math(pr, algo.mathType, "conv2d_backward");
    const Tensor ws = workspace(algo.memory, pr.device);
    STRATA_CUDNN_CHECK(cudnnConvolutionBackwardFilter(pr.h, pr.one(), pr.x.d, x.raw_data(), pr.y.d, dy.raw_data(),
                                                      pr.conv.d, algo.algo, ws_ptr(ws), algo.memory, pr.zero(),
                                                      pr.w.d, dw.raw_data()),
                       "conv2d_backward");
  }
  if (db.defined() && is_16bit(pr.dt)) {
    // f16 / bf16: the sum over (N, H, W) through the sum kernel (f64 accumulation, one rounding)
    ops::copy_(db, ops::sum(dy, {0, 2, 3}));
  } else if (db.defined()) {
    TensorDesc bd(pr.dt, 1, int(db.numel()), 1, 1);
    STRATA_CUDNN_CHECK(cudnnConvolutionBackwardBias(pr.h, pr.one(), pr.y.d, dy.raw_data(), pr.zero(), bd.d,
                                                    db.raw_data()),
                       "conv2d_backward");
  }
}

}  // namespace strata::cuda
#endif  // STRATA_WITH_CUDNN
