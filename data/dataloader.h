// DataLoader: cuts a sampler's epoch order into batches, builds them on a background
// thread while the training step runs, and can resume at any (epoch, batch) with the
// identical batch sequence.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <strata/data/dataset.h>
#include <strata/data/sampler.h>

namespace strata::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  /// Drop the last incomplete batch of each epoch.
  bool drop_last = false;
  /// Batches built ahead on the worker thread (queue depth); 0 builds each batch
  /// synchronously inside next().
  int64_t prefetch = 2;
};

/// Position of the next thing next() returns: batch `batch` of epoch `epoch`
/// (batch == batches_per_epoch() means the end-of-epoch nullopt comes next).
struct LoaderState {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const LoaderState&) const = default;
};

/// Iterates batches of `dataset` in the order of `sampler`. Batch k of epoch e holds
/// dataset samples sampler.indices_for_epoch(e)[k*B, min((k+1)*B, n)).
///
///   DataLoader loader(ds, sampler, {.batch_size = 64}, resume_state);
///   for (int64_t e = loader.epoch(); e < epochs; ++e) {
///     loader.set_epoch(e);                          // no-op when already in epoch e
///     while (auto b = loader.next()) step(b->input, b->target);
///   }
///
/// After an epoch's last batch, next() returns nullopt once and moves to batch 0 of
/// the next epoch; the worker keeps building ahead across that boundary. An exception
/// thrown while building a batch (on the worker) is rethrown by the next() that would
/// have returned it; calling next() again retries that batch. Not thread-safe: one
/// consumer thread. The destructor stops the worker without waiting for the consumer
/// (it waits at most for the one batch being built).
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler, DataLoaderOptions opts = {},
             LoaderState start = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// The next batch of the current epoch, or nullopt at its end (then the epoch advances).
  std::optional<Batch> next();
  /// Start epoch `epoch` at its first batch, unless the loader is already in that
  /// epoch (then its position is kept, so a resumed loader is not rewound). Also
  /// sets the sampler's epoch.
  void set_epoch(int64_t epoch);
  /// Continue exactly at `state` (as returned by state()).
  void seek(LoaderState state);
  /// Where the loader stands: what a checkpoint stores to resume.
  LoaderState state() const { return state_; }
  int64_t epoch() const { return state_.epoch; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const DataLoaderOptions& options() const { return opts_; }

 private:
  struct Item {
    LoaderState pos;
    std::optional<Batch> batch;  // nullopt: end of epoch
    std::exception_ptr error;
  };
  /// Builds the item at `pos`, refreshing `order`/`order_epoch` when the epoch changes.
  Item build(LoaderState pos, std::vector<int64_t>& order, int64_t& order_epoch) const;
  static LoaderState after(LoaderState pos, int64_t batches_per_epoch);
  void start_worker();
  void stop_worker();
  void worker_loop(LoaderState pos);

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<Sampler> sampler_;
  DataLoaderOptions opts_;
  int64_t batches_per_epoch_ = 0;
  LoaderState state_;

  // Synchronous mode: cached order of state_.epoch.
  std::vector<int64_t> sync_order_;
  int64_t sync_order_epoch_ = -1;

  // Prefetch mode.
  std::thread worker_;
  bool worker_running_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
};

}  // namespace strata::data
