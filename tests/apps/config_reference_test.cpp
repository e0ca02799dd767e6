// The config reference cannot drift: every key the readers ask for is documented (and
// every documented key is read by some config), types and defaults agree, docs/config.md
// is `strata config reference`'s output, and `config show` resolves every default.
#include "apps/config_reference.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "apps/config.h"
#include "tests/apps/test_files.h"

namespace strata::apps {
namespace {
namespace fs = std::filesystem;

// One config per model, dataset, data kind, optimizer and schedule variant, so that the
// readers ask for every key they know between them. The shipped configs/*.yaml and the
// test configs are read too. A key of a new variant (a dataset, a model) needs a config
// here or in configs/ that selects it.
const char* kVariants[] = {
    "model: {type: mlp}\ndata: {dataset: fashion_mnist}\noptim: {name: sgd, lr: 0.1}\nschedule: {name: step}\n",
    "model: {type: cnn}\ndata: {dataset: fashion_mnist}\noptim: {name: adam, lr: 0.1}\n",
    "model: {type: cnn}\ndata: {dataset: synthetic, kind: classification, sample_shape: [1, 8, 8]}\n"
    "optim: {name: adamw, lr: 0.1}\n",
    "model: {type: mlp}\ndata: {dataset: synthetic, kind: classification}\noptim: {name: sgd, lr: 0.1}\n",
    "model: {type: gpt}\ndata: {dataset: text}\noptim: {name: adamw, lr: 0.1}\nschedule: {name: cosine}\n",
    "model: {type: gpt}\ndata: {dataset: synthetic, kind: tokens}\noptim: {name: adam, lr: 0.1}\n",
    "model: {type: llama, n_kv_head: 2, ffn_dim_multiplier: 1.3, multiple_of: 32, norm_eps: 1e-6, rope_theta: 500000,"
    " rope_scaling: {factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64}}\n"
    "data: {dataset: text}\noptim: {name: adamw, lr: 0.1}\n",
    "model: {type: gpt, vocab_size: 64}\ndata: {dataset: tokens, path: t.bin, val_path: v.bin}\n"
    "optim: {name: adam, lr: 0.1}\n",
    "model: {type: gpt, vocab_size: 64}\ndata: {dataset: tokens, path: t.bin, val_fraction: 0.1}\n"
    "optim: {name: adam, lr: 0.1}\n",
    "model: {type: mlp}\ndata: {dataset: idx, images: i.idx, labels: l.idx, num_classes: 3, test_images: ti.idx, "
    "test_labels: tl.idx}\noptim: {name: adam, lr: 0.1}\n",
};

std::vector<std::string> config_files() {
  std::vector<std::string> files;
  for (const char* dir : {"configs", "tests/data_files"})
    for (const auto& e : fs::directory_iterator(fs::path(STRATA_SOURCE_DIR) / dir))
      if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  return files;
}

// The keys read while loading `root` as a TrainConfig. `must_load`: a ConfigError fails
// the test; otherwise the keys read before the error still count.
std::vector<ConfigKeyRead> reads_of(const ConfigNode& root, const std::string& what, bool must_load = true) {
  try {
    (void)TrainConfig::from_node(root);
  } catch (const ConfigError& e) {
    if (must_load) ADD_FAILURE() << what << " does not load: " << e.what();
  }
  return root.keys_read();
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "  " + l + "\n";
  return s;
}

TEST(ConfigReference, EveryKeyReadIsDocumentedAndEveryDocumentedKeyIsRead) {
  std::vector<ConfigKeyRead> all;
  auto add = [&](const std::vector<ConfigKeyRead>& r) { all.insert(all.end(), r.begin(), r.end()); };
  for (const char* v : kVariants) add(reads_of(ConfigNode::load_string(v, {}, "variant"), std::string("variant:\n") + v));
  for (const std::string& f : config_files()) add(reads_of(ConfigNode::load_file(f, kNoCudaSets), f));
  // Every value a selector accepts (model.type, data.dataset, optim.name, ...), set on each
  // variant: a new dataset or model is read even before a config above uses it. The mix
  // may be invalid (gpt on images); the keys read before the error count.
  // Repeated until no new value shows up (a selector inside a new variant is explored too).
  std::set<std::string> explored;
  for (bool more = true; more;) {
    more = false;
    for (const auto& [key, values] : choices_of(all))
      for (const std::string& value : values) {
        const std::string set = key + "=" + value;
        if (!explored.insert(set).second) continue;
        more = true;
        for (const char* v : kVariants)
          add(reads_of(ConfigNode::load_string(v, {set}, "variant"), "", /*must_load=*/false));
      }
  }
  const std::vector<std::string> problems = check_config_reads(all, /*all_read=*/true);
  EXPECT_TRUE(problems.empty()) << "the config readers and apps/config_reference.cpp disagree:\n" << join(problems);
}

TEST(ConfigReference, CheckNamesAnUndocumentedKeyAndAWrongTypeOrDefault) {
  const ConfigNode root = ConfigNode::load_string("optim: {lr: fast}\nrun: {}\n");
  (void)root.child("brand_new").get<int64_t>("knob", 3);
  (void)root.child("optim").require<std::string>("lr");
  (void)root.child("run").get<int>("seed", 7);
  EXPECT_THROW((void)root.child("model").require<std::string>("activation"), ConfigError);  // records nothing
  const std::vector<std::string> p = check_config_reads(root.keys_read(), false);
  ASSERT_EQ(p.size(), 3u) << join(p);
  EXPECT_EQ(p[0], "brand_new.knob: read by the config loader but not documented; add to kDocs in "
                  "apps/config_reference.cpp: {\"brand_new.knob\", \"integer\", \"3\", \"<meaning>\"}, then "
                  "regenerate docs/config.md");
  EXPECT_EQ(p[1], "optim.lr: read as string but documented as 'number'");
  EXPECT_EQ(p[2], "run.seed: a reader's default is 7 but the documented default is '0'");
  EXPECT_NE(join(check_config_reads({}, true)).find("run.dir: documented but no loaded config read it"),
            std::string::npos);
  // A value a selector accepts must be named in the key's meaning.
  const ConfigNode sel = ConfigNode::load_string("model: {type: mlp}\n");
  const ConfigNode model = sel.child("model");
  model.one_of("type", model.get<std::string>("type", "mlp"), {"mlp", "cnn", "gpt", "rnn"});
  const std::vector<std::string> q = check_config_reads(sel.keys_read(), false);
  ASSERT_EQ(q.size(), 1u) << join(q);
  EXPECT_EQ(q[0], "model.type: accepts 'rnn' but its meaning in apps/config_reference.cpp does not name `rnn`");
}

TEST(ConfigReference, DocsConfigMdIsTheGeneratedReference) {
  std::ifstream in(fs::path(STRATA_SOURCE_DIR) / "docs" / "config.md", std::ios::binary);
  ASSERT_TRUE(in) << "docs/config.md is missing: build/strata config reference > docs/config.md";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(text.str() == config_reference_markdown())
      << "docs/config.md is stale: regenerate it with build/strata config reference > docs/config.md";
}

TEST(ConfigReference, ResolvedConfigHasEveryDefaultAndLoadsToTheSameValues) {
  const std::string src = std::string(STRATA_SOURCE_DIR) + "/tests/data_files/tiny_mlp.yaml";
  const ConfigNode root = ConfigNode::load_file(src, {"optim.lr=0.1"});
  const TrainConfig a = TrainConfig::from_node(root);
  const std::string resolved = root.dump_resolved();
  EXPECT_NE(resolved.find("lr: 0.1\n"), std::string::npos) << resolved;            // the --set value
  EXPECT_NE(resolved.find("bucket_cap_mb: 25\n"), std::string::npos) << resolved;  // a default
  EXPECT_NE(resolved.find("hidden: [32]\n"), std::string::npos) << resolved;
  EXPECT_NE(resolved.find("dp: auto\n"), std::string::npos) << resolved;          // noted by its reader
  EXPECT_EQ(resolved.find("n_head"), std::string::npos) << resolved;  // a gpt key: not read for an mlp
  const ConfigNode again = ConfigNode::load_string(resolved);
  const TrainConfig b = TrainConfig::from_node(again);
  const auto ra = root.keys_read(), rb = again.keys_read();
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].path, rb[i].path);
    EXPECT_EQ(YAML::Dump(ra[i].value), YAML::Dump(rb[i].value)) << ra[i].path;
    // Every key is written out; a null one (parallel.replicas: ~, "unset") reads as absent.
    EXPECT_TRUE(rb[i].given || rb[i].value.IsNull()) << ra[i].path << " is not in the resolved config";
  }
  EXPECT_EQ(a.optim.lr, b.optim.lr);
  EXPECT_EQ(a.model.hidden, b.model.hidden);
}

}  // namespace
}  // namespace strata::apps
