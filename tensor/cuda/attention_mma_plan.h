// The plan of the tensor-core causal attention (attention_mma.cu): which calls it takes,
// its tiles and shared memory, and the register fragments of the mma.sync m16n8k16
// instruction it is built from. Host-testable (STRATA_HD), so the CPU tests check the
// very index math the kernels run.
//
// Fragments of mma.sync.aligned.m16n8k16 with 16-bit A and B and f32 C/D (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type"). A lane's group is
// g = lane / 4 and its place in the group t = lane % 4:
//   A (16 x 16, row-major): 4 registers of two 16-bit halves; register r, half h holds
//     A[g + 8 (r & 1)][2 t + h + 8 (r >> 1)].
//   B (16 x 8, k x n): 2 registers; register r, half h holds B[2 t + h + 8 r][g].
//   C (16 x 8, f32): 4 elements; element e holds C[g + 8 (e >> 1)][2 t + (e & 1)].
// Two C tiles side by side (columns 0-7 and 8-15) are, element for element, the A
// fragment of their 16 x 16 product's left operand (frag_a_from_c): the probabilities a
// warp computes as C go into the next product as A without leaving its registers.
// The half h = 0 is the low 16 bits of its register.
#pragma once
#include <cstddef>
#include <cstdint>

#include <strata/core/dtype.h>
#include <strata/tensor/cuda/hd.h>

namespace strata::cuda::mma {

inline constexpr int kWarps = 4;                     // warps a block
inline constexpr int kBlockThreads = 32 * kWarps;    // 128 threads a block
inline constexpr int kRowsPerWarp = 16;              // the m of m16n8k16
inline constexpr int kTile = kWarps * kRowsPerWarp;  // 64 query rows (forward, dq) or keys (dk, dv) a block
inline constexpr int kPad = 8;                       // 16-bit elements of padding a shared row

STRATA_HD constexpr int frag_a_row(int lane, int reg) { return (lane >> 2) + 8 * (reg & 1); }
STRATA_HD constexpr int frag_a_col(int lane, int reg, int half) { return 2 * (lane & 3) + half + 8 * (reg >> 1); }
STRATA_HD constexpr int frag_b_k(int lane, int reg, int half) { return 2 * (lane & 3) + half + 8 * reg; }
STRATA_HD constexpr int frag_b_n(int lane) { return lane >> 2; }
STRATA_HD constexpr int frag_c_row(int lane, int e) { return (lane >> 2) + 8 * (e >> 1); }
STRATA_HD constexpr int frag_c_col(int lane, int e) { return 2 * (lane & 3) + (e & 1); }

/// A register r of the 16 x 16 A operand built from two C tiles (tile r >> 1, elements
/// 2 (r & 1) and 2 (r & 1) + 1 as its low and high halves).
STRATA_HD constexpr int frag_a_from_c_tile(int reg) { return reg >> 1; }
STRATA_HD constexpr int frag_a_from_c_elem(int reg, int half) { return 2 * (reg & 1) + half; }

/// Head sizes the kernels are instantiated for (a multiple of 16, the k of m16n8k16).
STRATA_HD constexpr bool head_dim_supported(int64_t hd) { return hd == 32 || hd == 64 || hd == 128; }

/// Query rows a dk/dv block takes at a time: 64, or 32 at hd 128 (dk, dv, S^T and dP^T
/// in registers would otherwise pass the 255 a thread has).
STRATA_HD constexpr int dkv_query_tile(int64_t hd) { return hd > 64 ? 32 : 64; }

/// Elements a row of a shared tile holds: n plus the padding that makes the fragment
/// loads of eight rows fall in distinct banks.
STRATA_HD constexpr int64_t smem_stride(int64_t n) { return n + kPad; }

/// Shared memory a block of each kernel uses (bytes, 16-bit elements):
///   forward: K rows (kTile x hd) and V transposed (hd x kTile);
///   dq:      K rows, V rows and K transposed;
///   dk, dv:  the block's own K and V rows (kTile x hd), Q and dO rows (q x hd), Q and dO
///            transposed (hd x q), and the query rows' log-sum-exp and D (2 q floats).
inline size_t forward_smem_bytes(int64_t hd) {
  return size_t(2) * size_t(kTile * smem_stride(hd) + hd * smem_stride(kTile));
}
inline size_t dq_smem_bytes(int64_t hd) {
  return size_t(2) * size_t(2 * kTile * smem_stride(hd) + hd * smem_stride(kTile));
}
inline size_t dkv_smem_bytes(int64_t hd) {
  const int64_t q = dkv_query_tile(hd);
  return size_t(2) * size_t(2 * kTile * smem_stride(hd) + 2 * q * smem_stride(hd) + 2 * hd * smem_stride(q)) +
         size_t(2 * q) * sizeof(float);
}

/// Shared memory a block may opt in to on sm_80 (163 KiB); sm_90 allows 227 KiB.
inline constexpr size_t kSmemOptInLimit = size_t(163) * 1024;

/// Which kernel runs ops::causal_attention on CUDA: the tensor-core kernels for 16-bit
/// storage, a head size they are built for and 16-byte aligned rows; the warp-per-row
/// kernels (attention.cu) otherwise, or when STRATA_CUDA_ATTENTION=warp asks for them.
struct AttentionChoice {
  bool tensor_cores = false;
  const char* reason = "";   ///< why the warp-per-row kernels run
  bool bad_setting = false;  ///< STRATA_CUDA_ATTENTION holds something else (reason says so)
};

/// `backend` is STRATA_CUDA_ATTENTION's value: null, "" or "auto" (choose), "mma" (the
/// same: the tensor-core kernels wherever they apply) or "warp" (the warp-per-row kernels
/// always). `aligned`: the call's 16-bit tensors start on 16 bytes.
inline AttentionChoice choose_attention(DType dt, int64_t hd, bool aligned, const char* backend) {
  auto is = [&](const char* s) {
    const char* b = backend;
    while (*s && *b == *s) ++s, ++b;
    return *s == 0 && *b == 0;
  };
  if (backend && *backend && !is("auto")) {
    if (is("warp")) return {false, "STRATA_CUDA_ATTENTION=warp"};
    if (!is("mma")) return {false, "STRATA_CUDA_ATTENTION must be auto, mma or warp", true};
  }
  if (dt != DType::bf16 && dt != DType::f16) return {false, "tensor cores take 16-bit inputs"};
  if (!head_dim_supported(hd)) return {false, "head size not 32, 64 or 128"};
  if (!aligned) return {false, "rows not 16-byte aligned"};
  return {true, ""};
}

/// Tiles of kTile covering n rows (at least 0).
STRATA_HD constexpr int64_t tiles(int64_t n) { return (n + kTile - 1) / kTile; }

}  // namespace strata::cuda::mma
