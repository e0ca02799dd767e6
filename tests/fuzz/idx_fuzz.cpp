// Fuzz entry point for the IDX reader: gzip detection, inflate with CRC/length checks,
// header and dims validation and the payload size bound.
#include <span>
#include <stdexcept>

#include <strata/core/error.h>
#include <strata/data/idx_reader.h>
#include "fuzz_targets.h"

namespace strata::fuzz {

int idx(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  for (const uint32_t magic : {data::kIdxMagicU8Images, data::kIdxMagicU8Labels}) {
    try {
      const data::IdxArray a = data::read_idx_bytes(bytes, "fuzz.idx", magic);
      int64_t numel = 1;
      for (const int64_t d : a.dims) numel *= d;
      if (numel != int64_t(a.data.size()))
        throw std::logic_error("read_idx returned dims that do not match its payload");
    } catch (const DataError&) {
    }
  }
  return 0;
}

}  // namespace strata::fuzz
