// run_agreed: two small all-reduces after the local step (the lowest failing rank, then
// its message and error kind).
#include <strata/comm/agreement.h>

#include <exception>
#include <string>
#include <vector>

#include <strata/core/error.h>
#include <strata/tensor/ops.h>

namespace strata::comm {
namespace {

enum Kind : int64_t { kError = 1, kData = 2, kConfig = 3, kComm = 4 };
constexpr size_t kMaxMessage = 2048;  // characters of the failing rank's message carried to the others

}  // namespace

void run_agreed(ProcessGroup& group, const std::function<void()>& local) {
  std::exception_ptr mine;
  std::string message;
  int64_t kind = 0;
  try {
    local();
  } catch (const ConfigError& e) {
    mine = std::current_exception(), message = e.what(), kind = kConfig;
  } catch (const DataError& e) {
    mine = std::current_exception(), message = e.what(), kind = kData;
  } catch (const CommError& e) {
    mine = std::current_exception(), message = e.what(), kind = kComm;
  } catch (const std::exception& e) {
    mine = std::current_exception(), message = e.what(), kind = kError;
  }
  const int n = group.size(), r = group.rank();
  if (n == 1) {
    if (mine) std::rethrow_exception(mine);
    return;
  }
  const Tensor failed = ops::full({1}, mine ? double(r) : double(n), DType::f64);
  const int first = int(all_reduce_host(group, failed, ReduceOp::min).item<double>());
  if (first == n) return;
  // The first failing rank's kind and message, as integers summed over zeros elsewhere.
  std::vector<int64_t> buf(kMaxMessage + 1, 0);
  if (r == first) {
    buf[0] = kind;
    for (size_t i = 0; i < message.size() && i < kMaxMessage; ++i) buf[i + 1] = int64_t(uint8_t(message[i]));
  }
  const std::vector<int64_t> all =
      all_reduce_host(group, ops::from_vector(buf, {int64_t(buf.size())}), ReduceOp::sum).to_vector<int64_t>();
  if (mine) std::rethrow_exception(mine);
  std::string theirs;
  for (size_t i = 1; i < all.size() && all[i] != 0; ++i) theirs.push_back(char(all[i]));
  const std::string what = "rank " + std::to_string(first) + ": " + theirs;
  switch (all[0]) {
    case kConfig: throw ConfigError(what);
    case kData: throw DataError(what);
    case kComm: throw CommError(what);
    default: throw Error(what);
  }
}

void run_agreed(ProcessGroup* group, const std::function<void()>& local) {
  if (group)
    run_agreed(*group, local);
  else
    local();
}

}  // namespace strata::comm
