// The timeline recorder (core/trace.h): nothing is recorded while off; while on,
// nested slices with their arguments land on their thread's track and the written file is
// Chrome trace-event JSON that nlohmann parses, with names and durations as recorded.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include <strata/core/trace.h>
#include "tests/temp_dir_fixture.h"

namespace strata {
namespace {

class TraceTest : public strata::testing::TempDirTest {
 protected:
  void TearDown() override {
    trace::stop();
    TempDirTest::TearDown();
  }
  nlohmann::json written(int rank) {
    const std::string file = path("trace/rank" + std::to_string(rank) + ".json");
    trace::write_json(file, rank);
    std::ifstream in(file);
    return nlohmann::json::parse(in);  // throws (fails the test) unless valid JSON
  }
  // The complete ("X") events of a written trace.
  static std::vector<nlohmann::json> slices(const nlohmann::json& j) {
    std::vector<nlohmann::json> v;
    for (const auto& e : j.at("traceEvents"))
      if (e.at("ph") == "X") v.push_back(e);
    return v;
  }
};

void spin_for(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST_F(TraceTest, NothingIsRecordedWhileOff) {
  trace::start();
  trace::stop();
  EXPECT_FALSE(trace::enabled());
  {
    trace::Scope s("forward", {{"mb", 1}});
    trace::Scope t("all_reduce", trace::Cat::comm);
  }
  EXPECT_EQ(trace::event_count(), 0);
  EXPECT_TRUE(slices(written(0)).empty());
}

TEST_F(TraceTest, NestedSlicesWithArgumentsAndThreadTracks) {
  trace::set_thread_name("main");
  trace::start();
  {
    trace::Scope step("step", trace::Cat::step, {{"step", 7}});
    {
      trace::Scope f("F", {{"mb", 3}, {"stage", size_t(1)}, {"note", "a \"quoted\"\nname"}}, trace::Cat::pipeline);
      spin_for(std::chrono::microseconds(300));
    }
    std::thread comm([] {
      trace::set_thread_name("comm dp");
      trace::Scope op("all_reduce", {{"group", std::string("dp")}, {"bytes", int64_t(4096)}}, trace::Cat::comm);
      spin_for(std::chrono::microseconds(200));
    });
    comm.join();
  }
  trace::stop();
  EXPECT_EQ(trace::event_count(), 3);
  const nlohmann::json j = written(5);
  const auto v = slices(j);
  ASSERT_EQ(v.size(), 3u);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& e : v) {
    EXPECT_EQ(e.at("pid"), 5);
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    by_name[e.at("name")] = e;
  }
  const auto &step = by_name.at("step"), &f = by_name.at("F"), &op = by_name.at("all_reduce");
  EXPECT_EQ(step.at("cat"), "step");
  EXPECT_EQ(step.at("args").at("step"), 7);
  EXPECT_EQ(f.at("cat"), "pipeline");
  EXPECT_EQ(f.at("args").at("mb"), 3);
  EXPECT_EQ(f.at("args").at("stage"), 1);
  EXPECT_EQ(f.at("args").at("note"), "a \"quoted\"\nname");
  EXPECT_GE(f.at("dur").get<double>(), 300.0);  // microseconds
  EXPECT_EQ(op.at("cat"), "comm");
  EXPECT_EQ(op.at("args").at("group"), "dp");
  EXPECT_EQ(op.at("args").at("bytes"), 4096);
  // F nests inside step on the same track; the comm op is on its own track.
  EXPECT_EQ(f.at("tid"), step.at("tid"));
  EXPECT_NE(op.at("tid"), step.at("tid"));
  const double s0 = step.at("ts"), s1 = s0 + step.at("dur").get<double>();
  EXPECT_GE(f.at("ts").get<double>(), s0);
  EXPECT_LE(f.at("ts").get<double>() + f.at("dur").get<double>(), s1 + 1.0);  // 1 us: absolute-time rounding
  // Thread names as metadata, the main thread sorted first.
  std::map<int64_t, std::string> names;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") names[e.at("tid")] = e.at("args").at("name");
  EXPECT_EQ(names.at(step.at("tid")), "main");
  EXPECT_EQ(names.at(op.at("tid")), "comm dp");
}

TEST_F(TraceTest, StartClearsAndOpenSlicesAreDropped) {
  trace::start();
  { trace::Scope a("before"); }
  trace::Scope open("open across a restart");
  trace::start();  // clears "before"; "open" belongs to the old recording
  { trace::Scope b("after"); }
  open.end();
  trace::Scope still_open("never ended");
  trace::stop();
  const auto v = slices(written(0));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].at("name"), "after");
}

TEST_F(TraceTest, OpTagsAndLabels) {
  EXPECT_EQ(trace::take_op_tag().key, nullptr);
  trace::tag_next_op("bucket", 2);  // off: ignored
  EXPECT_EQ(trace::take_op_tag().key, nullptr);
  trace::start();
  trace::tag_next_op("bucket", 3);
  const trace::OpTag t = trace::take_op_tag();
  EXPECT_STREQ(t.key, "bucket");
  EXPECT_EQ(t.value, 3);
  EXPECT_EQ(trace::take_op_tag().key, nullptr);  // taken once
  const uint32_t a = trace::intern("h.0.attn"), b = trace::intern("h.0.mlp");
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(trace::intern("h.0.attn"), a);
  EXPECT_EQ(trace::label(b), "h.0.mlp");
  EXPECT_EQ(trace::current_label(), 0u);
  {
    trace::LabelScope in_a(a);
    EXPECT_EQ(trace::current_label(), a);
    {
      trace::LabelScope in_b(b);
      EXPECT_EQ(trace::current_label(), b);
    }
    EXPECT_EQ(trace::current_label(), a);
  }
  EXPECT_EQ(trace::current_label(), 0u);
  int obj = 0;
  EXPECT_EQ(trace::object_name(&obj), "");
  trace::name_object(&obj, "blocks.1");
  EXPECT_EQ(trace::object_name(&obj), "blocks.1");
}

TEST_F(TraceTest, UnwritableFileIsADataErrorNamingIt) {
  std::ofstream(path("file")) << "x";  // a file where a directory is needed
  try {
    trace::write_json(path("file/rank0.json"), 0);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("file/rank0.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
