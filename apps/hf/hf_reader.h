// A Hugging Face model directory read as a source of strata's global tensors: the
// load-at-any-layout path (ParallelModel::load_state) cuts each rank's boxes from it as
// from a strata checkpoint, and each rank preads only the bytes of the elements it holds.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/hf/hf_config.h"
#include "apps/hf/hf_names.h"
#include <strata/parallel/checkpoint/tensor_source.h>
#include <strata/tensor/safetensors.h>

namespace strata::apps::hf {

/// File names inside a model directory (as transformers' save_pretrained writes them).
inline constexpr const char* kWeightsFile = "model.safetensors";
inline constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";

/// An opened model directory: config.json, and model.safetensors or the shards that
/// model.safetensors.index.json lists. Opening validates everything before any read:
/// every parameter of the config's model present exactly once with its shape and a
/// dtype of F32, F16 or BF16, no tensor that is neither a parameter nor ignorable
/// (ignored_hf_tensor), the index agreeing with the files. DataError naming the file and
/// the tensor otherwise. Reads deliver `dtype` (the run's parameter dtype), converted
/// from the file's, in strata's names and layout (Conv1D weights transposed), and refuse
/// NaN / inf naming the file, tensor and element. Thread-safe reads.
class HfModelDir final : public parallel::TensorSource {
 public:
  explicit HfModelDir(const std::string& dir, DType dtype = DType::f32);

  const HfModelSpec& spec() const { return spec_; }
  /// The strata names, in tensor_table order.
  std::vector<std::string> names() const;
  /// The file and the entry holding `name` (a strata name).
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  /// The data files, sorted.
  std::vector<std::string> files() const;

  const std::string& dir() const override { return dir_; }
  bool contains(const std::string& name) const override { return tensors_.count(name) != 0; }
  const Shape& global_shape(const std::string& name) const override;
  DType dtype(const std::string&) const override { return dtype_; }
  void read_into(const std::string& name, int64_t begin, int64_t end, const Tensor& dst) const override;
  const nlohmann::json& meta() const override { return meta_; }

 private:
  struct Stored {
    TensorMapping map;
    std::shared_ptr<SafetensorsFile> file;
    const SafetensorsEntry* entry = nullptr;
  };
  const Stored& stored(const std::string& name) const;

  std::string dir_;
  DType dtype_;
  HfModelSpec spec_;
  nlohmann::json meta_ = nlohmann::json::object();
  std::map<std::string, Stored> tensors_;  // by strata name
  std::vector<std::string> order_;
};

/// True when `dir` looks like a Hugging Face model directory (holds config.json and no
/// strata index.json).
bool is_hf_model_dir(const std::string& dir);

}  // namespace strata::apps::hf
