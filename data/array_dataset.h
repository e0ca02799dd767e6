// Labelled samples held in memory, loaded from a user's own files: IDX (any u8 array,
// e.g. MNIST, EMNIST, KMNIST) or NumPy .npy, images plus labels.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <strata/data/dataset.h>

namespace strata::data {

/// N samples of shape `sample_shape` and their class labels. The loaders below give
/// an (N, H, W) file the sample shape (1, H, W) (one channel, as torchvision's MNIST) and
/// keep every other (N, ...) shape as it is ((N, D) vectors, (N, C, H, W) images).
/// input: f32 (B, *sample_shape): u8 storage is scaled to [0, 1] (x/255, as
/// torchvision's ToTensor), f32 storage is returned as stored. target: i64 (B).
/// Thread-safety: immutable after construction.
class ArrayDataset : public Dataset {
 public:
  /// values.size() must be labels.size() * numel(sample_shape) (checked).
  ArrayDataset(Shape sample_shape, std::vector<uint8_t> values, std::vector<int64_t> labels);
  ArrayDataset(Shape sample_shape, std::vector<float> values, std::vector<int64_t> labels);

  int64_t size() const override { return int64_t(labels_.size()); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const Shape& sample_shape() const { return sample_shape_; }
  const std::vector<int64_t>& labels() const { return labels_; }

 private:
  Shape sample_shape_;
  int64_t numel_;
  std::vector<uint8_t> u8_;
  std::vector<float> f32_;
  std::vector<int64_t> labels_;
};

/// Images (u8 IDX, dims (N, d1, ..., dk), k >= 1) and labels (u8 IDX, dims (N)), gzipped
/// or raw. Throws strata::DataError naming the file: any read_idx error, labels that are
/// not 1-d, counts that differ, or a label >= num_classes (naming the sample).
std::shared_ptr<ArrayDataset> load_idx_classification(const std::string& images, const std::string& labels,
                                                      int64_t num_classes);

/// Images (.npy uint8, float32 or float64 (stored as f32), shape (N, ...), at least 2-d)
/// and labels (.npy uint8, int32 or int64, shape (N)). Throws strata::DataError naming
/// the file: any read_npy error, a wrong dtype or rank, counts that differ, or a label
/// outside [0, num_classes) (naming the sample).
std::shared_ptr<ArrayDataset> load_npy_classification(const std::string& images, const std::string& labels,
                                                      int64_t num_classes);

/// The shape of one sample (the dims after N) from the file's header alone, so a model
/// can be built before (or without) loading the data: idx or npy per `format`.
/// Same header errors as the loaders, plus "fewer than 2 dims".
Shape sample_shape_of(const std::string& format, const std::string& images);

}  // namespace strata::data
