// DataParallel: single-process data parallelism over K replicas run by K threads
// (torch.nn.DataParallel's scheme), on one device or one replica per CUDA device.
// Replica 0 is the user's module; each forward scatters the batch, runs the replicas in
// parallel and gathers their outputs onto replica 0, where the loss and the optimizer live.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <strata/nn/module.h>
#include <strata/optim/optimizer.h>

namespace strata::parallel {

struct DataParallelOptions {
  /// parallel.replicas: K >= 1, or 0 = derive it: devices.size() when devices is set, else 2.
  /// With devices set, a non-zero K must equal devices.size().
  int replicas = 0;
  /// parallel.devices: replica k lives on devices[k] (torch's device_ids; devices[0] is the
  /// output device and must hold the wrapped module). Either all CPU (repeats allowed: K
  /// thread replicas on the host) or distinct CUDA devices. Empty: every replica on the
  /// wrapped module's device.
  std::vector<Device> devices = {};
};

/// Builds a fresh module of the wrapped architecture (its weights are overwritten).
using ReplicaFactory = std::function<std::shared_ptr<nn::Module>()>;

/// Bytes one replica holds, by category (snapshot of the last step; see memory_report).
struct ReplicaMemory {
  int64_t params = 0;     ///< its parameters
  int64_t grads = 0;      ///< its gradients at the peak (after its backward, before the reduction)
  int64_t outputs = 0;    ///< forward outputs it holds (replica 0: also the gathered batch and its grad)
  int64_t optimizer = 0;  ///< optimizer state (replica 0 only)
  int64_t total() const { return params + grads + outputs + optimizer; }
};

/// A Module whose forward(x) is data parallel over K replicas, replica k on device(k):
///  1. every replica k > 0 copies replica 0's parameters and buffers (the broadcast of
///     the previous step's update; device(0) -> device(k)) and its train/eval mode;
///  2. x (B, ...) is cut along dim 0 into K contiguous chunks (sizes differ by at most 1;
///     fewer replicas run when B < K) and chunk k is moved to device(k) (x may sit on any
///     device, typically the CPU or device(0));
///  3. the replicas run forward at the same time, replica 0 on the calling thread, each
///     thread with its replica's CUDA device current;
///  4. the outputs are moved to device(0) (the output device) and concatenated (dim 0)
///     there into one tensor, returned.
/// Backward from a loss on that tensor splits its gradient, moves chunk k to device(k),
/// runs the K replica backwards in parallel and adds every replica's .grad (moved to
/// device(0)) into replica 0's in replica order (then drops theirs), so an optimizer over
/// module().parameters() steps as if one process ran the whole batch on device(0).
/// Device-to-device copies are ordered by events on the devices' compute streams (see
/// ops::to_device), so no step waits on the host except CPU <-> CUDA copies.
///
/// Construction: the wrapped module must already sit on devices[0] (all its parameters
/// and buffers; otherwise Error "module must have its parameters and buffers on device
/// cuda:0 ..."); the factory's replicas are moved there with Module::to(devices[k]). The
/// options are checked (count, all-CPU or distinct CUDA, replica 0's device) before any
/// CUDA call.
///
/// Child "module" is replica 0, so named_parameters()/state_dict() carry the "module."
/// prefix, as in PyTorch; save module().state_dict() for a prefix-free checkpoint, and
/// see state_dict_keys.h to load either form into either model. BatchNorm: each replica
/// normalizes with its own chunk's statistics and replica 0's running statistics are
/// the ones kept. Inputs must not require grad. Not thread-safe.
class DataParallel : public nn::Module {
 public:
  DataParallel(std::shared_ptr<nn::Module> module, const ReplicaFactory& make_replica,
               DataParallelOptions opts = {});

  /// x (B, ...) -> concatenation of the replicas' outputs (B, ...).
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "DataParallel"; }

  nn::Module& module() const { return *replicas_[0]; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return replicas_[0]; }
  int replicas() const { return int(replicas_.size()); }
  nn::Module& replica(int k) const { return *replicas_.at(size_t(k)); }
  /// Where replica k lives (devices[k], or the wrapped module's device when none were given).
  Device device(int k) const { return devices_.at(size_t(k)); }
  /// device(0): where forward's output and the reduced gradients are.
  Device output_device() const { return devices_[0]; }

  /// Per replica: what it held during the last forward/backward, plus `opt`'s state
  /// bytes on replica 0 (opt may be null); replica k's bytes are on device(k). Replica 0
  /// holds more: the gathered output and its gradient, the reduced gradients and the
  /// optimizer state. On its own device, replica k > 0 also holds its output's gradient chunk.
  std::vector<ReplicaMemory> memory_report(const optim::Optimizer* opt = nullptr) const;
  /// A table, one line per replica, with the excess of replica 0 over the mean of the others.
  static std::string format_memory(const std::vector<ReplicaMemory>& m);

 private:
  friend class GatherBackward;
  void sync_replicas(int k);
  void reduce_grads(int used);

  std::vector<std::shared_ptr<nn::Module>> replicas_;
  std::vector<Device> devices_;  // devices_[k]: replica k's device
  std::vector<ReplicaMemory> last_;  // filled by forward/backward
};

}  // namespace strata::parallel
