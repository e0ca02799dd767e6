// What the load-at-any-layout path reads from: a set of global named tensors, each rank
// asking only for the flat ranges it holds. A strata checkpoint (CheckpointReader) is one;
// a foreign model directory presented in strata's names and conventions is another.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include <strata/tensor/tensor.h>

namespace strata::parallel {

/// Global named tensors readable by flat range. Implementations validate their input when
/// opened; reads throw DataError naming the file and the tensor. Thread-safe reads.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  /// Where the tensors come from (a directory), for messages.
  virtual const std::string& dir() const = 0;
  virtual bool contains(const std::string& name) const = 0;
  /// The tensor's global shape; DataError for an unknown name.
  virtual const Shape& global_shape(const std::string& name) const = 0;
  /// The dtype reads deliver (a floating source loads into any floating parameter).
  virtual DType dtype(const std::string& name) const = 0;
  /// Elements [begin, end) of the flattened tensor into `dst`: a contiguous CPU tensor of
  /// end - begin elements of dtype(name) (any shape).
  virtual void read_into(const std::string& name, int64_t begin, int64_t end, const Tensor& dst) const = 0;
  /// Free-form JSON beside the tensors ({"optimizer": scalars, ...} for a checkpoint; an
  /// empty object where there is none).
  virtual const nlohmann::json& meta() const = 0;

  /// read_into a new contiguous 1-D CPU tensor of end - begin elements.
  Tensor read(const std::string& name, int64_t begin, int64_t end) const {
    Tensor out = Tensor::empty({end > begin ? end - begin : 0}, dtype(name));
    read_into(name, begin, end, out);
    return out;
  }
  /// The whole tensor at its global shape (new contiguous CPU tensor).
  Tensor read_full(const std::string& name) const {
    Tensor out = Tensor::empty(global_shape(name), dtype(name));
    read_into(name, 0, out.numel(), out);
    return out;
  }
};

}  // namespace strata::parallel
