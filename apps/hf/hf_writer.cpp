// export_hf: plans the shards as save_pretrained does (tensors in table order, a new
// shard when the next tensor would overflow the limit), then streams each tensor from
// the source into its shard, transposed to the file's layout where the table says so.
#include "apps/hf/hf_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "apps/hf/hf_names.h"
#include "apps/hf/hf_reader.h"
#include <strata/core/error.h>
#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>
#include <strata/tensor/safetensors.h>

namespace strata::apps::hf {
namespace fs = std::filesystem;

const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    default: return "?";
  }
}

uint64_t parse_shard_size(const std::string& text, const std::string& option) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  if (used == 0 || mult == 0 || !(v * mult >= 1) || v * mult > 1e15)
    STRATA_THROW(ConfigError, option, ": '", text, "' is not a size (e.g. 5GB, 200MB, 10KB or a number of bytes)");
  return uint64_t(v * mult);
}

HfExportSummary export_hf(const parallel::TensorSource& src, const HfModelSpec& spec, const std::string& out_arg,
                          const HfExportOptions& opts) {
  STRATA_CHECK(opts.dtype == DType::f32 || opts.dtype == DType::bf16 || opts.dtype == DType::f16,
               "[export_hf] dtype must be f32, bf16 or f16, not ", dtype_name(opts.dtype));
  const std::vector<TensorMapping> table = tensor_table(spec);
  for (const TensorMapping& m : table) {
    if (!src.contains(m.strata))
      STRATA_THROW(DataError, "checkpoint '", src.dir(), "': tensor '", m.strata, "' is missing (", spec.architecture,
                   "'s '", m.hf, "')");
    if (src.global_shape(m.strata) != m.shape)
      STRATA_THROW(DataError, "checkpoint '", src.dir(), "': tensor '", m.strata, "' is ",
                   shape_str(src.global_shape(m.strata)), " but ", spec.architecture, " needs ", shape_str(m.shape));
  }
  // Shards in table order; a tensor never straddles two.
  const uint64_t es = element_size(opts.dtype);
  std::vector<std::vector<size_t>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const uint64_t nb = uint64_t(shape_numel(table[i].shape)) * es;
    if (!shards.back().empty() && shard_bytes + nb > opts.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += nb;
    total += nb;
  }
  const int n = int(shards.size());
  auto shard_name = [&](int k) {
    if (n == 1) return std::string(kWeightsFile);
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", k + 1, n);
    return std::string(buf);
  };

  std::string out = fs::path(out_arg).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());  // beside it: the rename stays on one file system
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    STRATA_THROW(DataError, "cannot create '", tmp, "': ", ec ? ec.message() : "it exists");
  try {
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    for (int k = 0; k < n; ++k) {
      nlohmann::ordered_json header = nlohmann::ordered_json::object();
      header["__metadata__"] = {{"format", "pt"}};
      uint64_t offset = 0;
      for (size_t i : shards[size_t(k)]) {
        const uint64_t nb = uint64_t(shape_numel(table[i].shape)) * es;
        Shape file_shape = table[i].shape;
        if (table[i].transposed) std::reverse(file_shape.begin(), file_shape.end());
        header[table[i].hf] = {{"dtype", safetensors_dtype_name(opts.dtype)},
                               {"shape", file_shape},
                               {"data_offsets", {offset, offset + nb}}};
        offset += nb;
        weight_map[table[i].hf] = shard_name(k);
      }
      std::string text = header.dump();
      text.append((8 - text.size() % 8) % 8, ' ');
      const uint64_t hn = text.size();
      AtomicFileWriter w((fs::path(tmp) / shard_name(k)).string());
      w.write(&hn, 8);
      w.write(text.data(), text.size());
      for (size_t i : shards[size_t(k)]) {
        Tensor t = src.read_full(table[i].strata);  // (out, in) for weights
        if (table[i].transposed) t = ops::contiguous(ops::transpose(t, 0, 1));  // the file's (in, out)
        if (t.dtype() != opts.dtype) t = ops::to_dtype(t, opts.dtype);
        t = ops::contiguous(t);
        w.write(t.raw_data(), size_t(t.nbytes()));
      }
      w.commit();
    }
    if (n > 1) {
      nlohmann::ordered_json index;
      index["metadata"] = {{"total_size", total}};
      // sorted by name, as save_pretrained writes it
      std::vector<std::pair<std::string, std::string>> sorted;
      for (const auto& [k, v] : weight_map.items()) sorted.emplace_back(k, v.get<std::string>());
      std::sort(sorted.begin(), sorted.end());
      nlohmann::ordered_json wm = nlohmann::ordered_json::object();
      for (const auto& [k, v] : sorted) wm[k] = v;
      index["weight_map"] = std::move(wm);
      write_file_atomic((fs::path(tmp) / kWeightsIndexFile).string(), index.dump(2) + "\n");
    }
    write_file_atomic((fs::path(tmp) / kConfigFile).string(),
                      hf_config_json(spec, torch_dtype_name(opts.dtype)).dump(2) + "\n");
    commit_dir(tmp, out);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return {n, int(table.size()), total};
}

}  // namespace strata::apps::hf
