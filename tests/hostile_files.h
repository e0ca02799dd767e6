// Helpers for the hostile-file tests (tests/*/..._hostile_test.cpp): the exact error class
// and message parts, deeply nested JSON, and a FIFO that cannot hang a broken test forever.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <strata/core/error.h>

namespace strata::testing {

/// Expects fn() to throw exactly E (not a subclass or a sibling) whose message contains
/// every string in `parts`.
template <class E, class F>
void expect_error(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error; nothing was thrown";
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_EQ(typeid(e), typeid(E)) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error class (" << typeid(e).name() << "): " << e.what();
  }
}

/// `depth` nested arrays: "[[[...]]]".
inline std::string deep_json_array(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

/// A FIFO at `path`. While alive, a helper thread keeps opening its write end without
/// blocking, so a reader that (wrongly) blocks in open() is released and the test fails
/// on its assertion instead of hanging.
class FifoReleaser {
 public:
  explicit FifoReleaser(const std::string& path) : path_(path) {
    ok_ = ::mkfifo(path.c_str(), 0600) == 0;
    thread_ = std::thread([this] {
      const auto start = std::chrono::steady_clock::now();
      while (!stop_ && std::chrono::steady_clock::now() - start < std::chrono::seconds(3))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      while (!stop_) {  // after 3 s: a reader is stuck in open(); let it through
        const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  ~FifoReleaser() {
    stop_ = true;
    thread_.join();
  }
  bool ok() const { return ok_; }

 private:
  std::string path_;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace strata::testing
