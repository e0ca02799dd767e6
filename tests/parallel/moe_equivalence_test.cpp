// Mixture-of-experts layouts train the same model as one process, on local ranks: k AdamW
// steps give the single process's losses and parameters (experts gathered from their ep
// ranks) to 1e-5, for expert parallelism alone (ep 2, 4), with DDP and ZeRO-1/3 over the
// rest, with pipeline stages and tensor parallelism, dropless and with capacity, for the
// GPT and the Llama family. The routing is exact: the tokens per expert and the dropped
// assignments summed over the ranks are one process's.
#include <gtest/gtest.h>

#include <set>

#include <strata/nn/moe.h>
#include <strata/parallel/expert/expert_parallel.h>

#include "threed_harness.h"

using namespace strata;
using namespace strata::testing::threed;

namespace {

constexpr double kTol = 1e-5;

// Tokens per expert (and drops) of every MoE layer of `model` in its last step, by layer path.
std::map<std::string, nn::MoEStats> stats(nn::Module& model) {
  std::map<std::string, nn::MoEStats> out;
  for (auto& [path, moe] : nn::moe_layers(model)) out[path] = moe->take_stats();
  return out;
}

// Tokens per expert of every MoE layer summed over the ranks of tp coordinate 0, by layer.
using Routed = std::map<std::string, std::vector<int64_t>>;

Routed check(const Case& c) {
  SCOPED_TRACE(c.str());
  // The reference, with the routing of its last step.
  Run want;
  std::map<std::string, nn::MoEStats> want_stats;
  {
    auto model = model_of(c);
    auto opt = strata::testing::tp::gpt_reference_steps(*model, c.steps - 1, c.batch, c.clip, want.losses, want.norms);
    (void)stats(*model);
    auto [x, y] = strata::testing::make_batch("gpt", c.batch, c.steps - 1);
    Tensor loss = strata::testing::batch_loss(*model, x, y);
    want.losses.push_back(loss.item<double>());
    backward(loss);
    if (c.clip > 0) want.norms.push_back(optim::clip_grad_norm(model->parameters(), c.clip));
    opt->step();
    opt->zero_grad();
    want_stats = stats(*model);
    want.params = model->named_parameters();
  }
  std::vector<Run> got(size_t(c.world()));
  std::vector<std::map<std::string, nn::MoEStats>> got_stats(size_t(c.world()));
  std::vector<int> tp_rank(size_t(c.world()));
  comm::run_local(c.world(), [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto pm = build(w, c);
    Case before = c;
    before.steps = c.steps - 1;
    Run r = before.steps > 0 ? train(*pm, before) : Run{};
    (void)stats(pm->module());
    Case last = c;
    last.first = c.steps - 1;
    Run tail = train(*pm, last);
    got_stats[size_t(g.rank())] = stats(pm->module());
    tp_rank[size_t(g.rank())] = pm->mesh().rank("tp");
    r.losses.insert(r.losses.end(), tail.losses.begin(), tail.losses.end());
    r.norms.insert(r.norms.end(), tail.norms.begin(), tail.norms.end());
    r.params = std::move(tail.params);
    expect_match(r.params, want.params, pm->tp(), kTol, c.str() + " rank " + std::to_string(g.rank()));
    got[size_t(g.rank())] = std::move(r);
  });
  for (int r = 0; r < c.world(); ++r) expect_losses(got[size_t(r)], want, c, kTol, c.str() + " rank " + std::to_string(r));
  // Routing: per layer, the tokens per expert and the drops of the last step, summed over
  // the ranks of one tp coordinate (tp ranks route the same tokens), are one process's.
  Routed routed;
  for (const auto& [path, ws] : want_stats) {
    std::vector<int64_t> tokens(ws.tokens.size(), 0);
    int64_t dropped = 0;
    for (int r = 0; r < c.world(); ++r) {
      if (tp_rank[size_t(r)] != 0 || !got_stats[size_t(r)].count(path)) continue;
      const nn::MoEStats& s = got_stats[size_t(r)].at(path);
      for (size_t e = 0; e < tokens.size(); ++e) tokens[e] += s.tokens[e];
      dropped += s.dropped;
    }
    EXPECT_EQ(tokens, ws.tokens) << path;
    EXPECT_EQ(dropped, ws.dropped) << path;
    routed[path] = tokens;
  }
  return routed;
}

}  // namespace

