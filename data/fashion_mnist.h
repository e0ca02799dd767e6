// Fashion-MNIST as a Dataset: the IDX files of the Debian package
// `dataset-fashion-mnist`, kept as u8 and normalised while a batch is built.
#pragma once
#include <array>
#include <string>
#include <vector>

#include <strata/data/dataset.h>

namespace strata::data {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

enum class Split { train, test };

/// Fashion-MNIST train (60000) or test (10000) split.
/// input: f32 (B,1,28,28), each pixel (x/255 - kMean)/kStd (callers flatten for an MLP).
/// target: i64 (B), class in [0, 10).
/// Loading reads and validates both files (counts, 28x28, label range) and throws
/// strata::DataError naming the file on any problem; nothing is kept on failure.
class FashionMnist : public Dataset {
 public:
  static constexpr int64_t kRows = 28, kCols = 28, kNumClasses = 10;
  static constexpr int64_t kTrainSize = 60000, kTestSize = 10000;
  static constexpr float kMean = 0.2860f, kStd = 0.3530f;

  explicit FashionMnist(Split split, const std::string& dir = kFashionMnistDir);

  int64_t size() const override { return int64_t(labels_.size()); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  Split split() const { return split_; }
  /// Raw pixels, (N,28,28) row-major u8, and labels (N).
  const std::vector<uint8_t>& pixels() const { return pixels_; }
  const std::vector<uint8_t>& labels() const { return labels_; }
  /// Paths of the image and label files of `split` under `dir`.
  static std::string images_path(Split split, const std::string& dir);
  static std::string labels_path(Split split, const std::string& dir);

 private:
  Split split_;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
  std::array<float, 256> lut_{};  // u8 -> normalised f32
};

}  // namespace strata::data
