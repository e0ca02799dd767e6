// Writes a model as a Hugging Face directory that transformers' from_pretrained loads:
// config.json, and model.safetensors or shards under model.safetensors.index.json (as
// save_pretrained splits them), from any source of strata's global tensors.
#pragma once
#include <cstdint>
#include <string>

#include "apps/hf/hf_config.h"
#include <strata/parallel/checkpoint/tensor_source.h>

namespace strata::apps::hf {

struct HfExportOptions {
  /// A shard closes before the tensor that would take it past this many bytes (a tensor
  /// larger than it gets a shard of its own); save_pretrained's default is 5 GB.
  uint64_t max_shard_bytes = 5'000'000'000ull;
  DType dtype = DType::f32;  // f32 | bf16 | f16
  /// Replace an existing non-empty directory `out`.
  bool overwrite = false;
};

struct HfExportSummary {
  int files = 0;  // safetensors files
  int tensors = 0;
  uint64_t bytes = 0;  // tensor data
};

/// Writes `spec`'s model from `src` (strata names and shapes, tensor_table) into `out`
/// (check it first with check_output_dir, apps/output_file.h):
/// everything goes into a temporary directory beside it, renamed over `out` only when
/// complete (nothing is left half-written). Tensors are read one at a time (memory
/// O(largest tensor)). DataError naming the source and tensor when one is missing or of
/// another shape.
HfExportSummary export_hf(const parallel::TensorSource& src, const HfModelSpec& spec, const std::string& out,
                          const HfExportOptions& opts);

/// "5GB", "200MB", "10KB", "1234" (bytes; powers of 10, as transformers' max_shard_size).
/// ConfigError naming `option` on anything else.
uint64_t parse_shard_size(const std::string& text, const std::string& option);

/// "float32" / "bfloat16" / "float16" (config.json's torch_dtype) of f32 / bf16 / f16.
const char* torch_dtype_name(DType t);

}  // namespace strata::apps::hf
