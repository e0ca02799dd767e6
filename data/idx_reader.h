// Reader for the IDX format of (Fashion-)MNIST, gzipped or raw. The whole file is
// validated (magic, dims, exact payload size) before anything is returned.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata::data {

/// Magic numbers: two zero bytes, type code 0x08 (u8), number of dims.
inline constexpr uint32_t kIdxMagicU8Labels = 0x00000801;  // dims: (N)
inline constexpr uint32_t kIdxMagicU8Images = 0x00000803;  // dims: (N, rows, cols)
/// Passed as `expected_magic`: any u8 IDX file (0x000008NN) with 1 <= NN <= kIdxMaxDims.
inline constexpr uint32_t kIdxAnyU8 = 0x00000800;
inline constexpr int kIdxMaxDims = 8;

/// A u8 IDX array: dims as in the header, data row-major (numel = product of dims).
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

/// Reads an IDX file (gzipped when it starts with the gzip magic, else raw) whose magic
/// must equal `expected_magic` (or be any u8 magic with 1..kIdxMaxDims dims for kIdxAnyU8). Throws strata::DataError naming the file and the problem:
/// missing file (with the Debian package that provides Fashion-MNIST), not a regular file
/// (a FIFO or device is refused before it is opened), bad magic, a zero dimension, a
/// header promising over 64 GiB, a truncated header or payload (bytes expected vs got), a
/// corrupt gzip stream (CRC32 or length mismatch included), a gzip stream cut before its
/// trailer, or bytes after the promised payload.
IdxArray read_idx(const std::string& path, uint32_t expected_magic);

/// read_idx over bytes in memory; `name` stands for the file in messages.
IdxArray read_idx_bytes(std::span<const uint8_t> bytes, const std::string& name, uint32_t expected_magic);

/// Only the dims of the header of a u8 IDX file (any number of dims, as kIdxAnyU8):
/// cheap, for shapes a model needs before the data is loaded. Same errors as read_idx
/// for the header.
std::vector<int64_t> read_idx_dims(const std::string& path);

/// read_idx for images: dims (N, rows, cols).
IdxArray read_idx_images(const std::string& path);
/// read_idx for labels: dims (N).
IdxArray read_idx_labels(const std::string& path);

}  // namespace strata::data