TEST(MoEEquivalence, ExpertParallelAloneEp2AndEp4) {
  check({.dp = 2, .tp = 1, .pp = 1, .experts = 4, .ep = 2});
  check({.dp = 4, .tp = 1, .pp = 1, .clip = 0.05, .experts = 4, .ep = 4});
}

TEST(MoEEquivalence, ExpertParallelWithDdpAndZeroOverTheRest) {
  check({.dp = 4, .tp = 1, .pp = 1, .zero = 0, .clip = 0.05, .experts = 4, .ep = 2});
  check({.dp = 4, .tp = 1, .pp = 1, .zero = 1, .clip = 0.05, .experts = 4, .ep = 2});
  check({.dp = 4, .tp = 1, .pp = 1, .zero = 3, .experts = 4, .ep = 2});
}

TEST(MoEEquivalence, ExpertParallelWithPipelineAndTensorParallel) {
  check({.dp = 2, .tp = 1, .pp = 2, .m = 2, .experts = 4, .ep = 2});
  check({.dp = 2, .tp = 2, .pp = 1, .clip = 0.05, .experts = 4, .ep = 2});
}

TEST(MoEEquivalence, CapacityDropsAreOneProcesssDrops) {
  check({.dp = 2, .tp = 1, .pp = 1, .experts = 4, .ep = 2, .capacity = 0.6});
  check({.dp = 1, .tp = 1, .pp = 2, .m = 2, .experts = 4, .ep = 1, .capacity = 0.6});
}

// Shared experts run while the routed rows travel to their experts (under ep), or after.
TEST(MoEEquivalence, SharedExpertsOverlappingTheDispatch) {
  check({.dp = 2, .tp = 1, .pp = 1, .experts = 4, .ep = 2, .shared = 1});
  check({.dp = 2, .tp = 1, .pp = 1, .experts = 4, .ep = 2, .shared = 1, .overlap = false});
  check({.family = "llama", .dp = 4, .tp = 1, .pp = 1, .zero = 1, .tied = false, .experts = 4, .ep = 4, .shared = 1});
}

TEST(MoEEquivalence, LlamaFamily) {
  check({.family = "llama", .dp = 2, .tp = 1, .pp = 1, .tied = false, .experts = 4, .ep = 2});
  check({.family = "llama", .dp = 2, .tp = 1, .pp = 1, .zero = 3, .tied = false, .experts = 4, .ep = 2});
}


// Hostile routing: zero routers tie every expert, so every token goes to the lowest ones:
// with top_k 1 all to expert 0; with top_k 2 to experts 0 and 1, so experts 2 and 3 and
// the ep rank holding them receive no token. Both train as one process does.
TEST(MoEEquivalence, HostileRoutingEveryTokenToOneExpertAndARankWithNone) {
  const Routed one = check({.dp = 2, .tp = 1, .pp = 1, .steps = 1, .experts = 4, .ep = 2, .top_k = 1, .zero_router = true});
  for (const auto& [path, t] : one) EXPECT_EQ(t, (std::vector<int64_t>{128, 0, 0, 0})) << path;
  const Routed two = check({.dp = 4, .tp = 1, .pp = 1, .zero = 3, .steps = 1, .experts = 4, .ep = 2, .zero_router = true});
  for (const auto& [path, t] : two) EXPECT_EQ(t, (std::vector<int64_t>{128, 128, 0, 0})) << path;
  // Then training moves the routers off the tie, still as one process does.
  check({.dp = 2, .tp = 1, .pp = 1, .steps = 3, .experts = 4, .ep = 2, .zero_router = true});
}
