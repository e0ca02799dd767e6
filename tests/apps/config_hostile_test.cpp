// Hostile and broken configs: misspelt required keys, duplicate keys, extra
// documents, directories and FIFOs as --config, deep nesting, alias bombs, huge numbers
// and a wrong type at every key. Each is one ConfigError naming the key path or the file.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "apps/config.h"
#include "tests/apps/config_error.h"
#include "tests/fifo_unblocker.h"
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

std::string load_error(const std::string& yaml) {
  return config_error([&] { TrainConfig::from_node(ConfigNode::load_string(yaml, {}, "cfg.yaml")); });
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

const char* kValid = R"(run: {dir: runs/x, seed: 1, threads: 1}
model: {type: mlp, hidden: [8]}
data: {dataset: synthetic, kind: classification, size: 64, sample_shape: [4], num_classes: 2}
optim: {name: adam, lr: 0.01}
train: {max_steps: 2, batch_size: 4}
)";

TEST(ConfigHostileTest, ValidConfigLoads) { EXPECT_EQ(load_error(kValid), ""); }

TEST(ConfigHostileTest, MisspeltRequiredKeyIsReportedAsUnknownWithSuggestion) {
  EXPECT_EQ(load_error("optim:\n  name: adam\n  lrr: 0.01\n"),
            "optim.lrr: unknown key; did you mean 'optim.lr'? (line 3)");
}

TEST(ConfigHostileTest, MisspeltSectionOfRequiredKeyIsReportedAsUnknown) {
  EXPECT_EQ(load_error("optimm:\n  lr: 0.01\n"), "optimm: unknown key; did you mean 'optim'? (line 1)");
}

TEST(ConfigHostileTest, MissingRequiredKeyWithoutNearMissStillSaysMissing) {
  const std::string e = load_error("optim:\n  name: adam\n");
  EXPECT_TRUE(starts_with(e, "optim.lr: required key is missing")) << e;
}

TEST(ConfigHostileTest, DuplicateKeyIsRefused) {
  EXPECT_EQ(load_error("optim:\n  lr: 0.002\n  lr: 5.0\n"),
            "optim.lr: duplicate key (first at line 2); each key may appear once (line 3)");
}

TEST(ConfigHostileTest, DuplicateSectionIsRefused) {
  const std::string e = load_error(std::string(kValid) + "optim: {lr: 5.0}\n");
  EXPECT_TRUE(starts_with(e, "optim: duplicate key (first at line 4)")) << e;
}

TEST(ConfigHostileTest, DuplicateKeyFromFlowMappingIsRefused) {
  const std::string e = load_error("optim: {lr: 0.1, name: sgd, lr: 0.2}\n");
  EXPECT_TRUE(starts_with(e, "optim.lr: duplicate key")) << e;
}

TEST(ConfigHostileTest, SecondYamlDocumentIsRefused) {
  const std::string e = load_error(std::string(kValid) + "---\noptim: {lr: 5.0}\n");
  EXPECT_NE(e.find("cfg.yaml"), std::string::npos) << e;
  EXPECT_NE(e.find("cfg.yaml:6: a second YAML document"), std::string::npos) << e;
}

TEST(ConfigHostileTest, MalformedInputThatMakesLoadAllLoopEndsInOneError) {
  // Found by the config fuzzer: yaml-cpp 0.7's LoadAll returns empty documents forever here.
  const std::string e = load_error(",? [a, b]\n=: 1\noptim:train.l {? {x:d1} : 2}\n");
  EXPECT_TRUE(starts_with(e, "cfg.yaml:")) << e;
}

TEST(ConfigHostileTest, NonScalarMappingKeyIsAConfigError) {
  const std::string e = load_error("optim:\n  ? [lr]\n  : 0.1\n");
  EXPECT_TRUE(starts_with(e, "optim: mapping keys must be plain names, got a list")) << e;
}

