// `strata bench attn` and `strata bench optim`: the causal attention (forward + backward)
// and the optimizer step each timed alone, on the CPU or a GPU, against the device's peak
// FLOP/s or memory bandwidth. The kernel-level companions of `strata bench train`.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace strata::apps {

/// Registers `attn` and `optim` under the `bench` subcommand. The returned function runs
/// whichever of the two was parsed and returns its exit code; nullopt when neither was.
std::function<std::optional<int>()> add_bench_kernel_commands(CLI::App& bench);

namespace bench_detail {

/// FLOPs of causal attention over B sequences of T tokens, H heads of hd, counted as
/// FlashAttention counts them: forward = two GEMMs (q k^T and p v) of 2·B·H·T²·hd each,
/// halved for the causal mask; backward = 2.5x forward. fwd_and_bwd: forward + backward.
double causal_attention_flops(int64_t b, int64_t h, int64_t t, int64_t hd, bool fwd_and_bwd);

/// Dense tensor-core peak of a GPU by its CUDA device name (TFLOP/s) for dtype "bf16" or
/// "f16" (H100, H200: 989; A100: 312), or the non-tensor-core FP32 peak for "f32" (H100,
/// H200 SXM: 67; A100: 19.5); 0 for a GPU not in the table.
double gpu_peak_tflops(const std::string& gpu_name, const std::string& dtype);
/// HBM bandwidth of a GPU by its CUDA device name (GB/s): H200 4800, H100 (SXM) 3350, A100
/// (80 GB SXM) 2039; 0 for a GPU not in the table.
double gpu_peak_gbs(const std::string& gpu_name);

/// Minimum bytes one optimizer step moves per parameter of `element_bytes` (f32: 4), as
/// the fused kernels read and write each tensor once: AdamW and Adam read param, grad,
/// exp_avg, exp_avg_sq and write param, exp_avg, exp_avg_sq (7 tensors: 28 B at f32); SGD
/// with momentum reads param, grad, momentum buffer and writes param and buffer (5); plain
/// SGD reads param and grad and writes param (3).
int64_t optimizer_bytes_per_param(const std::string& optimizer, bool momentum, int64_t element_bytes);

}  // namespace bench_detail
}  // namespace strata::apps
