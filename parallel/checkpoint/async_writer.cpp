// AsyncCheckpointWriter: host snapshot on the caller's thread, the write on one worker.
#include <strata/parallel/checkpoint/async_writer.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include <pthread.h>
#include <sched.h>

#include <strata/core/error.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {

AsyncCheckpointWriter::AsyncCheckpointWriter(std::shared_ptr<comm::ProcessGroup> group) : group_(std::move(group)) {
  STRATA_CHECK(group_ != nullptr, "[async checkpoint] needs a process group of its own");
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (worker_.joinable()) worker_.join();
}

void AsyncCheckpointWriter::start(const std::vector<ShardPiece>& pieces, Write write,
                                  ChangesInForward changes_in_forward) {
  STRATA_CHECK(!in_flight(), "[async checkpoint] a write is still in flight: finish() it first");
  const auto t0 = std::chrono::steady_clock::now();
  deferred_.clear();
  if (snapshot_.size() != pieces.size()) snapshot_.resize(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ShardPiece& p = pieces[i];
    ShardPiece& s = snapshot_[i];
    s.name = p.name;
    s.global_shape = p.global_shape;
    s.begin = p.begin;
    s.end = p.end;
    if (!p.data.defined()) {
      s.data = Tensor();
      continue;
    }
    // The buffer keeps the piece's own shape (the writer reads it in row-major order).
    if (!s.data.defined() || s.data.dtype() != p.data.dtype() || s.data.shape() != p.data.shape())
      s.data = ops::empty(p.data.shape(), p.data.dtype(), kCPU);
    if (changes_in_forward && !changes_in_forward(p) && p.data.device().is_cpu() && p.data.is_contiguous())
      deferred_.push_back({p.data.raw_data(), s.data.raw_data(), size_t(p.data.nbytes())});
    else
      ops::copy_(s.data, p.data);
  }
  snapshot_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  error_ = nullptr;
  copied_ = deferred_.empty();
  done_ = std::make_shared<std::atomic<bool>>(false);
  worker_ = std::thread([this, write = std::move(write), done = done_] {
    // The rest of the snapshot first, at normal priority (the next optimizer step waits
    // for it), plain memcpy of contiguous host memory: no thread pool, no allocation.
    if (!deferred_.empty()) {
      for (const Copy& c : deferred_) std::memcpy(c.dst, c.src, c.bytes);
      {
        std::lock_guard<std::mutex> lock(mu_);
        copied_ = true;
      }
      copied_cv_.notify_all();
    }
    // The write runs on what the step leaves idle (Linux SCHED_IDLE): on a host whose cores
    // the step keeps busy it would otherwise slow the steps it overlaps. The next checkpoint
    // and the end of the run wait for it, so it is never starved for long.
    sched_param idle{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
    try {
      write(*group_, snapshot_);
    } catch (...) {
      error_ = std::current_exception();
    }
    done->store(true, std::memory_order_release);
  });
}

void AsyncCheckpointWriter::wait_snapshot() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  copied_cv_.wait(lock, [this] { return copied_; });
  wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool AsyncCheckpointWriter::done_here() const {
  return !in_flight() || done_->load(std::memory_order_acquire);
}

void AsyncCheckpointWriter::finish() {
  if (!worker_.joinable()) return;
  worker_.join();
  if (std::exception_ptr e = std::exchange(error_, nullptr)) std::rethrow_exception(e);
}

int64_t AsyncCheckpointWriter::buffer_bytes() const {
  int64_t n = 0;
  for (const ShardPiece& s : snapshot_)
    if (s.data.defined()) n += s.data.nbytes();
  return n;
}

}  // namespace strata::parallel
