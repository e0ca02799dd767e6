// Autocast (mixed precision), as torch.autocast: a thread-local mode under which the
// matmul-class ops run in bf16/f16 while everything else, and the master weights, stay f32.
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include <strata/tensor/tensor.h>

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
/// projection could not be added to an f32 residual stream, nor a bf16 score masked and
/// fed to the f32 softmax without a cast at every use). Numerically each op is the 16-bit
/// op with f32 accumulation: inputs, output and the output's gradient are rounded to the
/// autocast dtype. How it computes depends on the inputs' device (autocast::path_for):
/// - CUDA (native): the op runs on the 16-bit tensors (cuBLAS GemmEx / cuDNN, f32
///   accumulation on tensor cores), so its backward saves 16-bit inputs and weights and
///   the op's output is widened to f32 once. Activations a 16-bit op saves take half the
///   memory; those the f32 ops around it save (layer norm inputs, the softmax output,
///   an activation function's input) stay f32.
/// - CPU (emulated): the CPU keeps f16/bf16 as a storage format only, so the GEMM runs
///   on f32 copies of the rounded values: the same numbers, no speed or memory gained.
/// bf16 needs no loss scaling; for f16 use optim::GradScaler (small gradients underflow).
///
/// Weight casts are cached: within an autocast region, a lower-precision op given a leaf
/// that requires grad (a parameter) reuses that tensor's cast from an earlier op of the
/// region while the parameter is unchanged (same version, dtype, device path and grad
/// mode), so a weight used several times in one forward (tied embeddings, a shared layer)
/// is cast once, and the cast's backward sums the uses' gradients. The cache is this
/// thread's and empties when a guard that turned autocast on from off exits (torch.autocast
/// caches the same casts for the same lifetime).
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<DType> dt) : prev_(autocast_dtype()), on_(dt.has_value()) {
    set_autocast_dtype(dt);
  }
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> prev_;
  bool on_;
};

namespace autocast {

/// True when autocast is on and one of `inputs` (undefined ones skipped) is an f32, bf16
/// or f16 tensor.
bool wants_low_precision(const std::vector<Tensor>& inputs);

/// How a lower-precision op computes (see AutocastGuard).
enum class Path {
  native,    ///< on the 16-bit tensors themselves (kernels with 16-bit GEMM / conv)
  emulated,  ///< on f32 copies of the 16-bit-rounded values
};

/// The path for inputs on devices of type `device`: native on CUDA (cuBLAS / cuDNN run
/// f16 and bf16 with f32 accumulation), emulated everywhere else. Pure; thread-safe.
Path path_for(DeviceType device);

/// Runs fn (a matmul-class op) in the autocast dtype dt: every floating non-f64 input x
/// becomes cast(x, dt) (differentiable, so f32 leaves get f32 gradients). On the native
/// path (path_for of the first such input's device) fn runs on those 16-bit tensors;
/// on the emulated path on their exact f32 copies, its output then rounded to dt. Either
/// way fn runs with autocast off and the result comes back as f32 holding 16-bit values
/// (see AutocastGuard). Undefined inputs stay undefined.
Tensor run_low_precision(const std::vector<Tensor>& inputs,
                         const std::function<Tensor(const std::vector<Tensor>&)>& fn);

/// For the f32 ops: x cast to f32 when autocast is on and x is bf16/f16, else x.
Tensor to_f32(const Tensor& x);

/// Parameters whose cast this thread's autocast region holds (see AutocastGuard).
size_t cached_casts();

}  // namespace autocast
}  // namespace strata
