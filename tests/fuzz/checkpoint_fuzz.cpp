// Fuzz entry points for the checkpoint readers: the bytes as a safetensors file (header
// parse, strict tiling checks, payload reads) and as a sharded checkpoint's index.json
// next to two real shard files (piece paths, coverage, checksums, world size, reads).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/core/error.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/tensor/safetensors.h>
#include "fuzz_targets.h"

namespace strata::fuzz {
namespace {
namespace fs = std::filesystem;

// A private scratch directory for this process, removed at exit; `fixture` files (from
// tests/fuzz/<fixture>/) are copied into it once.
class Scratch {
 public:
  explicit Scratch(const char* fixture) {
    std::string tmpl = (fs::temp_directory_path() / "strata_fuzz_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    if (fixture)
      for (const auto& e : fs::directory_iterator(fs::path(STRATA_SOURCE_DIR) / "tests/fuzz" / fixture))
        fs::copy_file(e.path(), dir_ / e.path().filename());
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Writes `data` to `name` inside the directory and returns its path.
  std::string write(const char* name, const uint8_t* data, size_t size) const {
    const fs::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    if (!out) throw std::runtime_error("cannot write " + p.string());
    return p.string();
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

void expect(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

}  // namespace

int safetensors(const uint8_t* data, size_t size) {
  static const Scratch scratch(nullptr);
  const std::string path = scratch.write("fuzz.safetensors", data, size);
  try {
    const SafetensorsHeader h = read_safetensors_header(path);
    const NamedTensors all = load_safetensors(path);
    expect(all.size() == h.entries.size(), "load_safetensors returned another tensor count than the header");
    const SafetensorsFile f(path);
    uint64_t total = 0;
    for (const SafetensorsEntry& e : f.header().entries) {
      std::vector<uint8_t> bytes(e.end - e.begin);  // bounded: the ranges tile the file's data
      f.read_bytes(e, 0, bytes.size(), bytes.data());
      total += bytes.size();
    }
    expect(total <= f.file_size(), "the tensors hold more bytes than the file");
    (void)f.file_crc32();
  } catch (const DataError&) {
  }
  return 0;
}

int checkpoint_index(const uint8_t* data, size_t size) {
  // Two shard files of a real 2-rank ZeRO-3 checkpoint (tiny MLP); the bytes are its index.json.
  static const Scratch scratch("index_shards");
  scratch.write(parallel::kIndexFile, data, size);
  try {
    const parallel::CheckpointReader ck(scratch.dir().string());
    for (const std::string& n : ck.names()) {
      const Tensor t = ck.read_full(n);
      expect(t.shape() == ck.global_shape(n), "read_full returned another shape than the index");
    }
  } catch (const DataError&) {
  }
  return 0;
}

}  // namespace strata::fuzz
