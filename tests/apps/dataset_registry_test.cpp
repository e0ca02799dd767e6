// A program's own Dataset registered with data::register_dataset trains through the same
// Trainer and YAML config as the built-ins: options reach its factory (typos rejected),
// val is carved when it returns none, a returned test split is evaluated once at the end,
// and batches that do not fit the config's model are refused naming the dataset.
#include "apps/trainer.h"
#include "tests/apps/config_error.h"
#include "tests/temp_dir_fixture.h"

#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include <strata/data/registry.h>
#include <strata/data/synthetic.h>

namespace strata::apps {
namespace {

/// Two classes of `dim`-vectors: x[i][j] = +-(1 + j/dim) with the sign of class (i % 2),
/// plus a ramp, so a linear model separates them. Labels in {0, 1}.
class SignDataset : public data::Dataset {
 public:
  SignDataset(int64_t n, int64_t dim) : n_(n), dim_(dim) {}
  int64_t size() const override { return n_; }
  data::Batch get_batch(const std::vector<int64_t>& idx) const override {
    data::detail::check_indices("SignDataset", idx, n_);
    const int64_t b = int64_t(idx.size());
    data::Batch out{Tensor::empty({b, dim_}, DType::f32), Tensor::empty({b}, DType::i64)};
    for (int64_t k = 0; k < b; ++k) {
      const int64_t i = idx[size_t(k)];
      const float s = i % 2 ? 1.0f : -1.0f;
      for (int64_t j = 0; j < dim_; ++j)
        out.input.data<float>()[k * dim_ + j] = s * (1.0f + float(j) / float(dim_)) + 0.01f * float(i % 7);
      out.target.data<int64_t>()[k] = i % 2;
    }
    return out;
  }

 private:
  int64_t n_, dim_;
};

/// Registered once per process: "registry_test.sign" reads options n, dim and with_test.
void register_once() {
  static const bool done = [] {
    data::register_dataset("registry_test.sign", [](const data::DatasetRequest& r) {
      const int64_t n = r.options.get<int64_t>("n", 200), dim = r.options.get<int64_t>("dim", 4);
      data::DatasetSplits s{.train = std::make_shared<SignDataset>(n, dim)};
      if (r.options.get<bool>("with_test", false)) s.test = std::make_shared<SignDataset>(50, dim);
      return s;
    });
    data::register_dataset("registry_test.tokens", [](const data::DatasetRequest& r) {
      return data::DatasetSplits{.train = std::make_shared<data::SyntheticTokens>(data::SyntheticTokensOptions{
                                     .size = 64, .block_size = r.block_size, .vocab_size = 16, .seed = r.seed})};
    });
    return true;
  }();
  (void)done;
}

class DatasetRegistryTest : public strata::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    register_once();
  }
  TrainConfig config(const std::string& data, const std::string& model = "{type: mlp, hidden: [8]}") {
    const std::string yaml = "run: {dir: " + path("run") + ", threads: 1}\nmodel: " + model + "\ndata: " + data +
                             "\noptim: {name: adam, lr: 0.05}\ntrain: {max_steps: 30, batch_size: 16, log_every: 10}\n";
    return TrainConfig::from_node(ConfigNode::load_string(yaml));
  }
  std::vector<std::string> eval_splits() {
    std::ifstream f(path("run") + "/metrics.jsonl");
    std::vector<std::string> out;
    std::string line;
    while (std::getline(f, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j["type"] == "eval") out.push_back(j["split"].get<std::string>());
    }
    return out;
  }
};

TEST_F(DatasetRegistryTest, TrainsThroughTheTrainerWithACarvedValSplit) {
  Trainer t(config("{dataset: registry_test.sign, sample_shape: [6], num_classes: 2, val_fraction: 0.25, "
                   "options: {n: 120, dim: 6}}"),
            {.verbose = false});
  EXPECT_EQ(t.data().train->size(), 90);
  EXPECT_EQ(t.data().eval->size(), 30);
  EXPECT_EQ(t.data().eval_split, "val");
  EXPECT_EQ(t.data().test, nullptr);
  const EvalResult r = t.train();
  ASSERT_TRUE(r.accuracy);
  EXPECT_GE(*r.accuracy, 0.95);
  EXPECT_EQ(r.samples, 30);
  EXPECT_EQ(eval_splits(), (std::vector<std::string>{"val"}));
}

TEST_F(DatasetRegistryTest, ATestSplitIsEvaluatedOnceAtTheEnd) {
  Trainer t(config("{dataset: registry_test.sign, sample_shape: [4], num_classes: 2, "
                   "options: {with_test: true}}"),
            {.verbose = false});
  EXPECT_EQ(t.data().eval_split, "val");  // val_fraction 0.1 of 200
  EXPECT_EQ(t.data().eval->size(), 20);
  ASSERT_NE(t.data().test, nullptr);
  t.train();
  EXPECT_EQ(eval_splits(), (std::vector<std::string>{"val", "test"}));
  EXPECT_EQ(t.evaluate(true).samples, 50);
}

TEST_F(DatasetRegistryTest, GptOverARegisteredTokenDataset) {
  Trainer t(config("{dataset: registry_test.tokens}",
                   "{type: gpt, block_size: 8, n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16}"),
            {.verbose = false});
  EXPECT_TRUE(t.data().tokens);
  const EvalResult r = t.train();
  EXPECT_FALSE(r.accuracy);
  EXPECT_TRUE(std::isfinite(r.loss));
  // A GPT over a registered dataset needs model.vocab_size.
  EXPECT_NE(config_error([&] { config("{dataset: registry_test.tokens}", "{type: gpt, block_size: 8}"); })
                .find("model.vocab_size:"),
            std::string::npos);
}

TEST_F(DatasetRegistryTest, ErrorsNameTheKeyOrTheDataset) {
  // An unregistered name lists what is available.
  std::string msg = config_error([&] { config("{dataset: registry_test.nope}"); });
  EXPECT_NE(msg.find("data.dataset: expected one of"), std::string::npos) << msg;
  EXPECT_NE(msg.find("registry_test.sign"), std::string::npos) << msg;
  // An option its factory does not read is an unknown key, with its full path.
  msg = config_error([&] {
    Trainer t(config("{dataset: registry_test.sign, sample_shape: [4], num_classes: 2, options: {n: 40, dimm: 4}}"),
              {.verbose = false, .write_files = false});
  });
  EXPECT_NE(msg.find("data.options.dimm: unknown key; did you mean 'data.options.dim'?"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("(line"), std::string::npos) << msg;  // not a line of the user's file
  // A wrong type in an option the factory reads names the option.
  msg = config_error([&] {
    Trainer t(config("{dataset: registry_test.sign, sample_shape: [4], num_classes: 2, options: {n: many}}"),
              {.verbose = false, .write_files = false});
  });
  EXPECT_NE(msg.find("data.options.n: expected an integer"), std::string::npos) << msg;
  // Batches that do not match data.sample_shape are refused before training.
  try {
    Trainer t(config("{dataset: registry_test.sign, sample_shape: [5], num_classes: 2}"),
              {.verbose = false, .write_files = false});
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("'registry_test.sign' (registered): the train split gives input f32(1,4) and target i64(1)"), std::string::npos)
      << msg;
  // Neither val nor test returned and nothing carved: nothing to evaluate.
  msg = config_error([&] {
    Trainer t(config("{dataset: registry_test.sign, sample_shape: [4], num_classes: 2, val_fraction: 0}"),
              {.verbose = false, .write_files = false});
  });
  EXPECT_NE(msg.find("data.val_fraction:"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata::apps
