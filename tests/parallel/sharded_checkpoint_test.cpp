// Checkpoints of flat (ZeRO) pieces on the local backend: saved at world sizes 1-4 with
// pieces cut at uneven, world-dependent boundaries (stored as v2 boxes), read back at every
// range and consolidated, compared byte for byte with the tensors they came from; every
// kind of bad piece list or damaged file is a DataError naming the file and tensor that
// leaves no checkpoint behind.
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include "tests/temp_dir_fixture.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <strata/comm/local.h>
#include <strata/core/rng.h>
#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>
#include <strata/tensor/safetensors.h>

namespace strata::parallel {
namespace {

namespace fs = std::filesystem;

comm::CommOptions quick() { return comm::CommOptions{.timeout_s = 30}; }

// The logical tensors a checkpoint holds: several dtypes, a scalar, an empty tensor,
// sizes prime to every world size.
NamedTensors make_tensors(uint64_t seed) {
  Generator g(seed);
  NamedTensors t;
  t.emplace_back("layers.0.weight", ops::uniform({7, 5}, -1, 1, g));
  t.emplace_back("layers.0.bias", ops::uniform({13}, -1, 1, g, DType::f64));
  t.emplace_back("embed", ops::uniform({3, 4, 6}, -2, 2, g));
  t.emplace_back("step", ops::full({}, double(seed), DType::i64));
  t.emplace_back("empty", Tensor::empty({0, 4}, DType::f32));
  t.emplace_back("half", ops::to_dtype(ops::uniform({11}, -1, 1, g), DType::f16));
  Tensor idx = Tensor::empty({29}, DType::i64);
  for (int64_t i = 0; i < 29; ++i)  // all 64 bits in use, negative values too
    idx.data<int64_t>()[i] = int64_t(uint64_t(i + 1 + seed) * 0x9E3779B97F4A7C15ull);
  t.emplace_back("opt.exp_avg_idx", idx);
  t.emplace_back("replicated.scale", ops::uniform({4}, 0, 1, g, DType::f64));
  return t;
}

Tensor flat(const Tensor& t) { return ops::reshape(t, {t.numel()}); }

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel()) return false;
  if (a.numel() == 0) return true;
  const Tensor ca = ops::contiguous(a), cb = ops::contiguous(b);
  return std::memcmp(ca.raw_data(), cb.raw_data(), size_t(ca.nbytes())) == 0;
}

enum class Layout {
  zero_flat,    // ZeRO: the concatenation of all tensors cut into `world` uneven shards
  interleaved,  // chunks of 3 elements dealt round-robin: several pieces per rank and tensor
};

// Rank `rank`'s pieces of `tensors` in a world of `world`. "replicated.*" tensors go whole
// to the last rank (DDP-style single writer). Ranks that hold nothing of a tensor declare
// it with a zero-length piece.
std::vector<ShardPiece> cut(const NamedTensors& tensors, int rank, int world, Layout layout) {
  std::vector<ShardPiece> out;
  int64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.numel();
  // Uneven cut points: rank r's shard is [c(r), c(r+1)) with c(r) ~ total * r^2 / world^2,
  // so early ranks get little (rank 0 may get nothing), the last rank the most.
  auto cut_point = [&](int r) { return r >= world ? total : total * r * r / (world * world); };
  int64_t base = 0;
  for (const auto& [name, t] : tensors) {
    const Tensor f = flat(t);
    const int64_t n = t.numel();
    bool any = false;
    auto add = [&](int64_t b, int64_t e) {
      out.push_back({name, t.shape(), b, e, ops::narrow(f, 0, b, e - b)});
      any = any || e > b;
    };
    if (name.rfind("replicated.", 0) == 0) {
      if (rank == world - 1) add(0, n);
    } else if (layout == Layout::zero_flat) {
      const int64_t lo = std::clamp(cut_point(rank) - base, int64_t(0), n);
      const int64_t hi = std::clamp(cut_point(rank + 1) - base, int64_t(0), n);
      if (hi > lo) add(lo, hi);
    } else {
      for (int64_t c = 0, k = 0; c < n; c += 3, ++k)
        if (k % world == rank) add(c, std::min(n, c + 3));
    }
    if (!any) add(std::min(n, int64_t(rank)), std::min(n, int64_t(rank)));  // declaration only
    base += n;
  }
  return out;
}

