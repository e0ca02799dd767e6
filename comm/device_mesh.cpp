// DeviceMesh: rank-grid arithmetic and the three splits of the world group.
#include "comm/device_mesh.h"

#include "core/error.h"

namespace strata::comm {

const char* mesh_dim_name(MeshDim d) {
  switch (d) {
    case MeshDim::pp: return "pp";
    case MeshDim::dp: return "dp";
    case MeshDim::tp: return "tp";
  }
  return "?";
}

MeshCoord MeshShape::coord_of(int r) const {
  STRATA_CHECK(r >= 0 && r < world(), "[DeviceMesh] world rank ", r, " outside a ", pp, "x", dp, "x", tp, " mesh");
  return MeshCoord{r / (dp * tp), (r / tp) % dp, r % tp};
}

int MeshShape::rank_of(const MeshCoord& c) const {
  STRATA_CHECK(c.pp >= 0 && c.pp < pp && c.dp >= 0 && c.dp < dp && c.tp >= 0 && c.tp < tp, "[DeviceMesh] coord (pp=",
               c.pp, ", dp=", c.dp, ", tp=", c.tp, ") outside a ", pp, "x", dp, "x", tp, " mesh");
  return (c.pp * dp + c.dp) * tp + c.tp;
}

std::vector<int> MeshShape::group_ranks(int world_rank, MeshDim d) const {
  const MeshCoord c = coord_of(world_rank);
  std::vector<int> out;
  for (int i = 0; i < size(d); ++i) {
    MeshCoord k = c;
    (d == MeshDim::pp ? k.pp : d == MeshDim::dp ? k.dp : k.tp) = i;
    out.push_back(rank_of(k));
  }
  return out;
}

void MeshShape::validate(int world_size) const {
  if (pp < 1 || dp < 1 || tp < 1)
    STRATA_THROW(ConfigError, "[DeviceMesh] degrees must be >= 1, got pp=", pp, " dp=", dp, " tp=", tp);
  if (world() != world_size)
    STRATA_THROW(ConfigError, "[DeviceMesh] pp x dp x tp = ", pp, " x ", dp, " x ", tp, " = ", world(),
                 " does not match the world size ", world_size, " (mpirun -np / local ranks)");
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape)
    : world_(std::move(world)), shape_(shape) {
  STRATA_CHECK(world_ != nullptr, "[DeviceMesh] world group is null");
  shape_.validate(world_->size());
  coord_ = shape_.coord_of(world_->rank());
  const MeshCoord c = coord_;
  // color: the coordinates that stay fixed along the dimension; key: the moving one.
  groups_[size_t(MeshDim::tp)] = world_->split(c.pp * shape_.dp + c.dp, c.tp,
                                               strata::detail::str_cat("tp(pp=", c.pp, ",dp=", c.dp, ")"));
  groups_[size_t(MeshDim::dp)] = world_->split(c.pp * shape_.tp + c.tp, c.dp,
                                               strata::detail::str_cat("dp(pp=", c.pp, ",tp=", c.tp, ")"));
  groups_[size_t(MeshDim::pp)] = world_->split(c.dp * shape_.tp + c.tp, c.pp,
                                               strata::detail::str_cat("pp(dp=", c.dp, ",tp=", c.tp, ")"));
}

int DeviceMesh::rank(MeshDim d) const { return d == MeshDim::pp ? coord_.pp : d == MeshDim::dp ? coord_.dp : coord_.tp; }

}  // namespace strata::comm
