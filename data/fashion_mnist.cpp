// Fashion-MNIST loading and batch building. Pixels stay u8 (47 MB for train) and are
// normalised through a 256-entry table while each batch is copied out.
#include <strata/data/fashion_mnist.h>

#include <strata/data/idx_reader.h>

namespace strata::data {

std::string FashionMnist::images_path(Split split, const std::string& dir) {
  return dir + (split == Split::train ? "/train-images-idx3-ubyte.gz" : "/t10k-images-idx3-ubyte.gz");
}
std::string FashionMnist::labels_path(Split split, const std::string& dir) {
  return dir + (split == Split::train ? "/train-labels-idx1-ubyte.gz" : "/t10k-labels-idx1-ubyte.gz");
}

FashionMnist::FashionMnist(Split split, const std::string& dir) : split_(split) {
  const std::string ipath = images_path(split, dir), lpath = labels_path(split, dir);
  const int64_t expected = split == Split::train ? kTrainSize : kTestSize;
  IdxArray images = read_idx_images(ipath);
  IdxArray labels = read_idx_labels(lpath);
  const auto& d = images.dims;
  if (d[1] != kRows || d[2] != kCols) {
    STRATA_THROW(DataError, "[fashion_mnist] ", ipath, ": images are ", d[1], "x", d[2], ", expected ", kRows, "x",
                 kCols);
  }
  if (d[0] != expected) {
    STRATA_THROW(DataError, "[fashion_mnist] ", ipath, ": holds ", d[0], " images, the ",
                 split == Split::train ? "train" : "test", " split has ", expected);
  }
  if (labels.dims[0] != d[0]) {
    STRATA_THROW(DataError, "[fashion_mnist] ", lpath, ": holds ", labels.dims[0], " labels but ", ipath, " holds ",
                 d[0], " images");
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kNumClasses) {
      STRATA_THROW(DataError, "[fashion_mnist] ", lpath, ": label ", int(labels.data[i]), " of sample ", i,
                   " is not a class in [0, ", kNumClasses, ")");
    }
  }
  pixels_ = std::move(images.data);
  labels_ = std::move(labels.data);
  for (int v = 0; v < 256; ++v) lut_[size_t(v)] = (float(v) / 255.0f - kMean) / kStd;
}

Batch FashionMnist::get_batch(const std::vector<int64_t>& indices) const {
  detail::check_indices("fashion_mnist", indices, size());
  const int64_t b = int64_t(indices.size());
  constexpr int64_t kPix = kRows * kCols;
  Batch out{Tensor::empty({b, 1, kRows, kCols}, DType::f32), Tensor::empty({b}, DType::i64)};
  float* x = out.input.data<float>();      // (B,784)
  int64_t* y = out.target.data<int64_t>();  // (B)
  const float* lut = lut_.data();
  for (int64_t k = 0; k < b; ++k) {
    const uint8_t* src = pixels_.data() + indices[size_t(k)] * kPix;
    float* dst = x + k * kPix;
    for (int64_t p = 0; p < kPix; ++p) dst[p] = lut[src[p]];
    y[k] = labels_[size_t(indices[size_t(k)])];
  }
  return out;
}

}  // namespace strata::data