// Saves `tensors` from `world` local ranks.
void save(const std::string& dir, const NamedTensors& tensors, int world, Layout layout,
          const nlohmann::json& meta = {{"step", 17}}, int zero_stage = 2) {
  comm::run_local(world, [&](comm::ProcessGroup& g) {
    save_sharded(dir, g, cut(tensors, g.rank(), world, layout), zero_stage, meta);
  }, quick());
}

class ShardedCheckpointTest : public strata::testing::TempDirTest {
 protected:
  // Runs a save expected to fail; returns the error every rank threw (all must agree).
  template <class E>
  static std::string failed_save(int world, const std::function<void(comm::ProcessGroup&)>& fn) {
    std::vector<std::string> msgs(static_cast<size_t>(world));
    comm::run_local(world, [&](comm::ProcessGroup& g) {
      try {
        fn(g);
        msgs[size_t(g.rank())] = "no error";
      } catch (const E& e) {
        msgs[size_t(g.rank())] = e.what();
      }
    }, quick());
    for (int r = 1; r < world; ++r) EXPECT_EQ(msgs[size_t(r)], msgs[0]) << "rank " << r;
    return msgs[0];
  }

};

void expect_matches(const ShardedCheckpointReader& rd, const NamedTensors& want, bool every_range) {
  std::vector<std::string> names;
  for (const auto& [name, t] : want) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(rd.names(), names);
  for (const auto& [name, t] : want) {
    SCOPED_TRACE(name);
    EXPECT_EQ(rd.dtype(name), t.dtype());
    EXPECT_EQ(rd.global_shape(name), t.shape());
    const Tensor full = rd.read_full(name);
    EXPECT_EQ(full.shape(), t.shape());
    EXPECT_TRUE(same_bytes(full, t));
    const Tensor f = flat(t);
    const int64_t n = t.numel();
    if (every_range) {
      for (int64_t b = 0; b <= n; ++b)
        for (int64_t e = b; e <= n; ++e) {
          const Tensor got = rd.read(name, b, e);
          ASSERT_EQ(got.shape(), Shape{e - b});
          ASSERT_TRUE(same_bytes(got, ops::narrow(f, 0, b, e - b))) << "[" << b << ", " << e << ")";
        }
    }
  }
}

TEST_F(ShardedCheckpointTest, RoundTripEveryRangeAtWorldSizes1To4) {
  const NamedTensors want = make_tensors(5);
  for (Layout layout : {Layout::zero_flat, Layout::interleaved})
    for (int world = 1; world <= 4; ++world) {
      SCOPED_TRACE("world " + std::to_string(world) + (layout == Layout::zero_flat ? " zero_flat" : " interleaved"));
      const std::string dir = path("ckpt_" + std::to_string(world) + "_" + std::to_string(int(layout)));
      const nlohmann::json meta = {{"step", 17}, {"lr", 1e-3}, {"betas", {0.9, 0.999}}};
      save(dir, want, world, layout, meta, world - 1);
      EXPECT_FALSE(fs::exists(dir + ".tmp"));
      for (int r = 0; r < world; ++r)
        EXPECT_TRUE(fs::exists(dir + "/" + detail::shard_file_name(r, world))) << r;
      const ShardedCheckpointReader rd(dir);
      EXPECT_EQ(rd.world_size(), world);
      EXPECT_EQ(rd.zero_stage(), world - 1);
      EXPECT_EQ(rd.meta(), meta);
      expect_matches(rd, want, /*every_range=*/true);
      // A replicated tensor is stored once, by its owner.
      ASSERT_EQ(rd.info("replicated.scale").pieces.size(), 1u);
      EXPECT_EQ(rd.info("replicated.scale").pieces[0].file, size_t(world - 1));
      EXPECT_TRUE(rd.info("empty").pieces.empty());
    }
}

