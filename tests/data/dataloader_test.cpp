// DataLoader: prefetching gives the same batch sequence as synchronous building and
// as slicing the sampler's order by hand; resume/seek; shutdown; worker exceptions.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <strata/data/dataloader.h>
#include <strata/data/synthetic.h>

using namespace strata;
using namespace strata::data;

namespace {

struct Seen {
  LoaderState pos;
  std::vector<float> x;
  std::vector<int64_t> y;
  bool operator==(const Seen&) const = default;
};

/// Pulls `count` items (end-of-epoch markers included, with empty x/y) from `loader`.
std::vector<Seen> pull(DataLoader& loader, int count) {
  std::vector<Seen> out;
  for (int i = 0; i < count; ++i) {
    const LoaderState pos = loader.state();
    auto b = loader.next();
    if (b) out.push_back({pos, b->input.to_vector<float>(), b->target.to_vector<int64_t>()});
    else out.push_back({pos, {}, {}});
  }
  return out;
}

std::shared_ptr<SyntheticClassification> small_set(int64_t n = 50) {
  return std::make_shared<SyntheticClassification>(
      SyntheticClassificationOptions{.size = n, .sample_shape = {6}, .num_classes = 3, .seed = 11});
}

/// A dataset that sleeps in get_batch and can be told to throw on one index.
class SlowDataset : public Dataset {
 public:
  explicit SlowDataset(int64_t n, int sleep_ms = 0) : inner_(small_set(n)), sleep_ms_(sleep_ms) {}
  int64_t size() const override { return inner_->size(); }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    ++calls;
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    for (int64_t i : indices)
      if (i == poison.load()) throw DataError("poisoned sample " + std::to_string(i));
    return inner_->get_batch(indices);
  }
  mutable std::atomic<int64_t> calls{0};
  std::atomic<int64_t> poison{-1};

 private:
  std::shared_ptr<SyntheticClassification> inner_;
  int sleep_ms_;
};

}  // namespace

TEST(DataLoader, PrefetchedSequenceEqualsSynchronousAndManual) {
  auto ds = small_set(50);
  auto sampler = std::make_shared<RandomSampler>(50, 3);
  DataLoader pre(ds, sampler, {.batch_size = 8, .prefetch = 2});
  DataLoader sync(ds, std::make_shared<RandomSampler>(50, 3), {.batch_size = 8, .prefetch = 0});
  EXPECT_EQ(pre.batches_per_epoch(), 7);  // 6 full + one of 2
  const int items = 3 * 8;                // three epochs of 7 batches + the end marker
  auto a = pull(pre, items), b = pull(sync, items);
  EXPECT_EQ(a, b);
  // Manual reference: slice each epoch's order and call get_batch directly.
  RandomSampler ref(50, 3);
  size_t k = 0;
  for (int64_t e = 0; e < 3; ++e) {
    const auto order = ref.indices_for_epoch(e);
    for (int64_t bi = 0; bi < 7; ++bi, ++k) {
      std::vector<int64_t> idx(order.begin() + bi * 8, order.begin() + std::min<int64_t>(bi * 8 + 8, 50));
      Batch want = ds->get_batch(idx);
      EXPECT_EQ((LoaderState{e, bi}), a[k].pos);
      EXPECT_EQ(a[k].x, want.input.to_vector<float>()) << "epoch " << e << " batch " << bi;
      EXPECT_EQ(a[k].y, want.target.to_vector<int64_t>());
    }
    EXPECT_TRUE(a[k].x.empty()) << "end of epoch " << e;
    EXPECT_EQ(a[k].pos, (LoaderState{e, 7}));
    ++k;
  }
  EXPECT_EQ(pre.state(), (LoaderState{3, 0}));
  EXPECT_EQ(sampler->epoch(), 3);
}

