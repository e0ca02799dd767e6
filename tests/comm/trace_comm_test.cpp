// Tracing in the comm layer: each collective is a "comm" slice on its group's comm thread
// (a track named "comm <group>", not the caller's), with the group, the payload bytes and
// the bucket the caller tagged; nothing is recorded while tracing is off.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include <strata/comm/local.h>
#include <strata/core/trace.h>
#include <strata/tensor/ops.h>

namespace strata::comm {
namespace {

void all_reduce_on_every_rank(const std::vector<std::shared_ptr<ProcessGroup>>& world) {
  std::vector<std::thread> ts;
  for (const auto& g : world)
    ts.emplace_back([g] {
      Tensor t = ops::full({4}, double(g->rank() + 1), DType::f32);
      trace::tag_next_op("bucket", 5);
      g->all_reduce(t).wait();
      for (int i = 0; i < 4; ++i) EXPECT_EQ(t.data<float>()[i], 3.0f);
    });
  for (auto& t : ts) t.join();
}

TEST(TraceComm, CollectivesOnTheCommThreadTrack) {
  auto world = make_local_world(2);
  all_reduce_on_every_rank(world);  // untraced
  EXPECT_EQ(trace::event_count(), 0);
  trace::start();
  all_reduce_on_every_rank(world);
  trace::stop();
  const nlohmann::json j = nlohmann::json::parse(trace::to_json(0));
  std::map<int64_t, std::string> thread_names;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") thread_names[e.at("tid")] = e.at("args").at("name");
  std::set<int64_t> comm_tids;
  int ops = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("cat") != "comm") continue;
    ++ops;
    EXPECT_EQ(e.at("name"), "all_reduce");
    EXPECT_EQ(e.at("args").at("bytes"), 16);
    EXPECT_EQ(e.at("args").at("bucket"), 5);
    EXPECT_EQ(e.at("args").at("group"), world[0]->name());
    EXPECT_EQ(thread_names.at(e.at("tid")), "comm " + world[0]->name());
    comm_tids.insert(e.at("tid").get<int64_t>());
  }
  EXPECT_EQ(ops, 2);
  EXPECT_EQ(comm_tids.size(), 2u);  // each rank's group has its own comm thread
}

}  // namespace
}  // namespace strata::comm
