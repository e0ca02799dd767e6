// DeviceMesh: world ranks laid out on a grid of named dimensions (picotron's
// arange(world).view(pp, dp, tp)), handing out this rank's group along each one.
// New dimensions (cp, ep, HSDP's replicate/shard) are new names, not new code.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <strata/comm/process_group.h>

namespace strata::comm {

/// One dimension of a mesh: its name ("pp", "dp", "tp", ...) and its degree.
struct MeshDimSpec {
  std::string name;
  int size = 1;
  bool operator==(const MeshDimSpec&) const = default;
};

/// The shape of the grid, with the pure rank arithmetic (no communication). Dimensions
/// are listed slowest first: the last one varies fastest with the world rank, so with
/// {pp, dp, tp} a tp group is consecutive ranks (one node, as in Megatron-LM):
///   world rank = ((c[0] * size[1] + c[1]) * size[2] + c[2]) ...
class MeshShape {
 public:
  MeshShape() = default;
  /// ConfigError for an empty or repeated name, or a degree < 1.
  explicit MeshShape(std::vector<MeshDimSpec> dims);

  const std::vector<MeshDimSpec>& dims() const { return dims_; }
  int ndim() const { return int(dims_.size()); }
  int world() const;
  bool has(std::string_view name) const;
  /// Position of `name` in dims(); Error naming the mesh's dimensions when absent.
  int index_of(std::string_view name) const;
  int size(std::string_view name) const { return dims_[size_t(index_of(name))].size; }
  /// A rank's coordinate, one entry per dimension in dims() order.
  std::vector<int> coord_of(int world_rank) const;
  int rank_of(const std::vector<int>& coord) const;
  /// World ranks of the group along `name` that contains world_rank, in group-rank order.
  std::vector<int> group_ranks(int world_rank, std::string_view name) const;
  /// ConfigError unless the degrees multiply to world_size.
  void validate(int world_size) const;
  /// "pp=1 x dp=4 x tp=2".
  std::string str() const;
  bool operator==(const MeshShape&) const = default;

 private:
  std::vector<MeshDimSpec> dims_;
};

/// Value type (cheap to copy: it shares its groups). Building one is a collective over
/// `world`: every rank constructs it with the same shape, and every dimension's group is
/// created then, once (a size-1 dimension gets a trivial one-rank group; a dimension as
/// large as the world is the world group itself).
class DeviceMesh {
 public:
  DeviceMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  /// This rank's coordinate (dims() order).
  const std::vector<int>& coord() const { return coord_; }
  bool has(std::string_view name) const { return shape_.has(name); }
  /// This rank's index along `name`, and that dimension's degree.
  int rank(std::string_view name) const { return coord_[size_t(shape_.index_of(name))]; }
  int size(std::string_view name) const { return shape_.size(name); }
  /// The group along `name` that holds this rank (mesh["dp"]).
  const std::shared_ptr<ProcessGroup>& operator[](std::string_view name) const {
    return groups_[size_t(shape_.index_of(name))];
  }
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

 private:
  std::shared_ptr<ProcessGroup> world_;
  MeshShape shape_;
  std::vector<int> coord_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;  // by dimension index
};

}  // namespace strata::comm
