// Typed exceptions and STRATA_CHECK. The library throws; only apps/ catches,
// prints the rank and maps the type to an exit code (config 2, data/checkpoint 1).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

/// Base of every error strata throws. what() carries the message and, for
/// STRATA_CHECK failures, the source location.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// A bad config value or CLI flag; the message names the key path. Exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
};
/// Bad or missing data / checkpoint file; the message names the file (and tensor). Exit code 1.
class DataError : public Error {
 public:
  using Error::Error;
};
/// A collective failed or timed out; the message names op, group, rank and sequence number.
class CommError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace strata

/// STRATA_CHECK(cond, "[op] what is wrong: ", a, " vs ", b) throws strata::Error
/// with file:line when cond is false.
#define STRATA_CHECK(cond, ...)                                                           \
  do {                                                                                    \
    if (!(cond)) [[unlikely]]                                                             \
      ::strata::detail::check_failed(__FILE__, __LINE__, #cond,                           \
                                     ::strata::detail::str_cat(__VA_ARGS__));             \
  } while (0)

/// Throw a typed error with a streamed message: STRATA_THROW(DataError, "file ", path).
#define STRATA_THROW(Type, ...) throw ::strata::Type(::strata::detail::str_cat(__VA_ARGS__))
