// Reader for NumPy's .npy format (versions 1.0, 2.0 and 3.0): the header is parsed
// strictly and the payload size checked against shape x itemsize before any data is read.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata::data {

/// Element types accepted from a .npy descr (little-endian or byte-order free only).
enum class NpyDType { u8, i32, i64, f32, f64 };
const char* npy_dtype_name(NpyDType t);
int npy_itemsize(NpyDType t);

/// What a .npy header says: dtype, shape (C order) and where the data starts.
struct NpyHeader {
  NpyDType dtype = NpyDType::u8;
  std::vector<int64_t> shape;  // () is a scalar
  int64_t data_offset = 0;     // bytes before the array data
  int64_t numel() const;
};

/// A whole .npy array: its header and its raw little-endian bytes (numel * itemsize).
struct NpyArray {
  NpyHeader header;
  std::vector<uint8_t> bytes;
};

/// Parses the header at the start of `bytes` (which may hold more, e.g. the whole file).
/// Throws strata::DataError "[npy] <name>: ..." on: a bad magic, a version other than
/// 1.0/2.0/3.0, a header length past the end, a header that is not one Python dict
/// literal ending in '\n' with exactly the keys 'descr', 'fortran_order', 'shape',
/// fortran_order True, a descr outside |u1 <u1 <i4 <i8 <f4 <f8 (big-endian and structured
/// dtypes included), or a negative or overflowing shape.
NpyHeader parse_npy_header(std::span<const uint8_t> bytes, const std::string& name);

/// Reads only the header of the file at `path` (cheap: at most the first 1 MiB).
NpyHeader read_npy_header(const std::string& path);

/// Reads the whole file. Beyond parse_npy_header's checks: the file must hold exactly
/// data_offset + numel * itemsize bytes (truncated or trailing bytes are errors), must
/// fit in physical memory, and must be a regular file (a FIFO is refused before open()).
NpyArray read_npy(const std::string& path);

}  // namespace strata::data
