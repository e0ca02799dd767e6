// The safetensors file format (https://github.com/huggingface/safetensors): how model
// weights and optimizer state leave and re-enter strata, readable by Python's
// `safetensors` package. Layout: u64 little-endian header length N, N bytes of JSON
// (padded with spaces to 8 bytes), then the raw little-endian tensor data.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <strata/tensor/tensor.h>

namespace strata {

/// Ordered (name, tensor) list: the unit checkpoints and state_dicts trade in.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
/// Free-form string metadata stored under "__metadata__".
using SafetensorsMetadata = std::map<std::string, std::string>;

/// One header entry, as validated by read_safetensors_header.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

/// The validated header of a file: entries sorted by data offset, plus metadata.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;
  SafetensorsMetadata metadata;
  uint64_t data_start = 0;  // 8 + N
};

/// Writes `tensors` (any device/strides; stored contiguous, in the given order) to
/// `path` atomically. Names must be unique and non-empty. Returns the CRC32 (zlib) of
/// the file's bytes. Throws DataError naming the file on I/O failure, Error on a
/// duplicate name.
uint32_t save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata = {});

/// Reads and validates only the header, as strictly as Python's `safetensors`: a regular
/// file (a FIFO or device is refused without blocking), header length within the file
/// and at most 100 MB, JSON nested at most kMaxJsonDepth deep, no repeated name, known
/// dtypes, byte ranges equal to numel * element size that tile the data section exactly
/// (no gap, overlap, or trailing bytes). Every failure is a DataError naming the file and
/// (where there is one) the tensor.
SafetensorsHeader read_safetensors_header(const std::string& path);

/// Loads every tensor (new contiguous CPU tensors, in file-data order). Everything is
/// validated before any tensor is returned; `metadata` (optional) receives __metadata__.
NamedTensors load_safetensors(const std::string& path, SafetensorsMetadata* metadata = nullptr);

/// "F32", "BF16", ... (the format's dtype spelling).
const char* safetensors_dtype_name(DType t);

namespace detail {
struct SafetensorsFileImpl;
}

/// An open safetensors file for partial reads: the header is read and validated once
/// (as read_safetensors_header), then any byte range of any tensor is read on demand
/// with pread, without reading the rest of the file. Holds one file descriptor.
/// Thread-safe after construction (reads are positional). Move-only.
class SafetensorsFile {
 public:
  /// Opens and validates `path`; DataError naming the file (and tensor) on failure.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  const std::string& path() const;
  const SafetensorsHeader& header() const;
  /// The entry named `name`, or nullptr.
  const SafetensorsEntry* find(const std::string& name) const;
  /// Copies bytes [byte_offset, byte_offset + nbytes) of `e`'s data (e from header())
  /// into dst. Checks the range lies inside the tensor; DataError naming the file and
  /// tensor if the file is shorter than its header claimed.
  void read_bytes(const SafetensorsEntry& e, uint64_t byte_offset, uint64_t nbytes, void* dst) const;
  /// CRC32 (zlib) of the whole file, read in 1 MiB chunks; DataError on a short read.
  uint32_t file_crc32() const;
  /// Size of the file when it was opened.
  uint64_t file_size() const;

 private:
  std::unique_ptr<detail::SafetensorsFileImpl> impl_;
};

}  // namespace strata
