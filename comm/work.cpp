// Completion and timed waiting for Work handles.
#include <strata/comm/work.h>

#include <cstdio>

#include <strata/core/error.h>
#include <strata/core/trace.h>

namespace strata::comm {

void detail::WorkState::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lk(mu);
    error = std::move(e);
    done = true;
  }
  cv.notify_all();
}

bool Work::is_completed() const {
  if (!s_) return true;
  {
    std::lock_guard<std::mutex> lk(s_->mu);
    if (s_->done || !s_->progress) return s_->done;
  }
  return s_->progress(std::chrono::steady_clock::now());  // one poll of an inline op
}

bool Work::failed() const {
  if (!s_) return false;
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->done && s_->error != nullptr;
}

void Work::wait() const {
  if (!s_) return;
  wait(std::chrono::duration<double>(s_->timeout_s));
}

void Work::wait(std::chrono::duration<double> timeout) const {
  if (!s_) return;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  std::unique_lock<std::mutex> lk(s_->mu);
  trace::Scope blocked;  // tracing: time spent blocked on an op not yet done
  if (trace::enabled() && !s_->done) blocked.begin("wait", {{"op", s_->what}}, trace::Cat::wait);
  if (!s_->done && s_->progress) {
    // No comm thread runs this op: this thread progresses it (another may be doing so
    // already, then progress() returns at `until` or once that one finished it).
    lk.unlock();
    s_->progress(until);
    lk.lock();
  }
  if (!s_->cv.wait_until(lk, until, [&] { return s_->done; })) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", timeout.count());
    STRATA_THROW(CommError, "[comm] wait timed out after ", secs, " s on ", s_->what,
                 s_->progress ? " (the op is still in flight)" : " (the op is still queued or running on the comm thread)");
  }
  if (s_->error) std::rethrow_exception(s_->error);
}

}  // namespace strata::comm
