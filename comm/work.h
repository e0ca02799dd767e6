// Work: the handle every ProcessGroup call returns. The op runs on the group's comm
// thread; wait() blocks (with a timeout) until it finished and rethrows its error.
#pragma once
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace strata::comm {

namespace detail {
/// Shared between the Work handle(s) and the comm thread that completes it.
struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::string what;       ///< "all_reduce seq 7 in group 'world' rank 2 (f32 x 1024)" for wait timeouts
  double timeout_s = 300;  ///< default wait limit (the group's comm.timeout_s)
  /// Set (once, before the Work is handed out) for an op that no comm thread runs: a
  /// point-to-point batch progressed by whoever waits on or polls it (a group with
  /// inline p2p, ProcessGroup::set_inline_p2p). Drives the op until it finished (true,
  /// finish() called) or `until` passed (false); never throws. Thread-safe.
  std::function<bool(std::chrono::steady_clock::time_point until)> progress;

  void finish(std::exception_ptr e);
};
}  // namespace detail

/// Handle on one queued communication op. Cheap to copy (shared state); thread-safe.
class Work {
 public:
  /// A handle that is already complete (what size-1 groups and no-ops return).
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> s) : s_(std::move(s)) {}

  /// True once the op finished (successfully or not); never blocks.
  bool is_completed() const;
  /// Blocks until the op finished, for at most the group's comm.timeout_s; rethrows the
  /// op's CommError. Throws CommError naming the op if the limit passes first.
  void wait() const;
  /// As wait(), with an explicit limit.
  void wait(std::chrono::duration<double> timeout) const;
  /// True if the op finished with an error (after completion).
  bool failed() const;

 private:
  std::shared_ptr<detail::WorkState> s_;
};

}  // namespace strata::comm
