// Checkpoint format v2 on disk (docs/checkpoints.md is the full description): names of
// the files, keys of the pieces, the mesh record, and the coverage check that the writer
// runs before committing and the reader runs on open.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <strata/parallel/checkpoint/box.h>

namespace strata::parallel {

/// index.json "version" written by this build (the reader also reads version 1).
inline constexpr int kCheckpointVersion = 2;
/// index.json "format" of version 2, and of version 1 (the sharded form only).
inline constexpr const char* kCheckpointFormat = "strata-checkpoint";
inline constexpr const char* kShardedFormatV1 = "strata-sharded-checkpoint";
/// File name of the index inside a checkpoint directory.
inline constexpr const char* kIndexFile = "index.json";
inline constexpr const char* kShardedIndexFile = kIndexFile;  // the v1 name of the constant
/// The v1 plain (single-process) layout: weights, optimizer state tensors, training state.
inline constexpr const char* kV1ModelFile = "model.safetensors";
inline constexpr const char* kV1OptimizerFile = "optimizer.safetensors";
inline constexpr const char* kV1StateFile = "state.json";

/// The named device mesh a checkpoint was written on, in rank-grid order (last dimension
/// fastest), e.g. {{"pp", 1}, {"dp", 4}, {"tp", 1}}.
using MeshDims = std::vector<std::pair<std::string, int>>;

/// How the writing ranks were laid out: recorded in index.json, informational for the
/// reader (any layout loads into any other).
struct CheckpointLayout {
  MeshDims mesh;  // empty: {{"pp", 1}, {"dp", world}, {"tp", 1}}
  int zero_stage = 0;
};

namespace detail {
/// Shard file name of `rank` in a world of `world`: "shard_00002_of_00004.safetensors".
std::string shard_file_name(int rank, int world);
/// Key of a stored piece inside its shard file: the plain tensor name when the box is the
/// whole tensor, else "<name>@<o0>:<e0>,<o1>:<e1>..." (half-open bounds per dimension).
std::string piece_key(const std::string& name, const Box& box, const Shape& shape);
/// `dir` without trailing slashes ("/" stays).
std::string strip_slashes(std::string dir);
/// dir / name.
std::string join(const std::string& dir, const std::string& name);

/// One entry of the coverage check: where a piece of a tensor lives. A record without a
/// file only declares the tensor (name, dtype, shape): it is not stored.
struct PieceRecord {
  std::string name;
  std::string dtype;  // safetensors spelling ("F32")
  Shape shape;        // global
  Box box;
  std::string file;   // shard file name (empty for declarations)
  std::string key;
};
/// Checks that the records of each tensor agree on dtype and shape and that the
/// stored boxes tile the tensor exactly once (check_tiling); DataError
/// "<where>: tensor 'x': ..." naming the boxes and files of the offending pieces.
void check_coverage(const std::vector<PieceRecord>& records, const std::string& where);
}  // namespace detail

}  // namespace strata::parallel
