// DataLoader: a single producer thread fills a bounded queue with the items at
// consecutive positions; the consumer pops them in order, so the sequence is the one
// synchronous iteration would give.
#include <strata/data/dataloader.h>

#include <algorithm>

#include <strata/core/error.h>

namespace strata::data {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
                       DataLoaderOptions opts, LoaderState start)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), opts_(opts) {
  STRATA_CHECK(dataset_ != nullptr, "[DataLoader] dataset is null");
  STRATA_CHECK(sampler_ != nullptr, "[DataLoader] sampler is null");
  STRATA_CHECK(opts_.batch_size > 0, "[DataLoader] batch_size must be positive, got ", opts_.batch_size);
  STRATA_CHECK(opts_.prefetch >= 0, "[DataLoader] prefetch must be >= 0, got ", opts_.prefetch);
  const int64_t n = sampler_->size();
  batches_per_epoch_ = opts_.drop_last ? n / opts_.batch_size : (n + opts_.batch_size - 1) / opts_.batch_size;
  seek(start);
}

DataLoader::~DataLoader() { stop_worker(); }

LoaderState DataLoader::after(LoaderState pos, int64_t batches_per_epoch) {
  return pos.batch >= batches_per_epoch ? LoaderState{pos.epoch + 1, 0} : LoaderState{pos.epoch, pos.batch + 1};
}

DataLoader::Item DataLoader::build(LoaderState pos, std::vector<int64_t>& order, int64_t& order_epoch) const {
  Item item{pos, std::nullopt, nullptr};
  if (pos.batch >= batches_per_epoch_) return item;
  try {
    if (order_epoch != pos.epoch) {
      order_epoch = -1;
      order = sampler_->indices_for_epoch(pos.epoch);
      STRATA_CHECK(int64_t(order.size()) == sampler_->size(), "[DataLoader] sampler returned ", order.size(),
                   " indices for epoch ", pos.epoch, " but its size() is ", sampler_->size());
      order_epoch = pos.epoch;
    }
    const int64_t b0 = pos.batch * opts_.batch_size;
    const int64_t b1 = std::min<int64_t>(b0 + opts_.batch_size, int64_t(order.size()));
    const std::vector<int64_t> idx(order.begin() + b0, order.begin() + b1);
    item.batch = dataset_->get_batch(idx);
  } catch (...) {
    item.error = std::current_exception();
  }
  return item;
}

void DataLoader::worker_loop(LoaderState pos) {
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || int64_t(queue_.size()) < opts_.prefetch; });
      if (stop_) return;
    }
    Item item = build(pos, order, order_epoch);
    const bool failed = item.error != nullptr;
    {
      std::lock_guard lk(mu_);
      if (stop_) return;
      queue_.push_back(std::move(item));
    }
    cv_.notify_all();
    if (failed) return;  // the consumer rethrows, then restarts us at the same position
    pos = after(pos, batches_per_epoch_);
  }
}

void DataLoader::start_worker() {
  {
    std::lock_guard lk(mu_);
    stop_ = false;
    queue_.clear();
  }
  worker_ = std::thread([this, pos = state_] { worker_loop(pos); });
  worker_running_ = true;
}

void DataLoader::stop_worker() {
  if (!worker_running_) return;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  worker_running_ = false;
  queue_.clear();
}

std::optional<Batch> DataLoader::next() {
  Item item;
  if (opts_.prefetch == 0) {
    item = build(state_, sync_order_, sync_order_epoch_);
  } else {
    if (!worker_running_) start_worker();
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !queue_.empty(); });
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    cv_.notify_all();
    if (item.error) stop_worker();  // it has exited; the next call starts it again here
  }
  if (item.error) std::rethrow_exception(item.error);
  STRATA_CHECK(item.pos == state_, "[DataLoader] internal: got the item of epoch ", item.pos.epoch, " batch ",
               item.pos.batch, " at epoch ", state_.epoch, " batch ", state_.batch);
  state_ = after(state_, batches_per_epoch_);
  if (item.batch) return std::move(item.batch);
  sampler_->set_epoch(state_.epoch);
  return std::nullopt;
}

void DataLoader::seek(LoaderState state) {
  STRATA_CHECK(state.epoch >= 0 && state.batch >= 0 && state.batch <= batches_per_epoch_,
               "[DataLoader] cannot seek to epoch ", state.epoch, " batch ", state.batch, ": an epoch has ",
               batches_per_epoch_, " batches");
  sampler_->set_epoch(state.epoch);
  if (worker_running_ && state == state_) return;  // the queue already holds what comes next
  stop_worker();
  state_ = state;
  // Start building right away so the first batches overlap with the caller's setup.
  if (opts_.prefetch > 0) start_worker();
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch == state_.epoch) {
    sampler_->set_epoch(epoch);
    return;
  }
  seek({epoch, 0});
}

}  // namespace strata::data
