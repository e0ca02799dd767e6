// TensorBoard event files beside metrics.jsonl (run.tensorboard): the scalars a run logs,
// as TFRecord-framed Event protobufs that `tensorboard --logdir runs` reads. The three
// messages involved are encoded by hand (a few fields), so no protobuf dependency.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::apps {

/// CRC-32C (Castagnoli), as TFRecord frames use it; crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

/// An Event protobuf (tensorflow/core/util/event.proto): wall_time, step, and either the
/// file_version string or a Summary of (tag, simple_value) scalars.
std::string encode_event(double wall_time, int64_t step, std::string_view file_version,
                         const std::vector<std::pair<std::string, float>>& scalars);
/// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string frame_record(std::string_view data);

/// Appends scalar events to <dir>/events.out.tfevents.<seconds>.<host> (a new file per
/// process, as TensorBoard's writers do; it reads every file in the directory). Not
/// thread-safe; rank 0 writes.
class TensorBoardWriter {
 public:
  /// Creates the directory and the file with its file_version record; DataError naming
  /// the file when it cannot be written.
  explicit TensorBoardWriter(const std::string& dir);
  /// Scalars of one step, e.g. {{"train/loss", 2.31f}, {"train/lr", 3e-4f}}; flushed.
  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace strata::apps
