// The background checkpoint writer's snapshot is the state at start(): the buffers a
// forward updates are copied before start() returns, the parameters and optimizer state
// by the writer thread before wait_snapshot() returns, so what changes after either of
// those never reaches the checkpoint.
#include <gtest/gtest.h>

#include <future>

#include <strata/comm/local.h>
#include <strata/parallel/checkpoint/async_writer.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {
namespace {

TEST(AsyncCheckpointWriter, TheSnapshotIsTheStateAtStartWhateverChangesAfterItsFences) {
  comm::run_local(1, [](comm::ProcessGroup& g) {
    for (const bool deferred : {true, false}) {
      AsyncCheckpointWriter w(std::shared_ptr<comm::ProcessGroup>(&g, [](comm::ProcessGroup*) {}));
      Tensor param = ops::full({1 << 20}, 1.0), stats = ops::full({16}, 2.0);
      const std::vector<ShardPiece> pieces{{"w", {1 << 20}, 0, 1 << 20, param}, {"bn.running_mean", {16}, 0, 16, stats}};
      std::promise<void> changed;
      std::shared_future<void> go = changed.get_future().share();
      std::vector<float> seen_w, seen_b;
      w.start(
          pieces,
          [&, go](comm::ProcessGroup&, const std::vector<ShardPiece>& snap) {
            go.wait();  // write only after the training has changed everything
            seen_w = snap[0].data.to_vector<float>();
            seen_b = snap[1].data.to_vector<float>();
          },
          deferred ? AsyncCheckpointWriter::ChangesInForward(
                         [](const ShardPiece& p) { return p.name == "bn.running_mean"; })
                   : nullptr);
      ops::fill_(stats, 5.0);  // the next forward updates the statistics at once
      w.wait_snapshot();       // the optimizer step's fence
      ops::fill_(param, 3.0);  // the optimizer step
      changed.set_value();
      w.finish();
      ASSERT_EQ(seen_w.size(), size_t(1 << 20));
      for (float v : seen_w) ASSERT_EQ(v, 1.0f) << (deferred ? "deferred" : "at once");
      for (float v : seen_b) ASSERT_EQ(v, 2.0f) << (deferred ? "deferred" : "at once");
    }
  });
}

}  // namespace
}  // namespace strata::parallel