TEST_F(ShardedCheckpointTest, ShardFilesAreSafetensorsOfBoxes) {
  const NamedTensors want = make_tensors(6);
  save(path("c"), want, 3, Layout::zero_flat);
  // Independent of the reader: the pieces of every file, put at their boxes, rebuild each
  // tensor; the index says where. A flat range is stored as at most 2(ndim-1)+1 boxes.
  const nlohmann::json index = nlohmann::json::parse(read_file_text(path("c/index.json")));
  EXPECT_EQ(index["format"], "strata-checkpoint");
  EXPECT_EQ(index["version"], 2);
  EXPECT_EQ(index["world_size"], 3);
  EXPECT_EQ(index["zero_stage"], 2);
  EXPECT_EQ(index["mesh"], (nlohmann::json{{"pp", 1}, {"dp", 3}, {"tp", 1}}));
  EXPECT_EQ(index["files"].size(), 3u);
  for (const auto& [name, t] : want) {
    const auto& e = index["tensors"][name];
    EXPECT_EQ(e["shape"].get<Shape>(), t.shape());
    EXPECT_EQ(e["dtype"], safetensors_dtype_name(t.dtype()));
    Tensor rebuilt = ops::zeros(t.shape(), t.dtype());
    int64_t covered = 0;
    for (const auto& p : e["pieces"]) {
      const NamedTensors file = load_safetensors(path("c/" + p["file"].get<std::string>()));
      const auto it = std::find_if(file.begin(), file.end(), [&](const auto& kv) { return kv.first == p["key"]; });
      ASSERT_NE(it, file.end()) << p.dump();
      const Box box{p["offsets"].get<std::vector<int64_t>>(), p["lengths"].get<std::vector<int64_t>>()};
      EXPECT_EQ(it->second.shape(), box.lengths) << p.dump();
      EXPECT_EQ(p["key"] == name, box == whole_box(t.shape())) << p.dump();  // whole pieces keep the plain name
      Tensor dst = rebuilt;
      for (size_t d = 0; d < box.ndim(); ++d) dst = ops::narrow(dst, int64_t(d), box.offsets[d], box.lengths[d]);
      ops::copy_(dst, it->second);
      covered += box.numel();
    }
    EXPECT_EQ(covered, t.numel()) << name;
    EXPECT_TRUE(same_bytes(rebuilt, t)) << name;
  }
  // Rank 0's part of layers.0.weight (7, 5) is flat [0, 5): one whole row.
  const ShardedCheckpointReader rd(path("c"));
  EXPECT_EQ(rd.mesh(), (MeshDims{{"pp", 1}, {"dp", 3}, {"tp", 1}}));
  EXPECT_EQ(rd.version(), 2);
}

TEST_F(ShardedCheckpointTest, ConsolidateEqualsOriginal) {
  const NamedTensors want = make_tensors(7);
  for (int world : {1, 4}) {
    const std::string dir = path("c" + std::to_string(world)), out = path("full" + std::to_string(world) + ".safetensors");
    save(dir, want, world, Layout::interleaved, {{"epoch", 3}}, 3);
    consolidate(dir, out);
    SafetensorsMetadata md;
    const NamedTensors got = load_safetensors(out, &md);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, t] : want) {
      const auto it = std::find_if(got.begin(), got.end(), [&](const auto& kv) { return kv.first == name; });
      ASSERT_NE(it, got.end()) << name;
      EXPECT_EQ(it->second.shape(), t.shape()) << name;
      EXPECT_TRUE(same_bytes(it->second, t)) << name;
    }
    EXPECT_EQ(nlohmann::json::parse(md.at("strata_meta")), (nlohmann::json{{"epoch", 3}}));
    EXPECT_EQ(md.at("strata_world_size"), std::to_string(world));
    EXPECT_EQ(md.at("strata_zero_stage"), "3");
    EXPECT_EQ(md.at("format"), "pt");
    // No temporary file is left beside the output.
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  }
}

