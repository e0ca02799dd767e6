// The one checkpoint save path: every rank (or the single process) hands in the pieces of
// global tensors it owns, as flat row-major ranges (ZeRO) or N-d boxes (tensor parallel),
// and they are written as format v2 (index.json + one safetensors file per rank).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/parallel/checkpoint/format.h>
#include <strata/tensor/tensor.h>

namespace strata::parallel {

/// Elements [begin, end) of the row-major flattening of the global tensor `name` (global
/// shape `global_shape`). `data` is a tensor of end - begin elements in any dtype (1-D;
/// another shape with that many elements is flattened, non-contiguous data is copied). A
/// zero-length piece only declares the tensor (name, shape, dtype): it is not stored,
/// which lets a rank whose shard of a tensor is empty still name it. Saved as at most
/// 2(ndim-1)+1 boxes (flat_range_to_boxes).
struct ShardPiece {
  std::string name;
  Shape global_shape;
  int64_t begin = 0;
  int64_t end = 0;
  Tensor data;
};

/// The box `box` of the global tensor `name` (e.g. a tensor-parallel shard). `data` is a
/// tensor of box.numel() elements (its shape is normally box.lengths; any shape with
/// that many elements is read in row-major order). An empty box only declares the tensor
/// (except the whole box of a 0-element tensor, which is stored).
struct BoxPiece {
  std::string name;
  Shape global_shape;
  Box box;
  Tensor data;
};

/// What one rank contributes: pieces in either form (both may name the same tensor).
/// Data on a GPU is copied to the host when the file is written.
struct RankPieces {
  std::vector<ShardPiece> ranges;
  std::vector<BoxPiece> boxes;
};

/// Collective over `group` (every rank calls it with the same dir and layout): writes the
/// checkpoint directory `dir`:
///   dir/shard_RRRRR_of_NNNNN.safetensors  rank R's non-empty pieces, each stored at its
///                                         box's shape under detail::piece_key (a whole
///                                         tensor under its plain name)
///   dir/index.json                        format, version 2, world_size, mesh,
///                                         zero_stage, files, meta (rank 0's), and per
///                                         tensor: dtype, global shape, pieces (file, key,
///                                         offsets, lengths)
/// The boxes of one tensor, over all ranks, must tile it exactly once (a replicated tensor
/// is passed by one owning rank only) with one dtype and one global shape. Everything is
/// written into "<dir>.tmp" (a stale one is removed first) and committed by rank 0 with
/// commit_dir() (atomically replacing an existing checkpoint of any version) only after
/// every rank wrote its file and the pieces were checked; the commit is complete on every
/// rank when this returns. On any failure no `dir` is created or changed, and every rank
/// throws the same error (DataError naming the file and tensor for bad coverage or I/O;
/// Error for a piece whose data does not match its range; CommError when the group
/// fails). The files must land on a filesystem every rank and rank 0 share.
void save_sharded(const std::string& dir, comm::ProcessGroup& group, const RankPieces& mine,
                  const CheckpointLayout& layout, const nlohmann::json& meta);
/// As above with flat pieces only and the default mesh {pp: 1, dp: world, tp: 1}.
void save_sharded(const std::string& dir, comm::ProcessGroup& group, const std::vector<ShardPiece>& my_pieces,
                  int zero_stage, const nlohmann::json& meta);
/// The same path written by one process alone (world 1, no communication): its one
/// shard file is an ordinary safetensors file of whole tensors under their own names.
/// `layout.mesh` empty means {pp: 1, dp: 1, tp: 1}; a non-empty mesh must multiply to 1.
void save_single(const std::string& dir, const RankPieces& pieces, const CheckpointLayout& layout,
                 const nlohmann::json& meta);

}  // namespace strata::parallel
