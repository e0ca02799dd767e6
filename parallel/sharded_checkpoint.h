// Sharded checkpoints: every rank writes the pieces of flattened tensors it owns into
// its own safetensors file, and an index.json maps each logical tensor to those pieces,
// so a checkpoint saved at one world size (ZeRO-1/2/3, DDP, one process) loads at any.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "tensor/safetensors.h"
#include "tensor/tensor.h"

namespace strata::parallel {

/// index.json "version" written by save_sharded (the reader accepts this one only).
inline constexpr int kShardedCheckpointVersion = 1;
/// File name of the index inside a checkpoint directory.
inline constexpr const char* kShardedIndexFile = "index.json";

/// Elements [begin, end) of the row-major flattening of the logical tensor `name`
/// (global shape `global_shape`). `data` is a CPU tensor of end - begin elements in any
/// dtype (1-D; another shape with that many elements is flattened, non-contiguous data is
/// copied). A zero-length piece only declares the tensor (name, shape, dtype): it is not
/// stored, which lets a rank whose shard of a tensor is empty still name it.
struct ShardPiece {
  std::string name;
  Shape global_shape;
  int64_t begin = 0;
  int64_t end = 0;
  Tensor data;
};

/// Collective over `group` (every rank calls it with the same dir and zero_stage): writes
/// the checkpoint directory `dir`:
///   dir/shard_RRRRR_of_NNNNN.safetensors  rank R's non-empty pieces, key "<name>@<begin>"
///   dir/index.json                        version, world_size, zero_stage, meta (rank 0's),
///                                         and per tensor: dtype, global shape, pieces
/// Pieces of one tensor, over all ranks, must tile [0, numel) exactly once (a replicated
/// tensor is passed by one owning rank only) with one dtype and one global shape.
/// Everything is written into "<dir>.tmp" (a stale one is removed first) and renamed to
/// `dir` by rank 0 (atomically replacing an existing checkpoint) only after every rank
/// wrote its file and the pieces were checked; the rename is complete on every rank when
/// this returns. On any failure no `dir` is created or changed, and every rank throws the
/// same error (DataError naming the file and tensor for bad coverage or I/O; Error for a
/// piece whose data does not match its range; CommError when the group fails). The files
/// must land on a filesystem every rank and rank 0 share.
void save_sharded(const std::string& dir, comm::ProcessGroup& group, const std::vector<ShardPiece>& my_pieces,
                  int zero_stage, const nlohmann::json& meta);

/// Reads a sharded checkpoint written by save_sharded at any world size. open() validates
/// everything before returning; reads then touch only the bytes they need (pread on shard
/// files opened on demand, at most kMaxOpenFiles at once). Thread-safe after open();
/// move-only.
class ShardedCheckpointReader {
 public:
  static constexpr size_t kMaxOpenFiles = 64;

  ShardedCheckpointReader() = default;
  /// As open(dir).
  explicit ShardedCheckpointReader(const std::string& dir) { open(dir); }
  ShardedCheckpointReader(ShardedCheckpointReader&&) noexcept = default;
  ShardedCheckpointReader& operator=(ShardedCheckpointReader&&) noexcept = default;

  /// Reads dir/index.json and checks it (version, fields, every tensor's pieces tile
  /// [0, numel) exactly once), then opens each shard file it names and checks that every
  /// piece's key is there with the dtype and [end - begin] shape claimed. DataError
  /// naming the file and the tensor on any mismatch.
  void open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  /// Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  /// DataError naming the checkpoint and tensor for an unknown name.
  const Shape& global_shape(const std::string& name) const;
  DType dtype(const std::string& name) const;
  int64_t numel(const std::string& name) const;
  /// Elements [begin, end) of the flattened tensor (0 <= begin <= end <= numel): a new
  /// contiguous 1-D CPU tensor of end - begin elements, copied from whichever pieces
  /// cover the range (only those bytes are read).
  Tensor read(const std::string& name, int64_t begin, int64_t end) const;
  /// As read(), into `dst`: a contiguous CPU tensor of end - begin elements of the
  /// tensor's dtype (any shape), e.g. a rank's slice of a ZeRO flat buffer. No copy
  /// besides the file read.
  void read_into(const std::string& name, int64_t begin, int64_t end, const Tensor& dst) const;
  /// The whole tensor at its global shape (new contiguous CPU tensor).
  Tensor read_full(const std::string& name) const;
  /// The caller's "meta" JSON as saved (rank 0's).
  const nlohmann::json& meta() const { return meta_; }
  int world_size() const { return world_size_; }
  int zero_stage() const { return zero_stage_; }

  /// One stored piece (internal layout, exposed for tools and tests).
  struct Piece {
    int64_t begin = 0, end = 0;
    size_t file = 0;  // index into files_
    std::string key;
    SafetensorsEntry entry;  // the key's entry as validated at open()
  };
  struct TensorInfo {
    DType dtype = DType::f32;
    Shape shape;
    std::vector<Piece> pieces;  // sorted by begin, tiling [0, numel)
  };
  const TensorInfo& info(const std::string& name) const;

 private:
  // Shard files opened lazily and kept (at most kMaxOpenFiles, oldest closed first).
  struct FileCache {
    std::mutex mu;
    std::vector<std::shared_ptr<SafetensorsFile>> open;  // by file index
    std::vector<size_t> order;                          // open files, oldest first
  };
  std::shared_ptr<const SafetensorsFile> file(size_t index) const;
  void read_raw(const std::string& name, const TensorInfo& t, int64_t begin, int64_t end, void* dst) const;

  std::string dir_;
  int world_size_ = 0;
  int zero_stage_ = 0;
  nlohmann::json meta_;
  std::vector<std::string> files_;  // paths
  std::map<std::string, TensorInfo> tensors_;
  std::unique_ptr<FileCache> cache_ = std::make_unique<FileCache>();
};

/// Writes every tensor of the checkpoint `dir` at its global shape (names unchanged, in
/// name order) into one safetensors file `out_file`, atomically (tmp + fsync + rename).
/// Streams one bounded chunk at a time: memory stays O(chunk), not O(model). The file
/// loads with Python's `safetensors` and with load_safetensors(); its __metadata__ holds
/// {"format": "pt", "strata_world_size", "strata_zero_stage", "strata_meta" (JSON text)}.
/// DataError naming the file and tensor on a bad checkpoint or I/O failure.
void consolidate(const std::string& dir, const std::string& out_file);

namespace detail {
/// Shard file name of `rank` in a world of `world`: "shard_00002_of_00004.safetensors".
std::string shard_file_name(int rank, int world);
/// Key of a piece inside its shard file: "<name>@<begin>".
std::string piece_key(const std::string& name, int64_t begin);
/// One entry of the coverage check: where a piece of a tensor lives.
struct PieceRecord {
  std::string name;
  std::string dtype;  // safetensors spelling ("F32")
  Shape shape;        // global
  int64_t begin = 0, end = 0;
  std::string file;   // shard file name (empty for zero-length declarations)
  std::string key;
};
/// Checks that the records of each tensor agree on dtype and shape and that the
/// non-empty ones tile [0, numel) exactly once; DataError "<where>: tensor 'x' ..."
/// naming the files of the offending pieces otherwise.
void check_coverage(const std::vector<PieceRecord>& records, const std::string& where);
}  // namespace detail

}  // namespace strata::parallel
