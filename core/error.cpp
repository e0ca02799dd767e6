#include <strata/core/error.h>

#include <cstring>

namespace strata::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  throw Error(str_cat(msg.empty() ? std::string("check failed") : msg, " (", cond, " at ",
                      base ? base + 1 : file, ":", line, ")"));
}

}  // namespace strata::detail
