// The one checkpoint load path: a reader that opens any checkpoint strata has written
// (format v2, v1 sharded, v1 single-process directory) and reads any box or flat range of
// any tensor from whichever stored pieces hold it, touching only the bytes it needs.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <strata/parallel/checkpoint/format.h>
#include <strata/parallel/checkpoint/tensor_source.h>
#include <strata/tensor/safetensors.h>
#include <strata/tensor/tensor.h>

namespace strata::parallel {

/// Reads a checkpoint directory written at any world size and layout. open() validates
/// everything before returning (the index, the coverage of every tensor, every file's
/// header against the pieces it should hold); reads then pread only the runs of bytes
/// they need (runs closer than kMaxGapBytes in a file are read together), from shard
/// files opened on demand, at most kMaxOpenFiles at once. Thread-safe after open();
/// move-only.
/// Environment variable that, set to anything but "" or "0", lets CheckpointReader load
/// Loads NaN / inf values (model weights or optimizer state): the explicit override of the
/// non-finite check.
inline constexpr const char* kAllowNonfiniteEnv = "STRATA_ALLOW_NONFINITE";

class CheckpointReader : public TensorSource {
 public:
  static constexpr size_t kMaxOpenFiles = 64;
  static constexpr uint64_t kMaxGapBytes = 4096;

  CheckpointReader() = default;
  /// As open(dir).
  explicit CheckpointReader(const std::string& dir) { open(dir); }
  CheckpointReader(CheckpointReader&&) noexcept = default;
  CheckpointReader& operator=(CheckpointReader&&) noexcept = default;

  /// Opens `dir`: dir/index.json of version 2 or 1, or else a v1 single-process directory
  /// (state.json + model.safetensors [+ optimizer.safetensors], read as one world-1
  /// checkpoint whose meta is {"training_state": state.json, "optimizer": its optimizer
  /// scalars, "model_tensors": the names in model.safetensors}). DataError naming the
  /// file and the tensor on any problem; a newer version is refused by number.
  /// Hostile input: JSON nested over kMaxJsonDepth, repeated keys, world_size not matching
  /// the files, a shard resolving outside `dir` (symlink), a FIFO or device are refused.
  /// Each shard file whose CRC32 index.json records ("checksums", written since v2 gained
  /// it) is read whole once and checked. Reads of every tensor (model weights and optimizer
  /// state) then refuse NaN / inf values (DataError naming the file, tensor and element)
  /// unless kAllowNonfiniteEnv is set or allow_nonfinite(true) was called.
  void open(const std::string& dir);
  /// Turns the non-finite check of reads off (true) or back to open()'s rule (false).
  void allow_nonfinite(bool allow);

  const std::string& dir() const override { return dir_; }
  /// 2, or 1 for both v1 layouts.
  int version() const { return version_; }
  /// The file the meta came from (index.json, or state.json of a v1 plain directory).
  const std::string& meta_file() const { return meta_file_; }
  /// Paths of the data files (shard files; model/optimizer.safetensors for v1 plain).
  const std::vector<std::string>& files() const { return files_; }
  /// Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const override;
  /// DataError naming the checkpoint and tensor for an unknown name.
  const Shape& global_shape(const std::string& name) const override;
  DType dtype(const std::string& name) const override;
  int64_t numel(const std::string& name) const;
  /// The box `box` of the tensor into `dst`: a contiguous CPU tensor of box.numel()
  /// elements of the tensor's dtype (any shape; filled in row-major box order), copied
  /// from whichever stored pieces intersect the box. No copy besides the file read.
  void read_box(const std::string& name, const Box& box, const Tensor& dst) const;
  /// As above into a new contiguous CPU tensor of shape box.lengths.
  Tensor read_box(const std::string& name, const Box& box) const;
  /// Elements [begin, end) of the flattened tensor (0 <= begin <= end <= numel): a new
  /// contiguous 1-D CPU tensor of end - begin elements (read as flat_range_to_boxes).
  Tensor read(const std::string& name, int64_t begin, int64_t end) const;
  /// As read(), into `dst`: a contiguous CPU tensor of end - begin elements of the
  /// tensor's dtype (any shape), e.g. a rank's slice of a ZeRO flat buffer.
  void read_into(const std::string& name, int64_t begin, int64_t end, const Tensor& dst) const override;
  /// The whole tensor at its global shape (new contiguous CPU tensor).
  Tensor read_full(const std::string& name) const;
  /// The caller's "meta" JSON as saved (rank 0's).
  const nlohmann::json& meta() const override { return meta_; }
  /// How many ranks wrote it (= shard files), the mesh and ZeRO stage it was written with.
  int world_size() const { return world_size_; }
  const MeshDims& mesh() const { return mesh_; }
  int zero_stage() const { return zero_stage_; }

  /// One stored piece (internal layout, exposed for tools and tests): box `box` of the
  /// tensor, stored row-major from element `elem_offset` of the file entry `key` (0 in v2;
  /// v1 flat pieces are cut into boxes that share one 1-D entry).
  struct Piece {
    Box box;
    size_t file = 0;  // index into files()
    std::string key;
    SafetensorsEntry entry;  // the key's entry as validated at open()
    int64_t elem_offset = 0;
  };
  struct TensorInfo {
    DType dtype = DType::f32;
    Shape shape;
    std::vector<Piece> pieces;  // sorted by offsets, tiling the tensor
    bool require_finite = false;  // reads refuse NaN / inf
  };
  const TensorInfo& info(const std::string& name) const;

 private:
  // Shard files opened lazily and kept (at most kMaxOpenFiles, oldest closed first).
  struct FileCache {
    std::mutex mu;
    std::vector<std::shared_ptr<SafetensorsFile>> open;  // by file index
    std::vector<size_t> order;                          // open files, oldest first
  };
  void open_index(const std::string& text, const std::string& index_path);
  void open_v1_plain();
  void check_files(const std::string& index_name);
  void require_finite_by_default();
  std::shared_ptr<const SafetensorsFile> file(size_t index) const;
  void read_raw(const std::string& name, const TensorInfo& t, const Box& box, uint8_t* dst) const;

  std::string dir_, meta_file_;
  int version_ = 0;
  int world_size_ = 0;
  int zero_stage_ = 0;
  MeshDims mesh_;
  nlohmann::json meta_;
  std::vector<std::string> files_;  // paths
  std::vector<std::optional<uint32_t>> checksums_;  // CRC32 per file, where recorded
  std::map<std::string, TensorInfo> tensors_;
  std::unique_ptr<FileCache> cache_ = std::make_unique<FileCache>();
};

/// The pre-v2 name of the reader.
using ShardedCheckpointReader = CheckpointReader;

/// Writes every tensor of the checkpoint `dir` (any version) at its global shape (names
/// unchanged, in name order) into one safetensors file `out_file`, atomically
/// (AtomicFileWriter). Streams one bounded chunk at a time: memory stays O(chunk), not
/// O(model). The file loads with Python's `safetensors` and with load_safetensors(); its
/// __metadata__ holds {"format": "pt", "strata_world_size", "strata_zero_stage",
/// "strata_meta" (JSON text)}. DataError naming the file and tensor on a bad checkpoint
/// or I/O failure.
void consolidate(const std::string& dir, const std::string& out_file);

}  // namespace strata::parallel
