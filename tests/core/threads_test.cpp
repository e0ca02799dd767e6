// The default thread count honours OMP_NUM_THREADS (as libgomp and PyTorch do): a rank
// started with OMP_NUM_THREADS=1 must not open multi-thread OpenMP teams because strata's
// own count defaulted to the core count (found by TSan: docs/reliability.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <strata/core/threads.h>
#include <strata/core/threads_default.h>

using namespace strata;

namespace {
// Sets OMP_NUM_THREADS (or unsets it) for one scope and restores the caller's value.
class OmpEnv {
 public:
  explicit OmpEnv(const char* v) {
    if (const char* old = std::getenv("OMP_NUM_THREADS")) saved_ = old;
    if (v)
      setenv("OMP_NUM_THREADS", v, 1);
    else
      unsetenv("OMP_NUM_THREADS");
  }
  ~OmpEnv() {
    if (saved_)
      setenv("OMP_NUM_THREADS", saved_->c_str(), 1);
    else
      unsetenv("OMP_NUM_THREADS");
  }

 private:
  std::optional<std::string> saved_;
};

int hardware() { return std::max(1, int(std::thread::hardware_concurrency())); }
}  // namespace

TEST(Threads, DefaultIsOmpNumThreadsWhenSet) {
  {
    OmpEnv e("1");
    EXPECT_EQ(default_num_threads(), 1);
  }
  {
    OmpEnv e("3");
    EXPECT_EQ(default_num_threads(), 3);
  }
  {
    OmpEnv e("5,2");  // nested levels: the outer one is ours
    EXPECT_EQ(default_num_threads(), 5);
  }
}

TEST(Threads, DefaultIsAllCoresWhenUnsetOrInvalid) {
  for (const char* v : {static_cast<const char*>(nullptr), "", "0", "-2", "abc", "4x"}) {
    OmpEnv e(v);
    EXPECT_EQ(default_num_threads(), hardware()) << (v ? v : "(unset)");
  }
}

TEST(Threads, SetOverridesTheDefaultAndZeroMeansAllCores) {
  const int saved = get_num_threads();
  OmpEnv e("1");
  set_num_threads(2);
  EXPECT_EQ(get_num_threads(), 2);
  set_num_threads(0);
  EXPECT_EQ(get_num_threads(), hardware());
  set_num_threads(saved);
}
