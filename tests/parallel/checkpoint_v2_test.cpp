// Checkpoint format v2 beyond flat pieces: tensor-parallel boxes mixed with ZeRO ranges
// and whole tensors on 4 local ranks, read back at arbitrary boxes; the recorded mesh; a
// single-process checkpoint that is a plain safetensors file; and reads that touch only
// the bytes of the requested box (measured with the kernel's per-process read counter).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <strata/comm/local.h>
#include <strata/core/rng.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>
#include "tests/temp_dir_fixture.h"

namespace strata::parallel {
namespace {
namespace fs = std::filesystem;

Tensor view_of(const Tensor& t, const Box& b) {
  Tensor v = t;
  for (size_t d = 0; d < b.ndim(); ++d) v = ops::narrow(v, int64_t(d), b.offsets[d], b.lengths[d]);
  return v;
}

bool same(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel()) return false;
  const Tensor ca = ops::contiguous(a), cb = ops::contiguous(b);
  return a.numel() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), size_t(ca.nbytes())) == 0;
}

struct Tensors {
  Tensor colwise, rowwise, flat, scalar;
  explicit Tensors(uint64_t seed) {
    Generator g(seed);
    colwise = ops::uniform({6, 8}, -1, 1, g);                 // TP column shards: [0:6, 2r:2r+2]
    rowwise = ops::uniform({10, 4}, -1, 1, g, DType::f64);    // uneven row shards
    flat = ops::uniform({3, 4, 5}, -1, 1, g);                 // ZeRO flat ranges
    scalar = ops::full({}, 42.0, DType::i64);                 // rank 0, whole
  }
};

// Rank r's pieces of a world of 4.
RankPieces pieces_of(const Tensors& t, int r) {
  RankPieces p;
  const Box col{{0, 2 * r}, {6, 2}};
  p.boxes.push_back({"colwise", {6, 8}, col, ops::contiguous(view_of(t.colwise, col))});
  const int64_t rows[5] = {0, 1, 4, 4, 10};  // rank 2 holds no row: it declares the tensor
  const Box row{{rows[r], 0}, {rows[r + 1] - rows[r], 4}};
  p.boxes.push_back({"rowwise", {10, 4}, row, ops::contiguous(view_of(t.rowwise, row))});
  const int64_t cut[5] = {0, 7, 8, 33, 60};
  p.ranges.push_back({"flat", {3, 4, 5}, cut[r], cut[r + 1], ops::narrow(ops::flatten(t.flat), 0, cut[r], cut[r + 1] - cut[r])});
  if (r == 0) p.boxes.push_back({"scalar", {}, Box{}, t.scalar});
  return p;
}

class CheckpointV2Test : public strata::testing::TempDirTest {};

TEST_F(CheckpointV2Test, BoxesAndRangesOfFourRanksReadAtAnyBox) {
  const Tensors t(3);
  const CheckpointLayout layout{{{"pp", 1}, {"dp", 2}, {"tp", 2}}, 1};
  comm::run_local(4, [&](comm::ProcessGroup& g) { save_sharded(path("c"), g, pieces_of(t, g.rank()), layout, {{"k", 1}}); });
  const CheckpointReader rd(path("c"));
  EXPECT_EQ(rd.mesh(), layout.mesh);
  EXPECT_EQ(rd.zero_stage(), 1);
  EXPECT_EQ(rd.world_size(), 4);
  EXPECT_EQ(rd.info("colwise").pieces.size(), 4u);
  EXPECT_EQ(rd.info("rowwise").pieces.size(), 3u);
  // The mesh is written in grid order.
  const std::string index = read_file_text(path("c/index.json"));
  EXPECT_NE(index.find("\"mesh\": {\n  \"pp\": 1,\n  \"dp\": 2,\n  \"tp\": 2\n }"), std::string::npos) << index;

  std::mt19937 rng(5);
  for (const auto& [name, full] : {std::pair<std::string, Tensor>{"colwise", t.colwise}, {"rowwise", t.rowwise}, {"flat", t.flat}}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(same(rd.read_full(name), full));
    for (int rep = 0; rep < 200; ++rep) {
      Box b{std::vector<int64_t>(full.dim()), std::vector<int64_t>(full.dim())};
      for (size_t d = 0; d < b.ndim(); ++d) {
        b.offsets[d] = std::uniform_int_distribution<int64_t>(0, full.shape()[d])(rng);
        b.lengths[d] = std::uniform_int_distribution<int64_t>(0, full.shape()[d] - b.offsets[d])(rng);
      }
      const Tensor got = rd.read_box(name, b);
      ASSERT_EQ(got.shape(), b.lengths);
      ASSERT_TRUE(same(got, view_of(full, b))) << box_str(b);
      Tensor into = Tensor::empty({b.numel()}, full.dtype());  // any shape with box.numel() elements
      rd.read_box(name, b, into);
      ASSERT_TRUE(same(into, view_of(full, b))) << box_str(b);
    }
    const int64_t n = full.numel();
    for (int64_t b = 0; b <= n; b += 3)
      for (int64_t e = b; e <= n; e += 5) ASSERT_TRUE(same(rd.read(name, b, e), ops::narrow(ops::flatten(full), 0, b, e - b)));
  }
  EXPECT_EQ(rd.read_full("scalar").item<int64_t>(), 42);
  EXPECT_THROW(rd.read_box("colwise", Box{{0, 7}, {1, 2}}), Error);          // outside
  EXPECT_THROW(rd.read_box("colwise", Box{{0, 0}, {1, 2}}, Tensor::empty({3})), Error);  // wrong dst size
}

