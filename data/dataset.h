// The Dataset interface the DataLoader pulls from: one virtual call per batch that
// writes every sample straight into one contiguous input and one target tensor.
#pragma once
#include <cstdint>
#include <vector>

#include <strata/tensor/tensor.h>

namespace strata::data {

/// One mini-batch: input and target are contiguous CPU tensors whose dim 0 is the
/// batch (B). Their trailing shapes and dtypes are the dataset's (see each dataset).
struct Batch {
  Tensor input;
  Tensor target;
  int64_t size() const { return input.defined() ? input.size(0) : 0; }
};

/// A random-access collection of samples, read a batch at a time.
/// Thread-safety: get_batch is const and may run on the DataLoader's prefetch thread
/// while the owner keeps using the dataset; implementations hold no mutable state.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of samples; valid indices are [0, size()).
  virtual int64_t size() const = 0;
  /// Builds the batch of samples `indices` (in that order, repeats allowed) into
  /// freshly allocated contiguous tensors. Throws strata::Error on an index out of range.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
};

namespace detail {
/// Throws "[<who>] index i out of range [0, n)" for the first bad index.
void check_indices(const char* who, const std::vector<int64_t>& indices, int64_t n);
}  // namespace detail

}  // namespace strata::data
