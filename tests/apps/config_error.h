// config_error(fn): the message of the ConfigError fn() throws, shared by the config tests.
#pragma once
#include <string>

#include <strata/core/error.h>

namespace strata {

/// The ConfigError message of fn(), or "" if it did not throw one (other exceptions escape).
template <class F>
std::string config_error(F&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace strata
