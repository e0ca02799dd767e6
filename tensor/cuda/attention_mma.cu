// Causal self-attention on tensor cores: FlashAttention-2's algorithm built from
// mma.sync m16n8k16 (16-bit inputs, f32 accumulation), for bf16 and f16 storage and head
// sizes 32, 64 and 128. The same op, layout and saved statistics as the warp-per-row
// kernels of attention.cu, which take every other call (attention_mma_plan.h says which).
// The blocks' code is attention_mma_kernels.h; this file is the CUDA thread it runs as,
// the launches and the entry points.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>

#include <strata/tensor/cuda/attention_mma_kernels.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>

namespace strata::cuda {
namespace {

using namespace mma;

// The SIMT interface of attention_mma_kernels.h: the calling CUDA thread.
struct CudaThread {
  static __device__ __forceinline__ int tid() { return int(threadIdx.x); }
  static __device__ __forceinline__ void sync() { __syncthreads(); }
  static __device__ __forceinline__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

  template <DType DT>
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (DT == DType::bf16)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)d, (void)a, (void)b0, (void)b1;
    __trap();  // the host never picks these kernels below sm_80
#endif
  }

  // lo and hi rounded to nearest even into one register (lo in the low half).
  template <DType DT>
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    if constexpr (DT == DType::bf16) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&v);
    } else {
      const __half2 v = __floats2half2_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&v);
    }
  }
};

// grid (B H, tiles): the query tiles (forward, dq) longest first, the key tiles (dk, dv)
// in order (the first see the most rows).
template <DType DT, int D>
__global__ void __launch_bounds__(kBlockThreads) mma_fwd_k(MmaArgs s) {
  extern __shared__ __align__(16) uint16_t smem[];
  forward_block<CudaThread, DT, D>(s, blockIdx.x, int64_t(gridDim.y) - 1 - blockIdx.y, smem);
}
template <DType DT, int D>
__global__ void __launch_bounds__(kBlockThreads) mma_dq_k(MmaArgs s) {
  extern __shared__ __align__(16) uint16_t smem[];
  dq_block<CudaThread, DT, D>(s, blockIdx.x, int64_t(gridDim.y) - 1 - blockIdx.y, smem);
}
template <DType DT, int D>
__global__ void __launch_bounds__(kBlockThreads) mma_dkv_k(MmaArgs s) {
  extern __shared__ __align__(16) uint16_t smem[];
  dkv_block<CudaThread, DT, D>(s, blockIdx.x, blockIdx.y, smem);
}

// Launches kernel k on grid (B H, tiles) with `smem` bytes of dynamic shared memory
// (opting in past the default 48 KiB).
template <class K>
void launch(K k, const MmaArgs& s, size_t smem, cudaStream_t stream) {
  if (smem > size_t(48) * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                      "causal_attention");
  const dim3 grid(unsigned(s.B * s.H), unsigned(tiles(s.T)));
  k<<<grid, kBlockThreads, smem, stream>>>(s);
}

// Calls f.template operator()<DT, D>() for the call's storage type and head size.
template <class F>
void dispatch_mma(DType dt, int64_t hd, F&& f) {
  auto by_hd = [&]<DType DT>() {
    switch (hd) {
      case 32: return f.template operator()<DT, 32>();
      case 64: return f.template operator()<DT, 64>();
      default: return f.template operator()<DT, 128>();
    }
  };
  if (dt == DType::bf16) by_hd.template operator()<DType::bf16>();
  else by_hd.template operator()<DType::f16>();
}

MmaArgs args_of(const Tensor& qkv, int64_t head_dim) {
  MmaArgs s;
  s.B = qkv.size(0);
  s.T = qkv.size(1);
  s.H = qkv.size(2) / (3 * head_dim);
  s.scale = float(1.0 / std::sqrt(double(head_dim)));
  s.scale_log2 = s.scale * kLog2e;
  s.qkv = static_cast<const uint16_t*>(qkv.raw_data());
  return s;
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0; }

bool takes(const Tensor& qkv, int64_t head_dim, bool aligned) {
  const AttentionChoice c = choose_attention(qkv.dtype(), head_dim, aligned, std::getenv("STRATA_CUDA_ATTENTION"));
  STRATA_CHECK(!c.bad_setting, "[causal_attention] ", c.reason);
  if (!c.tensor_cores) return false;
  int major = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, qkv.device().index),
                    "causal_attention");
  return major >= 8;
}

}  // namespace

bool mma_causal_attention(const Tensor& qkv, Tensor& y, Tensor& lse, int64_t head_dim) {
  if (!takes(qkv, head_dim, aligned16(qkv) && aligned16(y))) return false;
  MmaArgs s = args_of(qkv, head_dim);
  if (s.B * s.H * s.T == 0) return true;
  OpContext ctx(y);
  s.out = static_cast<uint16_t*>(y.raw_data());
  s.lse = static_cast<float*>(lse.raw_data());
  dispatch_mma(qkv.dtype(), head_dim, [&]<DType DT, int D>() {
    launch(mma_fwd_k<DT, D>, s, forward_smem_bytes(D), ctx.stream);
  });
  STRATA_CUDA_CHECK_LAUNCH("causal_attention");
  return true;
}

bool mma_causal_attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& lse, Tensor& dqkv,
                                   int64_t head_dim) {
  if (!takes(qkv, head_dim, aligned16(qkv) && aligned16(dy) && aligned16(dqkv))) return false;
  MmaArgs s = args_of(qkv, head_dim);
  if (s.B * s.H * s.T == 0) return true;
  OpContext ctx(dqkv);
  Tensor delta = Tensor::empty(lse.shape(), DType::f32, lse.device());
  s.dy = static_cast<const uint16_t*>(dy.raw_data());
  s.lse = static_cast<float*>(lse.raw_data());  // read only here
  s.delta = static_cast<float*>(delta.raw_data());
  s.out = static_cast<uint16_t*>(dqkv.raw_data());
  dispatch_mma(qkv.dtype(), head_dim, [&]<DType DT, int D>() {
    launch(mma_dq_k<DT, D>, s, dq_smem_bytes(D), ctx.stream);
    STRATA_CUDA_CHECK_LAUNCH("causal_attention_backward");
    launch(mma_dkv_k<DT, D>, s, dkv_smem_bytes(D), ctx.stream);
  });
  STRATA_CUDA_CHECK_LAUNCH("causal_attention_backward");
  return true;
}

}  // namespace strata::cuda