TEST_F(CheckpointV2Test, BadLayoutOrBoxFailsEveryRank) {
  const Tensors t(4);
  auto failed = [&](const CheckpointLayout& layout, int bad_rank) {
    std::vector<std::string> msg(2);
    comm::run_local(2, [&](comm::ProcessGroup& g) {
      RankPieces p;
      p.boxes.push_back({"colwise", {6, 8}, Box{{0, 4 * g.rank()}, {6, 4}}, ops::contiguous(view_of(t.colwise, Box{{0, 4 * g.rank()}, {6, 4}}))});
      if (g.rank() == bad_rank) p.boxes[0].box = Box{{0, 6}, {6, 4}};  // runs past column 8
      try {
        save_sharded(path("c"), g, p, layout, {});
      } catch (const Error& e) {
        msg[size_t(g.rank())] = e.what();
      }
    });
    EXPECT_EQ(msg[0], msg[1]);
    EXPECT_FALSE(fs::exists(path("c")));
    return msg[0];
  };
  EXPECT_NE(failed({{{"dp", 3}}, 0}, -1).find("multiply to 3 but 2 rank(s)"), std::string::npos);
  const std::string m = failed({{}, 0}, 1);
  EXPECT_NE(m.find("rank 1 failed"), std::string::npos) << m;
  EXPECT_NE(m.find("tensor 'colwise' box [0:6, 6:10]: outside the global shape (6,8)"), std::string::npos) << m;
}

TEST_F(CheckpointV2Test, SingleProcessCheckpointIsOnePlainSafetensorsFile) {
  const Tensors t(5);
  RankPieces p;
  for (const auto& [name, v] : {std::pair<std::string, Tensor>{"colwise", t.colwise}, {"rowwise", t.rowwise},
                                {"scalar", t.scalar}, {"empty", Tensor::empty({0, 3})}})
    p.boxes.push_back({name, v.shape(), whole_box(v.shape()), v});
  save_single(path("c"), p, {}, {{"step", 3}});
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path("c"))) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"index.json", "shard_00000_of_00001.safetensors"}));
  // Any safetensors reader sees the true names and shapes.
  const NamedTensors plain = load_safetensors(path("c/shard_00000_of_00001.safetensors"));
  ASSERT_EQ(plain.size(), 4u);
  for (const auto& [name, v] : plain) {
    const BoxPiece& want = *std::find_if(p.boxes.begin(), p.boxes.end(), [&](const BoxPiece& b) { return b.name == name; });
    EXPECT_EQ(v.shape(), want.global_shape) << name;
    EXPECT_TRUE(same(v, want.data)) << name;
  }
  const CheckpointReader rd(path("c"));
  EXPECT_EQ(rd.mesh(), (MeshDims{{"pp", 1}, {"dp", 1}, {"tp", 1}}));
  EXPECT_EQ(rd.global_shape("empty"), (Shape{0, 3}));
  EXPECT_EQ(rd.meta(), (nlohmann::json{{"step", 3}}));
}

// Bytes read by this process through read(2)/pread(2) (Linux /proc/self/io "rchar").
int64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t v = 0;
  while (io >> key >> v)
    if (key == "rchar:") return v;
  return -1;
}

TEST_F(CheckpointV2Test, ReadingABoxReadsOnlyItsRuns) {
  if (bytes_read_so_far() < 0) GTEST_SKIP() << "no /proc/self/io on this system";
  Generator g(1);
  const Tensor big = ops::uniform({2048, 256}, -1, 1, g);  // 2 MiB, rows of 1 KiB
  comm::run_local(2, [&](comm::ProcessGroup& grp) {
    const int64_t half = 2048 * 256 / 2;
    save_sharded(path("c"), grp, std::vector<ShardPiece>{{"big", {2048, 256}, grp.rank() * half, (grp.rank() + 1) * half,
                                                            ops::narrow(ops::flatten(big), 0, grp.rank() * half, half)}},
                 3, {});
  });
  const CheckpointReader rd(path("c"));
  const int64_t probe = bytes_read_so_far();
  // Reading /proc/self/io counts too (its length varies by a few digits: kSlack).
  const int64_t overhead = bytes_read_so_far() - probe;
  constexpr int64_t kSlack = 32;
  struct Case {
    Box box;
    int64_t max_bytes;  // what the box needs, plus at most one 4 KiB gap per run merged
  };
  for (const Case& c : {Case{{{1000, 0}, {40, 256}}, 40 * 1024},         // 40 whole rows across both files: 2 runs
                        Case{{{10, 64}, {100, 16}}, 100 * 64 + 99 * 1024}, // a column strip: 100 runs of 64 B, gaps merged
                        Case{{{0, 0}, {1, 1}}, 4}}) {
    const int64_t before = bytes_read_so_far();
    const Tensor got = rd.read_box("big", c.box);
    const int64_t used = bytes_read_so_far() - before - overhead;
    EXPECT_TRUE(same(got, view_of(big, c.box))) << box_str(c.box);
    EXPECT_GE(used + kSlack, c.box.numel() * 4) << box_str(c.box);
    EXPECT_LE(used, c.max_bytes + kSlack) << box_str(c.box) << ": read " << used << " bytes of a " << 2048 * 256 * 4 << "-byte tensor";
  }
}

}  // namespace
}  // namespace strata::parallel
