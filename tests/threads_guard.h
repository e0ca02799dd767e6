// Restores the compute thread count a test changed (and sets one first, if given).
#pragma once
#include <strata/core/threads.h>

namespace strata::testing {

class ThreadsGuard {
 public:
  ThreadsGuard() : saved_(get_num_threads()) {}
  explicit ThreadsGuard(int n) : ThreadsGuard() { set_num_threads(n); }
  ~ThreadsGuard() { set_num_threads(saved_); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int saved_;
};

}  // namespace strata::testing
