// Tracing through nn and autograd: every module called through operator() gets a
// "forward <dotted name>" slice, and the backward pass one slice per run of nodes that a
// module's forward created ("backward <name>"), nested in the "backward" pass slice.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/core/trace.h>
#include <strata/nn/mlp.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

TEST(TraceModules, ForwardAndBackwardSlicesPerModule) {
  Generator gen(3);
  auto mlp = std::make_shared<nn::MLP>(nn::MLPConfig{.input = 8, .hidden = {16}, .classes = 4}, gen);
  for (const auto& [name, m] : mlp->named_modules())
    if (!name.empty()) trace::name_object(m.get(), name);
  const Tensor x = ops::normal({5, 8}, 0, 1, gen);
  backward(sum((*mlp)(x)));  // untraced: records nothing
  EXPECT_EQ(trace::event_count(), 0);
  trace::start();
  backward(sum((*mlp)(x)));
  trace::stop();
  const nlohmann::json j = nlohmann::json::parse(trace::to_json(0));
  std::map<std::string, std::pair<double, double>> slices;  // name -> [ts, ts + dur]
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "X") {
      EXPECT_EQ(e.at("cat"), "compute");
      EXPECT_FALSE(slices.count(e.at("name"))) << e.at("name");  // each once (one forward, one backward)
      const double ts = e.at("ts");
      slices[e.at("name")] = {ts, ts + e.at("dur").get<double>()};
    }
  // MLP = net (Sequential: 0 Flatten, 1 Linear, 2 ReLU, 3 Linear); the root is named by type.
  for (const char* name : {"forward MLP", "forward net", "forward net.1", "forward net.2", "forward net.3",
                           "backward", "backward net.1", "backward net.3", "backward (no module)"})
    EXPECT_TRUE(slices.count(name)) << name;
  ASSERT_TRUE(slices.count("backward") && slices.count("backward net.1") && slices.count("backward net.3"));
  const auto pass = slices["backward"];
  for (const char* inner : {"backward net.1", "backward net.3"}) {
    EXPECT_GE(slices[inner].first, pass.first - 1.0) << inner;  // 1 us: absolute-time rounding
    EXPECT_LE(slices[inner].second, pass.second + 1.0) << inner;
  }
  EXPECT_LT(slices["backward net.3"].first, slices["backward net.1"].first);  // reverse order of forward
  EXPECT_LT(slices["forward net.1"].first, slices["forward net.3"].first);
}

}  // namespace
}  // namespace strata
