// Checkpoints written in the background: this rank's pieces are copied into host buffers,
// reused from one checkpoint to the next, and training goes on while a thread writes,
// fsyncs and commits them through the one save path (save_sharded's stage,
// exchange, commit protocol) over a group of its own, so its collectives never
// interleave with the training's. torch.distributed.checkpoint's async_save and
// torchtitan's async checkpointing work the same way: snapshot to host, write off the
// critical path, one write in flight at a time.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/parallel/checkpoint/writer.h>

namespace strata::parallel {

/// One rank's background checkpoint writer. Not thread-safe: one training thread calls it.
class AsyncCheckpointWriter {
 public:
  /// What the background thread runs: the save (collective over `group`) and whatever
  /// follows a commit. Every rank runs it with its own snapshot.
  using Write = std::function<void(comm::ProcessGroup& group, const std::vector<ShardPiece>& snapshot)>;

  /// `group`: the training's ranks, used by the background thread alone (split from the
  /// world by the caller: collective).
  explicit AsyncCheckpointWriter(std::shared_ptr<comm::ProcessGroup> group);
  /// Waits for a write in flight; its error, if any, is dropped (call finish() first).
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  /// Which pieces change before the next optimizer step (buffers a forward updates, such as
  /// BatchNorm's statistics): start() copies them at once.
  using ChangesInForward = std::function<bool(const ShardPiece&)>;

  /// Snapshots every piece's data into this rank's host buffers (reallocated only when a
  /// piece's size or dtype changes; a device tensor is copied to the host) and starts
  /// `write` on the snapshot in the background. The previous write must be finished.
  /// Pieces that `changes_in_forward` names, and those that are not contiguous host
  /// tensors, are copied before start() returns; the others (parameters and optimizer
  /// state, which only the optimizer step changes) by the background thread first, while
  /// the next step's forward and backward run: call wait_snapshot() before anything
  /// changes them. Without `changes_in_forward` everything is copied at once.
  void start(const std::vector<ShardPiece>& pieces, Write write, ChangesInForward changes_in_forward = nullptr);
  /// Blocks until the snapshot of the write in flight is complete (at once when none is
  /// in flight or everything was copied by start()).
  void wait_snapshot();
  /// A write was started and not yet finished.
  bool in_flight() const { return worker_.joinable(); }
  /// The write in flight has ended on this rank (true when none is in flight).
  bool done_here() const;
  /// Waits for the write in flight, then rethrows its error, if it failed. No-op when
  /// none is in flight.
  void finish();
  /// Bytes of the host buffers held between checkpoints.
  int64_t buffer_bytes() const;
  /// Seconds the last start() spent copying (what the step waited for).
  double last_snapshot_s() const { return snapshot_s_; }
  /// Seconds the last wait_snapshot() blocked for (the background copy not yet done).
  double last_snapshot_wait_s() const { return wait_s_; }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  std::vector<ShardPiece> snapshot_;  // the pieces, their data in the reused buffers
  std::thread worker_;
  std::shared_ptr<std::atomic<bool>> done_;
  std::exception_ptr error_;
  double snapshot_s_ = 0.0, wait_s_ = 0.0;
  // The copies the worker makes before it writes: (source, destination, bytes).
  struct Copy {
    const void* src;
    void* dst;
    size_t bytes;
  };
  std::vector<Copy> deferred_;
  std::mutex mu_;
  std::condition_variable copied_cv_;
  bool copied_ = true;
};

}  // namespace strata::parallel
