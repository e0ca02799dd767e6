// CUDA GEMM through cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx): f32 (TF32 only
// when allow_tf32()), f64, and f16 / bf16 with f32 accumulation (split-K partial sums
// too: reduced-precision reductions are disallowed, so a 16-bit result is rounded
// once, as autocast's CPU emulation does). The front end's
// row-major operands (pointer, leading dim, transposed flag) map to cuBLAS's
// column-major call by computing C^T = op(B)^T op(A)^T, so no operand is copied.
#include <cublas_v2.h>

#include <climits>
#include <new>

#include <strata/tensor/cuda/handle_pool.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/runtime.h>

#define STRATA_CUBLAS_CHECK(call, op)                                                                       \
  do {                                                                                                      \
    const cublasStatus_t strata_st_ = (call);                                                               \
    if (strata_st_ != CUBLAS_STATUS_SUCCESS)                                                                \
      ::strata::cuda::detail::throw_library_error("cuBLAS", int(strata_st_), cublasGetStatusName(strata_st_), \
                                                  cublasGetStatusString(strata_st_), #call, op, __FILE__,   \
                                                  __LINE__);                                                \
  } while (0)

namespace strata::cuda {
namespace {

cublasHandle_t create_handle(int) {
  cublasHandle_t h = nullptr;
  STRATA_CUBLAS_CHECK(cublasCreate(&h), "matmul");
  STRATA_CUBLAS_CHECK(cublasSetMathMode(h, cublasMath_t(CUBLAS_DEFAULT_MATH |
                                                         CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                      "matmul");
  return h;
}

detail::HandlePool<cublasHandle_t>& pool() {
  alignas(detail::HandlePool<cublasHandle_t>) static unsigned char storage[sizeof(detail::HandlePool<cublasHandle_t>)];
  static auto* const p = ::new (static_cast<void*>(storage)) detail::HandlePool<cublasHandle_t>(&create_handle);
  return *p;
}

// The device a GEMM runs on: the one holding its output.
int device_of(const void* p) {
  cudaPointerAttributes a{};
  STRATA_CUDA_CHECK(cudaPointerGetAttributes(&a, p), "matmul");
  STRATA_CHECK(a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged,
               "[matmul] the CUDA GEMM got a pointer that is not device memory");
  return a.device;
}

struct Types {
  cudaDataType data;
  cublasComputeType_t compute;
  bool f64_scalars;  // alpha/beta as double (else float)
};

Types types_for(DType dt) {
  switch (dt) {
    case DType::f32: return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, false};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, true};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, false};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, false};
    default:
      STRATA_THROW(Error, "[matmul] unsupported dtype ", dtype_name(dt), " on cuda (expected f32, f64, f16 or bf16)");
  }
}

void check_int(int64_t v, const char* what) {
  STRATA_CHECK(v >= 0 && v <= INT_MAX, "[matmul] ", what, " ", v, " exceeds cuBLAS's 32-bit limit");
}

// Everything a cuBLAS call needs, with the row-major -> column-major swap applied.
struct Call {
  cublasHandle_t handle;
  Types t;
  cublasOperation_t opa, opb;  // for the swapped operands: first = B, second = A
  float af, bf;
  double ad, bd;
  const void* alpha() const { return t.f64_scalars ? static_cast<const void*>(&ad) : &af; }
  const void* beta() const { return t.f64_scalars ? static_cast<const void*>(&bd) : &bf; }
};

Call make_call(int device, DType dt, double alpha, double beta, const cpu::MatRef& a, const cpu::MatRef& b) {
  Call c{};
  c.handle = pool().get(device);
  STRATA_CUBLAS_CHECK(cublasSetStream(c.handle, current_stream(device)), "matmul");
  c.t = types_for(dt);
  c.opb = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.opa = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.af = float(alpha);
  c.bf = float(beta);
  c.ad = alpha;
  c.bd = beta;
  return c;
}

}  // namespace

void gemm(DType dt, int64_t m, int64_t n, int64_t k, double alpha, cpu::MatRef a, cpu::MatRef b, double beta, void* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int dev = device_of(c);
  DeviceGuard guard(dev);
  for (auto [v, what] : {std::pair{m, "m"}, {n, "n"}, {k, "k"}, {a.ld, "lda"}, {b.ld, "ldb"}, {ldc, "ldc"}})
    check_int(v, what);
  if (k == 0 && beta == 0.0) {  // C = 0 (cuBLAS would skip the write-only case inconsistently)
    const size_t es = element_size(dt);
    STRATA_CUDA_CHECK(cudaMemset2DAsync(c, size_t(ldc) * es, 0, size_t(n) * es, size_t(m), current_stream(dev)),
                      "matmul");
    return;
  }
  const Call call = make_call(dev, dt, alpha, beta, a, b);
  // row-major C (m,n) = op(A) op(B)  <=>  column-major C^T (n,m) = op(B)^T op(A)^T
  STRATA_CUBLAS_CHECK(cublasGemmEx(call.handle, call.opb, call.opa, int(n), int(m), int(k), call.alpha(), b.data,
                                   call.t.data, int(b.ld), a.data, call.t.data, int(a.ld), call.beta(), c, call.t.data,
                                   int(ldc), call.t.compute, CUBLAS_GEMM_DEFAULT),
                      "matmul");
}

void gemm_batched(DType dt, int64_t batch, int64_t m, int64_t n, int64_t k, cpu::MatRef a, int64_t stride_a,
                  cpu::MatRef b, int64_t stride_b, void* c, int64_t ldc, int64_t stride_c) {
  if (batch == 0 || m == 0 || n == 0) return;
  const int dev = device_of(c);
  DeviceGuard guard(dev);
  for (auto [v, what] :
       {std::pair{m, "m"}, {n, "n"}, {k, "k"}, {a.ld, "lda"}, {b.ld, "ldb"}, {ldc, "ldc"}, {batch, "batch"}})
    check_int(v, what);
  if (k == 0) {  // every C is zero; the batch is contiguous (stride_c == m * ldc)
    const size_t es = element_size(dt);
    STRATA_CUDA_CHECK(cudaMemsetAsync(c, 0, size_t(batch * stride_c) * es, current_stream(dev)), "matmul");
    return;
  }
  const Call call = make_call(dev, dt, 1.0, 0.0, a, b);
  STRATA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(call.handle, call.opb, call.opa, int(n), int(m), int(k), call.alpha(),
                                                 b.data, call.t.data, int(b.ld), stride_b, a.data, call.t.data,
                                                 int(a.ld), stride_a, call.beta(), c, call.t.data, int(ldc), stride_c,
                                                 int(batch), call.t.compute, CUBLAS_GEMM_DEFAULT),
                      "matmul");
}

}  // namespace strata::cuda