// Resuming at another world size: each new rank reads its new shard straight into its
// buffer (read_into) and saves again; the result equals the original.
TEST_F(ShardedCheckpointTest, ReshardFromTwoToThreeRanks) {
  const NamedTensors want = make_tensors(8);
  save(path("w2"), want, 2, Layout::zero_flat);
  const ShardedCheckpointReader rd(path("w2"));
  comm::run_local(3, [&](comm::ProcessGroup& g) {
    std::vector<ShardPiece> mine = cut(want, g.rank(), 3, Layout::zero_flat);
    for (ShardPiece& p : mine) {
      Tensor buf = Tensor::empty({p.end - p.begin}, rd.dtype(p.name));
      rd.read_into(p.name, p.begin, p.end, buf);
      p.data = buf;
    }
    save_sharded(path("w3"), g, mine, 1, rd.meta());
  }, quick());
  const ShardedCheckpointReader rd3(path("w3"));
  EXPECT_EQ(rd3.world_size(), 3);
  expect_matches(rd3, want, false);
}

TEST_F(ShardedCheckpointTest, ConcurrentReadsFromThreads) {
  const NamedTensors want = make_tensors(9);
  save(path("c"), want, 4, Layout::interleaved);
  const ShardedCheckpointReader rd(path("c"));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (const auto& [name, v] : want) {
          const int64_t n = v.numel(), b = (rep * 7 + t) % (n + 1), e = std::min(n, b + rep % 5);
          if (!same_bytes(rd.read(name, b, e), ops::narrow(flat(v), 0, b, e - b))) ++bad;
        }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(ShardedCheckpointTest, OverwriteReplacesOldCheckpoint) {
  const std::string dir = path("c");
  save(dir, make_tensors(1), 4, Layout::zero_flat);
  const NamedTensors second = make_tensors(2);
  save(dir, second, 2, Layout::interleaved);  // fewer ranks: no stale shard files may remain
  EXPECT_FALSE(fs::exists(dir + "/" + detail::shard_file_name(3, 4)));
  EXPECT_FALSE(fs::exists(dir + ".tmp"));
  EXPECT_FALSE(fs::exists(dir + ".old"));
  const ShardedCheckpointReader rd(dir);
  EXPECT_EQ(rd.world_size(), 2);
  expect_matches(rd, second, false);
}

// ---------------------------------------------------------------- failed saves

TEST_F(ShardedCheckpointTest, CoverageHoleIsDataErrorAndGoodCheckpointSurvives) {
  const std::string dir = path("c");
  const NamedTensors good = make_tensors(3);
  save(dir, good, 3, Layout::zero_flat);
  const NamedTensors next = make_tensors(4);
  const std::string msg = failed_save<DataError>(3, [&](comm::ProcessGroup& g) {
    std::vector<ShardPiece> p = cut(next, g.rank(), 3, Layout::interleaved);
    if (g.rank() == 1)  // drop rank 1's second piece of layers.0.weight: elements [12, 15)
      p.erase(std::find_if(p.begin(), p.end(), [](const ShardPiece& s) { return s.name == "layers.0.weight" && s.begin == 12; }));
    save_sharded(dir, g, p, 2, {});
  });
  EXPECT_NE(msg.find("tensor 'layers.0.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("elements [12, 15)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in no piece"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hole before the piece [3:4, 0:3] in 'shard_00002_of_00003.safetensors'"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir + ".tmp"));
  const ShardedCheckpointReader rd(dir);  // the earlier checkpoint, untouched
  expect_matches(rd, good, false);
}

TEST_F(ShardedCheckpointTest, HoleAtTheTailIsDataError) {
  const NamedTensors t = make_tensors(3);
  const std::string msg = failed_save<DataError>(2, [&](comm::ProcessGroup& g) {
    std::vector<ShardPiece> p = cut(t, g.rank(), 2, Layout::zero_flat);
    for (ShardPiece& s : p)
      if (s.name == "opt.exp_avg_idx" && s.end == 29) {
        s.end = 28;
        s.data = ops::narrow(s.data, 0, 0, s.end - s.begin);
      }
    save_sharded(path("c"), g, p, 0, {});
  });
  EXPECT_NE(msg.find("tensor 'opt.exp_avg_idx': elements [28, 29) of 29"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path("c")));
  EXPECT_FALSE(fs::exists(path("c.tmp")));
}

TEST_F(ShardedCheckpointTest, OverlappingPiecesAreDataError) {
  const NamedTensors t = make_tensors(3);
  const std::string msg = failed_save<DataError>(4, [&](comm::ProcessGroup& g) {
    std::vector<ShardPiece> p = cut(t, g.rank(), 4, Layout::interleaved);
    if (g.rank() == 2)  // rank 2 also claims [3, 6) of layers.0.bias, which rank 1 holds
      p.push_back({"layers.0.bias", {13}, 3, 6, ops::narrow(t[1].second, 0, 3, 3)});
    save_sharded(path("c"), g, p, 2, {});
  });
  EXPECT_NE(msg.find("tensor 'layers.0.bias': pieces overlap: [3:6] in 'shard_00001_of_00004.safetensors' and "
                     "[3:6] in 'shard_00002_of_00004.safetensors'"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(path("c")));
  EXPECT_FALSE(fs::exists(path("c.tmp")));
}

TEST_F(ShardedCheckpointTest, DisagreeingShapeOrDtypeIsDataError) {
  const NamedTensors t = make_tensors(3);
  std::string msg = failed_save<DataError>(2, [&](comm::ProcessGroup& g) {
    std::vector<ShardPiece> p = cut(t, g.rank(), 2, Layout::interleaved);
    for (ShardPiece& s : p)
      if (g.rank() == 1 && s.name == "embed") s.data = ops::to_dtype(s.data, DType::f64);
    save_sharded(path("c"), g, p, 2, {});
  });
  EXPECT_NE(msg.find("tensor 'embed': pieces disagree on the dtype: F32"), std::string::npos) << msg;
  msg = failed_save<DataError>(2, [&](comm::ProcessGroup& g) {
    std::vector<ShardPiece> p = cut(t, g.rank(), 2, Layout::interleaved);
    for (ShardPiece& s : p)
      if (g.rank() == 0 && s.name == "embed") s.global_shape = {12, 6};
    save_sharded(path("c"), g, p, 2, {});
  });
  EXPECT_NE(msg.find("tensor 'embed': pieces disagree on the global shape"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path("c")));
}

TEST_F(ShardedCheckpointTest, BadPieceOnOneRankFailsEveryRank) {
  const NamedTensors t = make_tensors(3);
  const std::string msg = failed_save<Error>(3, [&](comm::ProcessGroup& g) {
    std::vector<ShardPiece> p = cut(t, g.rank(), 3, Layout::zero_flat);
    if (g.rank() == 2) p.back().data = ops::zeros({p.back().end - p.back().begin + 1}, DType::f64);
    save_sharded(path("c"), g, p, 1, {});
  });
  EXPECT_NE(msg.find("rank 2 failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'replicated.scale'"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path("c")));
  EXPECT_FALSE(fs::exists(path("c.tmp")));
  const std::string z = failed_save<Error>(2, [&](comm::ProcessGroup& g) {
    save_sharded(path("c"), g, cut(t, g.rank(), 2, Layout::zero_flat), g.rank() == 0 ? 1 : 2, {});
  });
  EXPECT_NE(z.find("disagree on the layout"), std::string::npos) << z;
  EXPECT_FALSE(fs::exists(path("c")));
}

TEST_F(ShardedCheckpointTest, RefusesToReplaceADirectoryThatIsNotACheckpoint) {
  const std::string dir = path("precious");
  fs::create_directories(dir);
  write_file_atomic(dir + "/notes.txt", std::string("keep me"));
  const std::string msg = failed_save<DataError>(2, [&](comm::ProcessGroup& g) {
    save_sharded(dir, g, cut(make_tensors(1), g.rank(), 2, Layout::zero_flat), 0, {});
  });
  EXPECT_NE(msg.find("is not a checkpoint"), std::string::npos) << msg;
  EXPECT_EQ(read_file_text(dir + "/notes.txt"), "keep me");
  EXPECT_FALSE(fs::exists(dir + ".tmp"));
}

TEST_F(ShardedCheckpointTest, StaleTmpDirIsReplaced) {
  fs::create_directories(path("c.tmp"));
  write_file_atomic(path("c.tmp/shard_00005_of_00009.safetensors"), std::string("junk from a crashed save"));
  const NamedTensors t = make_tensors(2);
  save(path("c"), t, 2, Layout::zero_flat);
  EXPECT_FALSE(fs::exists(path("c/shard_00005_of_00009.safetensors")));
  expect_matches(ShardedCheckpointReader(path("c")), t, false);
}

// ---------------------------------------------------------------- damaged checkpoints

template <class F>
std::string open_error(const std::string& dir, F&& also) {
  try {
    ShardedCheckpointReader rd(dir);
    also(rd);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}
std::string open_error(const std::string& dir) {
  return open_error(dir, [](ShardedCheckpointReader&) {});
}

TEST_F(ShardedCheckpointTest, DamagedFilesAreDataErrorsNamingFileAndTensor) {
  const NamedTensors t = make_tensors(3);
  const std::string dir = path("c");
  save(dir, t, 3, Layout::zero_flat);
  const std::string shard1 = dir + "/shard_00001_of_00003.safetensors";
  const std::string bytes = read_file_text(shard1);
  const std::string index = read_file_text(dir + "/index.json");
  auto restore = [&] {
    write_file_atomic(shard1, bytes);
    write_file_atomic(dir + "/index.json", index);
  };

  // Truncated shard: the file is named (the safetensors check catches it at open).
  write_file_atomic(shard1, bytes.substr(0, bytes.size() - 5));
  std::string msg = open_error(dir);
  EXPECT_NE(msg.find("shard_00001_of_00003.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;
  // consolidate fails the same way and writes nothing.
  EXPECT_THROW(consolidate(dir, path("out.safetensors")), DataError);
  EXPECT_FALSE(fs::exists(path("out.safetensors")));

  // Garbage header.
  std::string garbled = bytes;
  garbled[10] = '#';
  write_file_atomic(shard1, garbled);
  msg = open_error(dir);
  EXPECT_NE(msg.find("shard_00001_of_00003.safetensors"), std::string::npos) << msg;

  // Missing shard file.
  restore();
  fs::remove(shard1);
  msg = open_error(dir);
  EXPECT_NE(msg.find("shard_00001_of_00003.safetensors"), std::string::npos) << msg;

  // Index and file disagree: a key the file does not have, a dtype it does not hold.
  restore();
  nlohmann::json j = nlohmann::json::parse(index);
  for (auto& p : j["tensors"]["embed"]["pieces"])
    if (p["file"] == "shard_00001_of_00003.safetensors") p["key"] = "embed@0:9";
  write_file_atomic(dir + "/index.json", j.dump());
  msg = open_error(dir);
  EXPECT_NE(msg.find("shard_00001_of_00003.safetensors': tensor 'embed'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is missing"), std::string::npos) << msg;

  j = nlohmann::json::parse(index);
  j["tensors"]["layers.0.bias"]["dtype"] = "F32";
  write_file_atomic(dir + "/index.json", j.dump());
  msg = open_error(dir);
  EXPECT_NE(msg.find("tensor 'layers.0.bias'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("F64"), std::string::npos) << msg;

  // Index with a hole and with an overlap.
  j = nlohmann::json::parse(index);
  j["tensors"]["opt.exp_avg_idx"]["pieces"].erase(0);
  write_file_atomic(dir + "/index.json", j.dump());
  msg = open_error(dir);
  EXPECT_NE(msg.find("index.json': tensor 'opt.exp_avg_idx': elements [0, "), std::string::npos) << msg;
  j = nlohmann::json::parse(index);
  auto& pieces = j["tensors"]["embed"]["pieces"];
  ASSERT_GE(pieces.size(), 2u);
  pieces[1]["offsets"][0] = pieces[1]["offsets"][0].get<int64_t>() - 1;
  write_file_atomic(dir + "/index.json", j.dump());
  msg = open_error(dir);
  EXPECT_NE(msg.find("tensor 'embed': pieces overlap"), std::string::npos) << msg;

  // Newer format version, broken JSON, no index.
  j = nlohmann::json::parse(index);
  j["version"] = 3;
  write_file_atomic(dir + "/index.json", j.dump());
  EXPECT_NE(open_error(dir).find("format version 3 is not supported"), std::string::npos);
  write_file_atomic(dir + "/index.json", std::string("{\"format\": "));
  EXPECT_NE(open_error(dir).find("index.json': not valid JSON"), std::string::npos);
  fs::remove(dir + "/index.json");
  EXPECT_NE(open_error(dir).find("index.json"), std::string::npos);

  restore();
  expect_matches(ShardedCheckpointReader(dir), t, false);
  EXPECT_NE(open_error(dir, [](ShardedCheckpointReader& rd) { rd.dtype("nope"); }).find("no tensor 'nope'"),
            std::string::npos);
}

// A reader keeps reading the checkpoint it opened while a new save replaces the directory
// (an evaluator next to a training job): it holds the shard files open.
TEST_F(ShardedCheckpointTest, ReaderSurvivesReplacementOfItsDirectory) {
  const NamedTensors first = make_tensors(3), second = make_tensors(4);
  save(path("c"), first, 2, Layout::zero_flat);
  const ShardedCheckpointReader rd(path("c"));
  save(path("c"), second, 2, Layout::interleaved);
  expect_matches(rd, first, false);
  expect_matches(ShardedCheckpointReader(path("c")), second, false);
}

// ---------------------------------------------------------------- artifacts for ctest

// With STRATA_CKPT_E2E_DIR set (tests/ckpt.cmake), writes a 3-rank checkpoint, its
// library consolidation, a single-process checkpoint of the same tensors and the expected
// values as JSON, for the CLI and Python checks.
TEST(ShardedCheckpointE2E, WritesArtifacts) {
  const char* env = std::getenv("STRATA_CKPT_E2E_DIR");
  if (!env) GTEST_SKIP() << "STRATA_CKPT_E2E_DIR not set (run through ctest ckpt_e2e_write)";
  const std::string dir = env;
  fs::create_directories(dir);
  NamedTensors t = make_tensors(11);
  std::erase_if(t, [](const auto& kv) { return kv.second.dtype() == DType::f16; });  // numpy-friendly dtypes
  Tensor i32 = Tensor::empty({2, 3}, DType::i32);
  for (int i = 0; i < 6; ++i) i32.data<int32_t>()[i] = -3 + 1000000 * i;
  t.emplace_back("counts", i32);
  save(dir + "/ckpt", t, 3, Layout::zero_flat);
  consolidate(dir + "/ckpt", dir + "/library.safetensors");
  RankPieces whole;  // the same tensors from one process: its shard file is a plain safetensors file
  for (const auto& [name, v] : t) whole.boxes.push_back({name, v.shape(), whole_box(v.shape()), v});
  save_single(dir + "/single", whole, {}, {{"step", 17}});
  nlohmann::json want = nlohmann::json::object();
  for (const auto& [name, v] : t) {
    nlohmann::json values = nlohmann::json::array();
    const Tensor f = flat(v);
    visit_dtype(v.dtype(), [&](auto x) {
      using T = decltype(x);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_integral_v<T>)
        for (int64_t i = 0; i < f.numel(); ++i) values.push_back(f.data<T>()[i]);
    });
    want[name] = {{"dtype", safetensors_dtype_name(v.dtype())}, {"shape", v.shape()}, {"values", values}};
  }
  write_file_atomic(dir + "/expected.json", want.dump(1));
}

}  // namespace
}  // namespace strata::parallel
