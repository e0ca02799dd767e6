// ParallelDims: the degrees of every parallel dimension of one run (dp, tp, pp) and the
// ZeRO stage, checked in one place against the world size and the model, and turned
// into the device mesh every strategy takes its groups from (torchtitan's ParallelDims).
#pragma once
#include <optional>
#include <string>

#include <strata/comm/device_mesh.h>
#include <strata/nn/parallel_plan.h>

namespace strata::parallel {

/// What the degrees must divide in the model, given by its family (nn/parallel_plan.h).
using nn::ModelLimits;

/// The degrees of a layout. Config keys: parallel.{dp, cp, tp, pp, zero_stage}.
struct ParallelDims {
  static constexpr int kAuto = 0;
  int dp = kAuto;      ///< data-parallel degree; kAuto = world / (cp * tp * pp)
  int tp = 1;          ///< tensor-parallel degree
  int pp = 1;          ///< pipeline stages
  int zero_stage = 0;  ///< 0 DDP (or nothing at dp 1), 1-3 ZeRO on the dp dimension
  int cp = 1;          ///< context-parallel degree (every sequence split over cp ranks)

  /// The same degrees with dp resolved for `world` ranks. ConfigError naming the
  /// parallel.* key: a degree < 1, a product that is not the world size (with the
  /// mpirun hint). tp > 1 and pp > 1 are accepted here; parallelize() refuses a model
  /// without a tensor-parallel or pipeline plan.
  ParallelDims resolve(int world) const;
  /// ConfigError naming parallel.tp / parallel.pp and the model key when the model cannot
  /// be split this way (heads or vocab not divisible by tp, fewer layers than pp).
  void check_model(const ModelLimits& m) const;
  int world() const { return dp * cp * tp * pp; }
  /// The mesh layout, slowest first: pp x dp x tp (tp fastest, so a tp group is
  /// consecutive ranks on one node), with cp between dp and tp when cp > 1 (pp x dp x
  /// cp x tp, Megatron-LM's order). dp must be resolved.
  comm::MeshShape mesh_shape() const;
  /// "dp 4 x tp 1 x pp 1, zero_stage 2" (" x cp 2" after dp when cp > 1)
  std::string str() const;
  /// The strategy on the dp dimension (at cp > 1 on dp x cp): "single process", "DDP" or "ZeRO-N".
  std::string dp_strategy() const;
  bool operator==(const ParallelDims&) const = default;
};

}  // namespace strata::parallel
