// ConfigNode: typed reads, errors naming key path and line, the unknown-key check with
// suggestions, range/enum checks and --set overrides.
#include <strata/core/config.h>

#include <gtest/gtest.h>

#include "tests/apps/config_error.h"

namespace strata {
namespace {

const char* kYaml = R"(run:
  dir: runs/x
  seed: 3
train:
  lr: abc
  batch_size: 128
  betas: [0.9, 0.999]
  hidden: [256, x]
  use_bn: true
model:
  type: mlp
  lerning_rate: 0.1
)";

TEST(ConfigTest, ReadsTypedValuesAndDefaults) {
  auto root = ConfigNode::load_string(kYaml);
  auto run = root.child("run");
  EXPECT_EQ(run.get<std::string>("dir", ""), "runs/x");
  EXPECT_EQ(run.get<int>("seed", 0), 3);
  EXPECT_EQ(run.get<int>("threads", 7), 7);  // absent -> default
  auto train = root.child("train");
  EXPECT_EQ(train.get<int64_t>("batch_size", 0), 128);
  EXPECT_EQ(train.get<std::vector<double>>("betas", {}), (std::vector<double>{0.9, 0.999}));
  EXPECT_TRUE(train.get<bool>("use_bn", false));
  EXPECT_EQ(train.path(), "train");
  EXPECT_EQ(train.key_path("lr"), "train.lr");
  auto missing = root.child("parallel");  // absent section: defaults everywhere
  EXPECT_EQ(missing.get<std::string>("mode", "none"), "none");
}

TEST(ConfigTest, WrongTypeNamesKeyPathValueAndLine) {
  auto train = ConfigNode::load_string(kYaml).child("train");
  EXPECT_EQ(config_error([&] { train.get<double>("lr", 0.1); }), "train.lr: expected a number, got 'abc' (line 5)");
  EXPECT_EQ(config_error([&] { train.get<int>("betas", 0); }), "train.betas: expected an integer, got a list (line 7)");
  EXPECT_EQ(config_error([&] { train.get<std::vector<int>>("hidden", {}); }),
            "train.hidden[1]: expected an integer, got 'x' (line 8)");
  EXPECT_EQ(config_error([&] { ConfigNode::load_string(kYaml).child("run").child("dir"); }),
            "run.dir: expected a mapping, got 'runs/x' (line 2)");
}

TEST(ConfigTest, RequireNamesTheMissingKey) {
  auto run = ConfigNode::load_string(kYaml).child("run");
  const std::string msg = config_error([&] { run.require<int>("epochs"); });
  EXPECT_NE(msg.find("run.epochs: required key is missing"), std::string::npos) << msg;
  EXPECT_EQ(run.require<int>("seed"), 3);
}

TEST(ConfigTest, UnknownKeySuggestsClosestKnownKey) {
  auto root = ConfigNode::load_string(kYaml);
  auto run = root.child("run");
  run.get<std::string>("dir", "");
  run.get<int>("seed", 0);
  auto train = root.child("train");
  for (const char* k : {"lr", "batch_size", "betas", "hidden", "use_bn"}) train.has(k);
  auto model = root.child("model");
  model.get<std::string>("type", "");
  model.get<double>("learning_rate", 0.1);  // asked but absent: still a known key
  EXPECT_EQ(config_error([&] { root.check_unknown_keys(); }),
            "model.lerning_rate: unknown key; did you mean 'model.learning_rate'? (line 12)");
}

TEST(ConfigTest, UnknownTopLevelSectionIsReported) {
  auto root = ConfigNode::load_string("run: {seed: 1}\ntrian: {lr: 1}\n");
  root.child("run").get<int>("seed", 0);
  root.child("train");
  EXPECT_EQ(config_error([&] { root.check_unknown_keys(); }), "trian: unknown key; did you mean 'train'? (line 2)");
}

TEST(ConfigTest, AllKnownKeysPass) {
  auto root = ConfigNode::load_string("a: {b: 1, c: [1, 2]}\nd: x\n");
  root.child("a").get<int>("b", 0);
  root.child("a").get<std::vector<int>>("c", {});
  root.get<std::string>("d", "");
  EXPECT_NO_THROW(root.check_unknown_keys());
}

TEST(ConfigTest, RangeAndOneOf) {
  auto root = ConfigNode::load_string("optim: {lr: -0.5, name: adamm}\n");
  auto o = root.child("optim");
  const double lr = o.get<double>("lr", 0.1);
  EXPECT_EQ(config_error([&] { o.check_range("lr", lr, 0.0, 10.0, true); }),
            "optim.lr: expected a value in (0, 10], got -0.5 (line 1)");
  EXPECT_NO_THROW(o.check_range("lr", 0.5, 0.0, 10.0, true));
  EXPECT_EQ(config_error([&] { o.one_of("name", o.get<std::string>("name", ""), {"sgd", "adam", "adamw"}); }),
            "optim.name: expected one of sgd|adam|adamw, got 'adamm' (line 1)");
}

TEST(ConfigTest, OverridesKeepTypesAndCreateMaps) {
  auto root = ConfigNode::load_string(kYaml, {"train.lr=1e-3", "run.seed=9", "optim.betas=[0.8, 0.9]",
                                              "new.deep.key=hello", "train.use_bn=false"});
  EXPECT_DOUBLE_EQ(root.child("train").get<double>("lr", 0), 1e-3);
  EXPECT_EQ(root.child("run").get<int>("seed", 0), 9);
  EXPECT_EQ(root.child("optim").get<std::vector<double>>("betas", {}), (std::vector<double>{0.8, 0.9}));
  EXPECT_EQ(root.child("new").child("deep").get<std::string>("key", ""), "hello");
  EXPECT_FALSE(root.child("train").get<bool>("use_bn", true));
  // Untouched values keep their lines.
  EXPECT_EQ(root.child("train").line_of("batch_size"), 6);
}

TEST(ConfigTest, OverrideErrorsNameTheSetFlag) {
  auto root = ConfigNode::load_string(kYaml, {"run.seed=abc"});
  EXPECT_EQ(config_error([&] { root.child("run").get<int>("seed", 0); }),
            "run.seed: expected an integer, got 'abc' (from --set run.seed=abc)");
  EXPECT_NE(config_error([] { ConfigNode::load_string(kYaml, {"run.dir.x=1"}); }).find("run.dir is 'runs/x'"),
            std::string::npos);
  EXPECT_NE(config_error([] { ConfigNode::load_string(kYaml, {"noequals"}); }).find("expected key.path=value"),
            std::string::npos);
  EXPECT_NE(config_error([] { ConfigNode::load_string(kYaml, {"a..b=1"}); }).find("empty component"),
            std::string::npos);
}

TEST(ConfigTest, ParseErrorsNameFileAndLine) {
  const std::string msg = config_error([] { ConfigNode::load_string("a: [1, 2\nb: 3\n", {}, "bad.yaml"); });
  EXPECT_EQ(msg.rfind("bad.yaml:", 0), 0u) << msg;
  EXPECT_NE(config_error([] { ConfigNode::load_file("/nonexistent/x.yaml"); }).find("/nonexistent/x.yaml"),
            std::string::npos);
  EXPECT_NE(config_error([] { ConfigNode::load_string("- 1\n- 2\n"); }).find("must be a YAML mapping"),
            std::string::npos);
}

TEST(ConfigTest, DumpRoundTripsEffectiveTree) {
  auto root = ConfigNode::load_string(kYaml, {"train.lr=0.01"});
  auto again = ConfigNode::load_string(root.dump());
  EXPECT_DOUBLE_EQ(again.child("train").get<double>("lr", 0), 0.01);
  EXPECT_EQ(again.child("train").get<std::vector<double>>("betas", {}), (std::vector<double>{0.9, 0.999}));
}

TEST(ConfigTest, EditDistance) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("same", "same"), 0u);
}

}  // namespace
}  // namespace strata
