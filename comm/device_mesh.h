// DeviceMesh: world ranks laid out as a pp x dp x tp grid (tp fastest, as in
// Megatron-LM), handing out this rank's group along each dimension.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace strata::comm {

enum class MeshDim : uint8_t { pp, dp, tp };
const char* mesh_dim_name(MeshDim d);

/// A rank's position in the grid.
struct MeshCoord {
  int pp = 0, dp = 0, tp = 0;
  bool operator==(const MeshCoord&) const = default;
};

/// The shape of the grid, with the pure rank arithmetic (no communication).
/// world rank = (pp * dp_size + dp) * tp_size + tp.
struct MeshShape {
  int pp = 1, dp = 1, tp = 1;
  int world() const { return pp * dp * tp; }
  int size(MeshDim d) const { return d == MeshDim::pp ? pp : d == MeshDim::dp ? dp : tp; }
  MeshCoord coord_of(int world_rank) const;
  int rank_of(const MeshCoord& c) const;
  /// World ranks of the group along `d` that contains world_rank, in group-rank order.
  std::vector<int> group_ranks(int world_rank, MeshDim d) const;
  /// Throws ConfigError unless every degree is >= 1 and pp*dp*tp == world_size.
  void validate(int world_size) const;
};

/// Value type (cheap to copy: it shares its groups). Building one is a collective over
/// `world`: every rank must construct it with the same shape. A size-1 dimension gets a
/// trivial one-rank group.
class DeviceMesh {
 public:
  DeviceMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape);
  DeviceMesh(std::shared_ptr<ProcessGroup> world, int pp, int dp, int tp)
      : DeviceMesh(std::move(world), MeshShape{pp, dp, tp}) {}

  const MeshShape& shape() const { return shape_; }
  MeshCoord coord() const { return coord_; }
  int rank(MeshDim d) const;
  int size(MeshDim d) const { return shape_.size(d); }
  const std::shared_ptr<ProcessGroup>& group(MeshDim d) const { return groups_[size_t(d)]; }
  const std::shared_ptr<ProcessGroup>& pp_group() const { return group(MeshDim::pp); }
  const std::shared_ptr<ProcessGroup>& dp_group() const { return group(MeshDim::dp); }
  const std::shared_ptr<ProcessGroup>& tp_group() const { return group(MeshDim::tp); }
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

 private:
  std::shared_ptr<ProcessGroup> world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::array<std::shared_ptr<ProcessGroup>, 3> groups_;  // by MeshDim
};

}  // namespace strata::comm
