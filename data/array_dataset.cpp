// ArrayDataset batches, and the IDX / .npy loaders that check counts, ranks and label
// ranges before anything is kept.
#include <strata/data/array_dataset.h>

#include <cstring>

#include <strata/core/error.h>
#include <strata/data/idx_reader.h>
#include <strata/data/npy.h>

namespace strata::data {
namespace {

void check_sizes(const Shape& shape, size_t values, size_t labels) {
  STRATA_CHECK(!shape.empty(), "[array] sample_shape must have at least one dimension");
  STRATA_CHECK(values == labels * size_t(shape_numel(shape)), "[array] ", values, " values for ", labels,
               " samples of shape ", shape_str(shape));
}

/// Labels as i64, each checked against [0, num_classes); `file` names the labels file.
template <class T>
std::vector<int64_t> checked_labels(const T* v, int64_t n, int64_t num_classes, const std::string& file) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t l = int64_t(v[i]);
    if (l < 0 || l >= num_classes)
      STRATA_THROW(DataError, "[labels] ", file, ": label ", l, " of sample ", i, " is not a class in [0, ",
                   num_classes, ") (data.num_classes = ", num_classes, ")");
    out[size_t(i)] = l;
  }
  return out;
}

void check_counts(int64_t n_images, const std::string& images, int64_t n_labels, const std::string& labels) {
  if (n_images != n_labels)
    STRATA_THROW(DataError, "[labels] ", labels, ": holds ", n_labels, " labels but ", images, " holds ", n_images,
                 " samples");
}

/// The per-sample shape of an (N, ...) array: a 2-d image (H, W) gains a channel, (1, H, W),
/// as torchvision's MNIST tensors do, so a CNN takes it as it is.
Shape per_sample(const std::vector<int64_t>& dims) {
  Shape s(dims.begin() + 1, dims.end());
  if (s.size() == 2) s.insert(s.begin(), 1);
  return s;
}

template <class T>
std::vector<T> as_vector(const std::vector<uint8_t>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace

ArrayDataset::ArrayDataset(Shape sample_shape, std::vector<uint8_t> values, std::vector<int64_t> labels)
    : sample_shape_(std::move(sample_shape)), u8_(std::move(values)), labels_(std::move(labels)) {
  check_sizes(sample_shape_, u8_.size(), labels_.size());
  numel_ = shape_numel(sample_shape_);
}

ArrayDataset::ArrayDataset(Shape sample_shape, std::vector<float> values, std::vector<int64_t> labels)
    : sample_shape_(std::move(sample_shape)), f32_(std::move(values)), labels_(std::move(labels)) {
  check_sizes(sample_shape_, f32_.size(), labels_.size());
  numel_ = shape_numel(sample_shape_);
}

Batch ArrayDataset::get_batch(const std::vector<int64_t>& indices) const {
  detail::check_indices("array", indices, size());
  const int64_t b = int64_t(indices.size()), d = numel_;
  Shape in_shape{b};
  in_shape.insert(in_shape.end(), sample_shape_.begin(), sample_shape_.end());
  Batch out{Tensor::empty(in_shape, DType::f32), Tensor::empty({b}, DType::i64)};
  float* x = out.input.data<float>();        // (B, D)
  int64_t* y = out.target.data<int64_t>();  // (B)
  constexpr float kScale = 1.0f / 255.0f;
  for (int64_t k = 0; k < b; ++k) {
    const int64_t i = indices[size_t(k)];
    float* dst = x + k * d;
    if (f32_.empty()) {
      const uint8_t* src = u8_.data() + i * d;
      for (int64_t j = 0; j < d; ++j) dst[j] = float(src[j]) * kScale;
    } else {
      std::memcpy(dst, f32_.data() + i * d, size_t(d) * sizeof(float));
    }
    y[k] = labels_[size_t(i)];
  }
  return out;
}

std::shared_ptr<ArrayDataset> load_idx_classification(const std::string& images, const std::string& labels,
                                                      int64_t num_classes) {
  IdxArray img = read_idx(images, kIdxAnyU8);
  if (img.dims.size() < 2)
    STRATA_THROW(DataError, "[idx] ", images, ": images need at least 2 dims (N, ...), the file has ",
                 img.dims.size());
  IdxArray lab = read_idx(labels, kIdxAnyU8);
  if (lab.dims.size() != 1)
    STRATA_THROW(DataError, "[idx] ", labels, ": labels must be 1-d (N), the file has dims ", shape_str(lab.dims));
  check_counts(img.dims[0], images, lab.dims[0], labels);
  std::vector<int64_t> y = checked_labels(lab.data.data(), lab.dims[0], num_classes, labels);
  return std::make_shared<ArrayDataset>(per_sample(img.dims), std::move(img.data),
                                        std::move(y));
}

std::shared_ptr<ArrayDataset> load_npy_classification(const std::string& images, const std::string& labels,
                                                      int64_t num_classes) {
  NpyArray img = read_npy(images);
  const auto& is = img.header.shape;
  if (is.size() < 2 || is[0] == 0)
    STRATA_THROW(DataError, "[npy] ", images, ": images need shape (N, ...) with N > 0 and at least 2 dims, got ",
                 shape_str(is));
  const NpyDType it = img.header.dtype;
  if (it != NpyDType::u8 && it != NpyDType::f32 && it != NpyDType::f64)
    STRATA_THROW(DataError, "[npy] ", images, ": images must be uint8, float32 or float64, got ", npy_dtype_name(it));
  NpyArray lab = read_npy(labels);
  const NpyDType lt = lab.header.dtype;
  if (lab.header.shape.size() != 1)
    STRATA_THROW(DataError, "[npy] ", labels, ": labels must be 1-d (N), got shape ", shape_str(lab.header.shape));
  if (lt != NpyDType::u8 && lt != NpyDType::i32 && lt != NpyDType::i64)
    STRATA_THROW(DataError, "[npy] ", labels, ": labels must be uint8, int32 or int64, got ", npy_dtype_name(lt));
  const int64_t n = lab.header.shape[0];
  check_counts(is[0], images, n, labels);
  std::vector<int64_t> y;
  if (lt == NpyDType::u8) y = checked_labels(lab.bytes.data(), n, num_classes, labels);
  if (lt == NpyDType::i32) y = checked_labels(as_vector<int32_t>(lab.bytes).data(), n, num_classes, labels);
  if (lt == NpyDType::i64) y = checked_labels(as_vector<int64_t>(lab.bytes).data(), n, num_classes, labels);
  const Shape shape = per_sample(is);
  if (it == NpyDType::u8) return std::make_shared<ArrayDataset>(shape, std::move(img.bytes), std::move(y));
  std::vector<float> x;
  if (it == NpyDType::f32) {
    x = as_vector<float>(img.bytes);
  } else {
    const std::vector<double> d = as_vector<double>(img.bytes);
    x.assign(d.begin(), d.end());
  }
  return std::make_shared<ArrayDataset>(shape, std::move(x), std::move(y));
}

Shape sample_shape_of(const std::string& format, const std::string& images) {
  STRATA_CHECK(format == "idx" || format == "npy", "[array] unknown format '", format, "' (idx or npy)");
  const std::vector<int64_t> dims =
      format == "idx" ? read_idx_dims(images) : read_npy_header(images).shape;
  if (dims.size() < 2)
    STRATA_THROW(DataError, "[", format, "] ", images, ": images need at least 2 dims (N, ...), the file has shape ",
                 shape_str(dims));
  return per_sample(dims);
}

}  // namespace strata::data