TEST(DataLoader, DropLastAndTypicalLoop) {
  auto ds = small_set(50);
  DataLoader loader(ds, std::make_shared<SequentialSampler>(50), {.batch_size = 8, .drop_last = true});
  EXPECT_EQ(loader.batches_per_epoch(), 6);
  for (int64_t e = 0; e < 2; ++e) {
    loader.set_epoch(e);
    int64_t n = 0, samples = 0;
    while (auto b = loader.next()) {
      EXPECT_EQ(b->size(), 8);
      samples += b->size();
      ++n;
    }
    EXPECT_EQ(n, 6);
    EXPECT_EQ(samples, 48);
  }
  DataLoader all(ds, std::make_shared<SequentialSampler>(50), {.batch_size = 64});
  auto b = all.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->size(), 50);
  EXPECT_FALSE(all.next());
}

TEST(DataLoader, ResumeMidEpochGivesIdenticalRemainingBatches) {
  auto ds = small_set(45);
  for (int64_t prefetch : {0, 2, 5}) {
    DataLoader full(ds, std::make_shared<RandomSampler>(45, 8), {.batch_size = 4, .prefetch = prefetch});
    auto head = pull(full, 7);  // 7 of epoch 0's 12 batches
    const LoaderState saved = full.state();
    EXPECT_EQ(saved, (LoaderState{0, 7}));
    auto rest = pull(full, 20);  // rest of epoch 0, its end, and into epoch 1

    DataLoader resumed(ds, std::make_shared<RandomSampler>(45, 8), {.batch_size = 4, .prefetch = prefetch}, saved);
    resumed.set_epoch(0);  // the usual loop calls this: must not rewind
    EXPECT_EQ(pull(resumed, 20), rest) << "prefetch " << prefetch;

    // seek on a running loader, backwards and forwards.
    resumed.seek(saved);
    EXPECT_EQ(pull(resumed, 20), rest);
    resumed.seek({0, 0});
    EXPECT_EQ(pull(resumed, 7), head);
    resumed.set_epoch(1);
    EXPECT_EQ(resumed.state(), (LoaderState{1, 0}));
    EXPECT_EQ(pull(resumed, 3), std::vector<Seen>(rest.begin() + 6, rest.begin() + 9));
    EXPECT_THROW(resumed.seek({0, 13}), Error);
  }
}

TEST(DataLoader, DestroyingMidEpochDoesNotHang) {
  auto ds = std::make_shared<SlowDataset>(200, 20);
  const auto t0 = std::chrono::steady_clock::now();
  {
    DataLoader loader(ds, std::make_shared<SequentialSampler>(200), {.batch_size = 4, .prefetch = 2});
    ASSERT_TRUE(loader.next());
    ASSERT_TRUE(loader.next());
  }  // worker is blocked on a full queue or inside get_batch
  {
    DataLoader never_read(ds, std::make_shared<SequentialSampler>(200), {.batch_size = 4, .prefetch = 3});
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 2.0);
  // The worker built at most prefetch batches beyond what was consumed (plus one in flight).
  EXPECT_LE(ds->calls.load(), 2 + 2 + 1 + 3 + 1);
}

TEST(DataLoader, WorkerExceptionReachesConsumerAndRetries) {
  for (int64_t prefetch : {0, 2}) {
    auto ds = std::make_shared<SlowDataset>(40);
    ds->poison = 13;  // in batch 3 (indices 12..15) of a sequential order
    DataLoader loader(ds, std::make_shared<SequentialSampler>(40), {.batch_size = 4, .prefetch = prefetch});
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader.next()) << i;
    try {
      loader.next();
      FAIL() << "expected the worker's exception";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("poisoned sample 13"), std::string::npos);
    }
    EXPECT_EQ(loader.state(), (LoaderState{0, 3}));
    EXPECT_THROW(loader.next(), DataError);  // still failing: retried, thrown again
    ds->poison = -1;
    auto b = loader.next();  // retry now succeeds at the same position
    ASSERT_TRUE(b);
    EXPECT_EQ(b->input.to_vector<float>(), ds->get_batch({12, 13, 14, 15}).input.to_vector<float>());
    EXPECT_EQ(loader.state(), (LoaderState{0, 4}));
  }
}
