// Autocast (mixed precision), as torch.autocast: a thread-local mode under which the
// matmul-class ops run in bf16/f16 while everything else, and the master weights, stay f32.
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "tensor/tensor.h"

namespace strata {

/// The autocast dtype of this thread (bf16 or f16), or nullopt when autocast is off.
std::optional<DType> autocast_dtype();
/// Sets this thread's mode; dt must be bf16, f16 or nullopt. Prefer AutocastGuard.
void set_autocast_dtype(std::optional<DType> dt);

/// RAII: autocast on this thread while alive; restores the previous mode (so guards nest,
/// and AutocastGuard(std::nullopt) turns autocast off inside an autocast region). Other
/// threads are unaffected: each thread that runs ops (e.g. a local-backend rank) opens
/// its own guard.
///
/// The rule follows PyTorch's CUDA autocast op lists:
/// - lower-precision ops: linear, matmul, conv2d cast their floating inputs (f32, and the
///   other 16-bit type; never f64) to the autocast dtype through the differentiable
///   `cast`, so their gradients come back to f32 parameters as f32;
/// - f32 ops: softmax, log_softmax, layer_norm, cross_entropy cast bf16/f16 inputs up
///   to f32, so probabilities, statistics and the loss (and its gradient) are f32;
/// - every other op runs in the dtype it is given.
/// Unlike PyTorch, the low-precision ops hand their result back as f32 holding the
/// rounded bf16/f16 values: strata's elementwise ops require equal dtypes (a bf16
/// projection could not be added to an f32 residual stream) and the CPU kernels keep
/// 16-bit floats as a storage format only. Numerically each op is the 16-bit op with
/// f32 accumulation (what cuBLAS does): inputs, output and the output's gradient are
/// rounded to the autocast dtype; the GEMM itself runs on the f32 copies of the rounded
/// values on every device, so activation memory is not halved yet.
/// bf16 needs no loss scaling; for f16 use optim::GradScaler (small gradients underflow).
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<DType> dt) : prev_(autocast_dtype()) { set_autocast_dtype(dt); }
  ~AutocastGuard() { set_autocast_dtype(prev_); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> prev_;
};

namespace autocast {

/// True when autocast is on and one of `inputs` (undefined ones skipped) is an f32, bf16
/// or f16 tensor.
bool wants_low_precision(const std::vector<Tensor>& inputs);

/// Runs fn (a matmul-class op) in the autocast dtype: every floating non-f64 input is
/// rounded through cast(x, dt), fn runs with autocast off on f32 copies of the rounded
/// values, and its output is rounded to dt and returned as f32 (see AutocastGuard).
/// Undefined inputs stay undefined.
Tensor run_low_precision(const std::vector<Tensor>& inputs,
                         const std::function<Tensor(const std::vector<Tensor>&)>& fn);

/// For the f32 ops: x cast to f32 when autocast is on and x is bf16/f16, else x.
Tensor to_f32(const Tensor& x);

}  // namespace autocast
}  // namespace strata