TEST(ConfigHostileTest, DeepFlowNestingIsAClearError) {
  const std::string e = load_error("model: " + std::string(100000, '[') + "\n");
  EXPECT_NE(e.find("cfg.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("nested deeper than the parser allows"), std::string::npos) << e;
  EXPECT_EQ(e.find("bad file"), std::string::npos) << e;
}

TEST(ConfigHostileTest, DeepBlockNestingIsAClearError) {
  std::string yaml;
  for (int i = 0; i < 3000; ++i) yaml += std::string(size_t(i), ' ') + "k:\n";
  const std::string e = load_error(yaml);
  EXPECT_NE(e.find("nested deeper than the parser allows"), std::string::npos) << e;
}

TEST(ConfigHostileTest, NestingBeyondConfigDepthNamesTheKeyPath) {
  std::string yaml, path;
  for (int i = 0; i < 40; ++i) {
    yaml += std::string(size_t(i), ' ') + "k:\n";
    path += i ? ".k" : "k";
  }
  yaml += std::string(40, ' ') + "v: 1\n";
  const std::string e = load_error(yaml);
  EXPECT_NE(e.find("nested more than 32 levels deep"), std::string::npos) << e;
  EXPECT_TRUE(starts_with(e, "k.k.k.k")) << e;
}

TEST(ConfigHostileTest, AliasBombIsRefused) {
  // "Billion laughs": 9 levels of 9 aliases each would be 9^9 (387M) values when walked.
  std::ostringstream yaml;
  yaml << "a0: &a0 {x: lol}\n";
  for (int l = 1; l <= 9; ++l) {
    yaml << "a" << l << ": &a" << l << " {";
    for (int k = 0; k < 9; ++k) yaml << (k ? ", " : "") << "k" << k << ": *a" << l - 1;
    yaml << "}\n";
  }
  const std::string e = config_error([&] { ConfigNode::load_string(yaml.str(), {}, "bomb.yaml"); });
  EXPECT_TRUE(starts_with(e, "bomb.yaml: the config expands to more than 100000 values")) << e;
  EXPECT_NE(e.find("alias bomb"), std::string::npos) << e;
}

// The same bomb in a --set value is blamed on the --set, not on the config file.
TEST(ConfigHostileTest, AliasBombInASetValueNamesTheSet) {
  std::string v = "[&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]";
  for (int l = 1; l <= 6; ++l) {
    v += ", &a" + std::to_string(l) + " [";
    for (int k = 0; k < 10; ++k) v += (k ? ", *a" : "*a") + std::to_string(l - 1);
    v += "]";
  }
  v += "]";
  const std::string e = config_error([&] { ConfigNode::load_string("model: {type: mlp}\n", {"model.hidden=" + v}, "cfg.yaml"); });
  EXPECT_TRUE(starts_with(e, "--set model.hidden: the config expands to more than 100000 values")) << e;
  EXPECT_EQ(e.find("cfg.yaml"), std::string::npos) << e;
}

TEST(ConfigHostileTest, HugeFloatNamesKeyAndRange) {
  EXPECT_EQ(load_error("optim: {lr: 1e400}\n"),
            "optim.lr: expected a number, got '1e400' (out of range for a double) (line 1)");
}

TEST(ConfigHostileTest, HugeIntegerNamesKeyAndRange) {
  const std::string e = load_error(std::string(kValid) + "schedule: {warmup_steps: 1180591620717411303424}\n");
  EXPECT_EQ(e, "schedule.warmup_steps: expected an integer, got '1180591620717411303424' (out of range "
               "[-9223372036854775808, 9223372036854775807]) (line 6)");
}

TEST(ConfigHostileTest, HugeIntegerForIntKeyNamesKey) {
  const std::string e = load_error("run: {threads: 1099511627776}\n");
  EXPECT_EQ(e,
            "run.threads: expected an integer, got '1099511627776' (out of range [-2147483648, 2147483647]) (line 1)");
}

TEST(ConfigHostileTest, HugeIntegerInListNamesElement) {
  const std::string e = load_error("model: {type: mlp, hidden: [8, 99999999999999999999]}\n");
  EXPECT_TRUE(starts_with(e, "model.hidden[1]: expected an integer, got '99999999999999999999' (out of range")) << e;
}

TEST(ConfigHostileTest, NegativeUnsignedNamesKey) {
  EXPECT_EQ(load_error("run: {seed: -1}\n"), "run.seed: expected a non-negative integer, got '-1' (line 1)");
}

// Every key path of `n` (sections and leaves), in file order.
void key_paths(const YAML::Node& n, const std::string& prefix, std::vector<std::string>& out) {
  if (!n.IsMap()) return;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string p = prefix.empty() ? it->first.Scalar() : prefix + "." + it->first.Scalar();
    out.push_back(p);
    key_paths(it->second, p, out);
  }
}

TEST(ConfigHostileTest, WrongTypeAtEveryKeyOfEveryShippedConfigNamesThatKey) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(STRATA_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    YAML::Node original = YAML::LoadFile(entry.path().string());
    // Loaded from text below: a tokenizer named beside the config gets its full path.
    if (original["data"] && original["data"]["tokenizer"] &&
        std::filesystem::path(original["data"]["tokenizer"].Scalar()).is_relative())
      original["data"]["tokenizer"] = (entry.path().parent_path() / original["data"]["tokenizer"].Scalar()).string();
    std::vector<std::string> paths;
    key_paths(original, "", paths);
    for (const auto& p : paths) {
      // A mapping where a scalar or list belongs, and a list where a mapping (a section, or
      // a nested one such as model.moe) belongs.
      YAML::Node at = YAML::Clone(original);
      for (size_t b = 0, e = 0; e != std::string::npos; b = e + 1) {
        e = p.find('.', b);
        at = at[p.substr(b, e == std::string::npos ? std::string::npos : e - b)];
      }
      const bool section = at.IsMap();
      YAML::Node tree = YAML::Clone(original);
      apply_config_override(tree, p + "=" + (section ? "[1, 2]" : "{bad: 1}"));
      YAML::Emitter em;
      em << tree;
      const std::string e = load_error(em.c_str());
      EXPECT_TRUE(starts_with(e, p + ": expected ")) << entry.path().filename() << " " << p << ": '" << e << "'";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

class ConfigFileHostileTest : public strata::testing::TempDirTest {};

TEST_F(ConfigFileHostileTest, DirectoryAsConfigIsRefusedNamingIt) {
  const std::string e = config_error([&] { TrainConfig::load(dir_.string()); });
  EXPECT_EQ(e, "config file '" + dir_.string() + "' is a directory, not a YAML file");
}

TEST_F(ConfigFileHostileTest, FifoAsConfigIsRefusedWithoutOpening) {
  strata::testing::FifoUnblocker fifo(path("cfg.fifo"));
  ASSERT_TRUE(fifo.ok());
  const std::string e = config_error([&] { TrainConfig::load(path("cfg.fifo")); });
  fifo.done();
  EXPECT_EQ(e, "config file '" + path("cfg.fifo") + "' is not a regular file (a FIFO, socket or device)");
}

TEST_F(ConfigFileHostileTest, OversizedConfigIsRefusedNamingIt) {
  { std::ofstream(path("big.yaml")) << "run: {}\n"; }
  std::filesystem::resize_file(path("big.yaml"), 1ull << 40);  // sparse: no disk used
  const std::string e = config_error([&] { TrainConfig::load(path("big.yaml")); });
  EXPECT_TRUE(starts_with(e, "config file '" + path("big.yaml") + "' is 1099511627776 bytes")) << e;
}

TEST_F(ConfigFileHostileTest, MissingConfigNamesFileAndReason) {
  const std::string e = config_error([&] { TrainConfig::load(path("nope.yaml")); });
  EXPECT_EQ(e, "cannot open config file '" + path("nope.yaml") + "': No such file or directory");
}

}  // namespace
}  // namespace strata::apps
