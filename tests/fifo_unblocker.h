// Tests that hand a FIFO to a reader: if the reader wrongly open()s it, the open blocks
// until a writer appears. FifoUnblocker is that writer after a grace period, so a
// regression fails the test's assertions instead of hanging the suite.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace strata::testing {

/// Creates a FIFO at `path`; unless done() is called within 3 s, opens its write end once
/// (non-blocking) and closes it, which releases a reader blocked in open(). Joins on destruction.
class FifoUnblocker {
 public:
  explicit FifoUnblocker(const std::string& path) : path_(path) {
    ok_ = ::mkfifo(path.c_str(), 0600) == 0;
    thread_ = std::thread([this] {
      for (int i = 0; i < 300 && !done_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      while (!done_) {  // a reader is stuck in open(): be its writer, then hang up
        const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  ~FifoUnblocker() {
    done_ = true;
    thread_.join();
  }
  FifoUnblocker(const FifoUnblocker&) = delete;
  FifoUnblocker& operator=(const FifoUnblocker&) = delete;
  /// Whether mkfifo succeeded.
  bool ok() const { return ok_; }
  /// The call under test returned: stop waiting.
  void done() { done_ = true; }

 private:
  std::string path_;
  bool ok_ = false;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace strata::testing
