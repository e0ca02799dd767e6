// Shared helpers of the Dataset interface.
#include <strata/data/dataset.h>

namespace strata::data::detail {

void check_indices(const char* who, const std::vector<int64_t>& indices, int64_t n) {
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    STRATA_CHECK(i >= 0 && i < n, "[", who, "] index ", i, " (batch position ", k, ") out of range [0, ", n, ")");
  }
}

}  // namespace strata::data::detail
