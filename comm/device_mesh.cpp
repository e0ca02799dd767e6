// DeviceMesh: rank-grid arithmetic over named dimensions and one split of the world
// group per dimension.
#include <strata/comm/device_mesh.h>

#include <strata/core/error.h>

namespace strata::comm {

MeshShape::MeshShape(std::vector<MeshDimSpec> dims) : dims_(std::move(dims)) {
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].name.empty()) STRATA_THROW(ConfigError, "[DeviceMesh] dimension ", i, " has no name");
    if (dims_[i].size < 1)
      STRATA_THROW(ConfigError, "[DeviceMesh] degrees must be >= 1, got ", dims_[i].name, "=", dims_[i].size);
    for (size_t j = 0; j < i; ++j)
      if (dims_[j].name == dims_[i].name)
        STRATA_THROW(ConfigError, "[DeviceMesh] dimension '", dims_[i].name, "' is listed twice");
  }
}

int MeshShape::world() const {
  int w = 1;
  for (const auto& d : dims_) w *= d.size;
  return w;
}

bool MeshShape::has(std::string_view name) const {
  for (const auto& d : dims_)
    if (d.name == name) return true;
  return false;
}

int MeshShape::index_of(std::string_view name) const {
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].name == name) return int(i);
  STRATA_THROW(Error, "[DeviceMesh] no dimension '", name, "' in the mesh ", str());
}

std::vector<int> MeshShape::coord_of(int r) const {
  STRATA_CHECK(r >= 0 && r < world(), "[DeviceMesh] world rank ", r, " outside the mesh ", str());
  std::vector<int> c(dims_.size());
  for (size_t i = dims_.size(); i-- > 0;) {
    c[i] = r % dims_[i].size;
    r /= dims_[i].size;
  }
  return c;
}

int MeshShape::rank_of(const std::vector<int>& c) const {
  STRATA_CHECK(c.size() == dims_.size(), "[DeviceMesh] a coordinate of ", c.size(), " entries for the mesh ", str());
  int r = 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    STRATA_CHECK(c[i] >= 0 && c[i] < dims_[i].size, "[DeviceMesh] coordinate ", dims_[i].name, "=", c[i],
                 " outside the mesh ", str());
    r = r * dims_[i].size + c[i];
  }
  return r;
}

std::vector<int> MeshShape::group_ranks(int world_rank, std::string_view name) const {
  const size_t d = size_t(index_of(name));
  std::vector<int> c = coord_of(world_rank);
  std::vector<int> out;
  for (int i = 0; i < dims_[d].size; ++i) {
    c[d] = i;
    out.push_back(rank_of(c));
  }
  return out;
}

void MeshShape::validate(int world_size) const {
  if (world() != world_size)
    STRATA_THROW(ConfigError, "[DeviceMesh] ", str(), " = ", world(), " ranks does not match the world size ",
                 world_size, " (mpirun -np / local ranks)");
}

std::string MeshShape::str() const {
  std::string s;
  for (const auto& d : dims_) s += (s.empty() ? "" : " x ") + d.name + "=" + std::to_string(d.size);
  return s.empty() ? "(no dimensions)" : s;
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape)
    : world_(std::move(world)), shape_(std::move(shape)) {
  STRATA_CHECK(world_ != nullptr, "[DeviceMesh] world group is null");
  shape_.validate(world_->size());
  coord_ = shape_.coord_of(world_->rank());
  // One split per dimension: the color numbers the other coordinates (fixed along the
  // dimension), the key is the moving one. Every rank creates the groups in dims() order.
  // A dimension that spans the whole world (every other degree 1) is the world group
  // itself, in the same rank order: no second communicator (and comm thread) for it.
  for (size_t d = 0; d < coord_.size(); ++d) {
    if (shape_.dims()[d].size == world_->size()) {
      groups_.push_back(world_);
      continue;
    }
    int color = 0;
    std::string fixed;
    for (size_t i = 0; i < coord_.size(); ++i) {
      if (i == d) continue;
      color = color * shape_.dims()[i].size + coord_[i];
      fixed += (fixed.empty() ? "" : ",") + shape_.dims()[i].name + "=" + std::to_string(coord_[i]);
    }
    groups_.push_back(world_->split(color, coord_[d], shape_.dims()[d].name + "(" + fixed + ")"));
  }
}

}  // namespace strata::comm
