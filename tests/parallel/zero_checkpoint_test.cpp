// Checkpoints across layouts: train 2 steps on N ranks at stage s (0 = DDP), save (format
// v2), load on M ranks at stage t, train 1 more step; the result must equal 3
// single-process steps, for every N, M in 1..4 and s, t in 0..3. The same holds for
// checkpoints written in the v1 layouts (flat-range index, plain single-process
// directory), written here byte for byte as the v1 code wrote them. Also: loading into a
// different model fails naming the tensor and changes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include <strata/comm/local.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/tensor/file_io.h>
#include "layout_rank.h"
#include "zero_equivalence.h"

namespace strata::testing {
namespace {
namespace fs = std::filesystem;

// One rank's training setup at a layout: stage 0 = DDP (N = 1: plain DDP of one rank).
struct Layout : MlpLayoutRank {
  Layout(comm::ProcessGroup& g, int stage, uint64_t seed)
      : MlpLayoutRank(g, stage, seed, optimizer_factory("adam"), 200.0 * 4 / (1 << 20)) {}
  // Every rank's pieces, gathered (the v1 writers below lay them out by hand).
  std::vector<parallel::ShardPiece> pieces(comm::ProcessGroup& g) {
    auto p = zero ? zero->state_pieces() : parallel::replicated_pieces(*model, opt.get(), g.rank());
    for (auto& x : p) x.data = ops::clone(x.data);  // views of live buffers
    return p;
  }
  nn::NamedTensors state() { return zero ? zero->full_state_dict() : model->state_dict(); }
};

constexpr int64_t kBatch = 12;  // divisible by 1..4

TEST(ZeroCheckpoint, SaveLoadMatrixAnyWorldSizeAnyStage) {
  const nn::NamedTensors ref = reference_state(EquivCase{.optim = "adam", .steps = 3, .batch = kBatch}, 1);
  const fs::path root = fs::temp_directory_path() / ("strata_zero_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(root);
  int combos = 0;
  for (int n = 1; n <= 4; ++n)
    for (int s = 0; s <= 3; ++s) {
      const std::string dir = (root / std::string("n").append(std::to_string(n)).append("_s").append(std::to_string(s))).string();
      comm::run_local(n, [&](comm::ProcessGroup& g) {
        Layout l(g, s, kModelSeed + 13 * uint64_t(g.rank()));
        for (int k = 0; k < 2; ++k) l.step(g, k, kBatch);
        l.save(g, dir, s);
      });
      ASSERT_TRUE(fs::exists(fs::path(dir) / parallel::kShardedIndexFile));
      for (int m = 1; m <= 4; ++m)
        for (int t = 0; t <= 3; ++t) {
          nn::NamedTensors got;
          comm::run_local(m, [&](comm::ProcessGroup& g) {
            Layout l(g, t, 999 + uint64_t(g.rank()));  // a different init: the load must replace it
            l.load(dir);
            l.step(g, 2, kBatch);
            auto st = l.state();
            if (g.rank() == 0) got = st;
          });
          std::string worst;
          EXPECT_LT(max_relative_error(got, ref, &worst), 1e-5)
              << "saved N=" << n << " stage " << s << ", loaded M=" << m << " stage " << t << ": worst " << worst;
          ++combos;
        }
    }
  EXPECT_EQ(combos, 256);
  fs::remove_all(root);
}

// ---------------------------------------------------------------- version 1 layouts

// The v1 sharded layout: shard files of 1-D pieces keyed "<name>@<begin>", index.json
// version 1 with flat [begin, end) pieces.
void write_v1_sharded(const std::string& dir, const std::vector<std::vector<parallel::ShardPiece>>& ranks, int stage,
                      const nlohmann::json& meta) {
  fs::create_directories(dir);
  const int world = int(ranks.size());
  nlohmann::json files = nlohmann::json::array(), tensors = nlohmann::json::object();
  for (int r = 0; r < world; ++r) {
    char name[64];
    std::snprintf(name, sizeof(name), "shard_%05d_of_%05d.safetensors", r, world);
    NamedTensors out;
    for (const auto& p : ranks[size_t(r)]) {
      nlohmann::json& t = tensors[p.name];
      if (t.is_null())
        t = {{"dtype", safetensors_dtype_name(p.data.dtype())}, {"shape", p.global_shape}, {"pieces", nlohmann::json::array()}};
      if (p.end == p.begin) continue;
      const std::string key = p.name + "@" + std::to_string(p.begin);
      out.emplace_back(key, ops::reshape(p.data, {p.end - p.begin}));
      t["pieces"].push_back({{"file", name}, {"key", key}, {"begin", p.begin}, {"end", p.end}});
    }
    save_safetensors(dir + "/" + name, out,
                     {{"format", "pt"}, {"strata_rank", std::to_string(r)}, {"strata_world_size", std::to_string(world)}});
    files.push_back(name);
  }
  const nlohmann::json index = {{"format", "strata-sharded-checkpoint"}, {"version", 1}, {"world_size", world},
                                {"zero_stage", stage}, {"files", files}, {"meta", meta}, {"tensors", tensors}};
  write_file_atomic(dir + "/index.json", index.dump(1) + "\n");
}

// The v1 single-process layout: model.safetensors, optimizer.safetensors, state.json.
void write_v1_plain(const std::string& dir, const nn::NamedTensors& model, const optim::OptimizerState& opt) {
  fs::create_directories(dir);
  save_safetensors(dir + "/model.safetensors", model, {{"format", "pt"}});
  save_safetensors(dir + "/optimizer.safetensors", opt.tensors);
  const nlohmann::json state = {{"format", "strata-checkpoint"}, {"version", 1}, {"step", 2},
                                {"loader", {{"epoch", 0}, {"batch", 2}}},
                                {"rng", {{"default", {1, 0}}, {"model", nlohmann::json::array()}, {"sampler_seed", 0}}},
                                {"optimizer", opt.scalars}, {"schedule_step", 2}, {"config", ""},
                                {"extra", nlohmann::json::object()}};
  write_file_atomic(dir + "/state.json", state.dump(2) + "\n");
}

TEST(ZeroCheckpoint, Version1CheckpointsLoadAtAnyWorldSizeAndStage) {
  const nn::NamedTensors ref = reference_state(EquivCase{.optim = "adam", .steps = 3, .batch = kBatch}, 1);
  const fs::path root = fs::temp_directory_path() / ("strata_zero_ckpt_v1_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (auto [n, s] : {std::pair{3, 2}, {2, 3}, {1, 0}}) {  // v1 sharded (ZeRO and DDP) ...
    std::vector<std::vector<parallel::ShardPiece>> ranks(static_cast<size_t>(n));
    nlohmann::json meta;
    comm::run_local(n, [&](comm::ProcessGroup& g) {
      Layout l(g, s, kModelSeed + 13 * uint64_t(g.rank()));
      for (int k = 0; k < 2; ++k) l.step(g, k, kBatch);
      ranks[size_t(g.rank())] = l.pieces(g);
      if (g.rank() == 0) meta = {{parallel::kOptimizerMetaKey, l.optimizer().state_dict().scalars}};
    });
    write_v1_sharded((root / std::string("s").append(std::to_string(n))).string(), ranks, s, meta);
  }
  comm::run_local(1, [&](comm::ProcessGroup& g) {  // ... and v1 plain, from one process
    Layout l(g, 0, kModelSeed);
    for (int k = 0; k < 2; ++k) l.step(g, k, kBatch);
    write_v1_plain((root / "plain").string(), l.model->state_dict(), l.opt->state_dict());
  });
  int combos = 0;
  for (const std::string name : {"s3", "s2", "s1", "plain"}) {
    const std::string dir = (root / name).string();
    EXPECT_EQ(parallel::CheckpointReader(dir).version(), 1);
    for (int m = 1; m <= 3; ++m)
      for (int t = 0; t <= 3; ++t) {
        nn::NamedTensors got;
        comm::run_local(m, [&](comm::ProcessGroup& g) {
          Layout l(g, t, 999 + uint64_t(g.rank()));
          l.load(dir);
          l.step(g, 2, kBatch);
          auto st = l.state();
          if (g.rank() == 0) got = st;
        });
        std::string worst;
        EXPECT_LT(max_relative_error(got, ref, &worst), 1e-5) << name << " loaded M=" << m << " stage " << t << ": " << worst;
        ++combos;
      }
  }
  EXPECT_EQ(combos, 48);
  // A v1 index naming a piece its file lacks fails naming the file and tensor.
  nlohmann::json index = nlohmann::json::parse(read_file_text((root / "s2/index.json").string()));
  const std::string victim = index["tensors"].begin().key();
  auto& piece = index["tensors"][victim]["pieces"][0];
  piece["key"] = victim + "@12345";
  write_file_atomic((root / "s2/index.json").string(), index.dump());
  try {
    parallel::CheckpointReader rd((root / "s2").string());
    ADD_FAILURE() << "opened a damaged v1 checkpoint";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(piece["file"].get<std::string>() + "': tensor '" + victim + "'"), std::string::npos)
        << e.what();
  }
  fs::remove_all(root);
}

TEST(ZeroCheckpoint, WrongModelIsRefusedAndNothingChanges) {
  const fs::path dir = fs::temp_directory_path() / ("strata_zero_ckpt_bad_" + std::to_string(::getpid()));
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    Layout l(g, 3, kModelSeed);
    l.step(g, 0, kBatch);
    l.save(g, dir.string(), 3);
  });
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    auto gpt = make_model("gpt", 5);
    auto zero = parallel::apply_zero(gpt, g, {.stage = 2, .wrap = {}}, optimizer_factory("adam"));
    const nn::NamedTensors before = zero->full_state_dict();
    parallel::ShardedCheckpointReader ck(dir.string());
    try {
      parallel::load_zero(ck, *zero, true);
      ADD_FAILURE() << "a GPT loaded an MLP checkpoint";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("is missing"), std::string::npos) << e.what();
    }
    EXPECT_EQ(max_relative_error(zero->full_state_dict(), before, nullptr), 0.0);
  });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata::testing
