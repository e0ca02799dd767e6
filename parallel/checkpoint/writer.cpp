// Checkpoint save as a three-step collective (check pieces, write files, commit), each step
// ending in an exchange of every rank's status so that all ranks succeed or all throw the
// same error. With no group (save_single) the exchanges are local.
#include <strata/parallel/checkpoint/writer.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>
#include <strata/tensor/safetensors.h>

namespace strata::parallel {
namespace fs = std::filesystem;
namespace {

using detail::join;
using detail::strip_slashes;

using detail::PieceRecord;

// Every rank's bytes on every rank: lengths first, then one all_gather padded to the max,
// rounded up to 64 bytes. The rounding keeps the buffers' size class when a payload's
// length moves by a character between checkpoints: step 2's {"bytes":N,"crc32":C} is 80
// or 81 characters as the CRC has 9 or 10 decimal digits, and at 4 ranks 320 or 324
// bytes straddle two size classes of the caching allocator, whose reserve then grew by a
// block the first time the smaller one came up (bench soak, docs/reliability.md).
std::vector<std::string> all_gather_bytes(comm::ProcessGroup* group, const std::string& mine) {
  if (!group) return {mine};
  const int n = group->size();
  const Tensor lens = comm::all_gather_host(*group, ops::from_vector(std::vector<int64_t>{int64_t(mine.size())}, {1}));
  const int64_t* l = lens.data<int64_t>();
  const int64_t width = (std::max<int64_t>(1, *std::max_element(l, l + n)) + 63) / 64 * 64;
  Tensor buf = ops::zeros({width}, DType::u8);
  std::memcpy(buf.data<uint8_t>(), mine.data(), mine.size());
  const Tensor all = comm::all_gather_host(*group, buf);
  std::vector<std::string> out(static_cast<size_t>(n));
  const char* p = reinterpret_cast<const char*>(all.data<uint8_t>());
  for (int r = 0; r < n; ++r) out[size_t(r)].assign(p + int64_t(r) * width, size_t(l[r]));
  return out;
}

// What a rank reports at a synchronisation point: its failure (if any) and a payload.
struct Status {
  bool ok = true;
  bool data_error = false;  // DataError (else Error)
  std::string error;
  nlohmann::json payload;
};

template <class F>
Status run_step(F&& f) {
  Status s;
  try {
    f(s.payload);
  } catch (const DataError& e) {
    s = {false, true, e.what(), {}};
  } catch (const std::exception& e) {
    s = {false, false, e.what(), {}};
  }
  return s;
}

// Exchanges statuses; every rank gets every rank's payload, or every rank throws the
// first failing rank's error (prefixed with that rank) so all ranks report the same.
std::vector<nlohmann::json> exchange(comm::ProcessGroup* group, const Status& mine, const std::string& dir,
                                     const std::function<void()>& on_failure = {}) {
  const nlohmann::json j = {{"ok", mine.ok}, {"data", mine.data_error}, {"error", mine.error},
                            {"payload", mine.payload}};
  // Never throws on odd bytes (a rank that threw here would leave the others waiting).
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::vector<std::string> all = all_gather_bytes(group, text);
  std::vector<nlohmann::json> payloads;
  payloads.reserve(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const nlohmann::json s = nlohmann::json::parse(all[r]);
    if (!s["ok"].get<bool>()) {
      if (on_failure) on_failure();
      const std::string msg = strata::detail::str_cat("[save checkpoint] '", dir, "': rank ", r,
                                                      " failed (nothing was saved): ", s["error"].get<std::string>());
      if (s["data"].get<bool>()) throw DataError(msg);
      throw Error(msg);
    }
    payloads.push_back(s["payload"]);
  }
  return payloads;
}

bool is_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && (fs::is_empty(dir, ec) || fs::exists(join(dir, kIndexFile), ec) ||
                                       fs::exists(join(dir, kV1StateFile), ec));
}

// Checks one rank's pieces and turns them into boxes: records (for the index) and the
// tensors to store (views of the pieces' data at their boxes' shapes).
void prepare_pieces(const RankPieces& in, const std::string& file, std::vector<PieceRecord>& records,
                    NamedTensors& to_write) {
  auto add = [&](const std::string& name, const Shape& shape, const Box& box, const Tensor& data, bool stored) {
    PieceRecord r{name, safetensors_dtype_name(data.dtype()), shape, box, {}, {}};
    if (stored) {
      r.file = file;
      r.key = detail::piece_key(name, box, shape);
      to_write.emplace_back(r.key, data.shape() == box.lengths ? data : ops::reshape(data, box.lengths));
    }
    records.push_back(std::move(r));
  };
  auto check_common = [](const std::string& what, const std::string& name, const Shape& shape, const Tensor& data,
                         int64_t numel) {
    STRATA_CHECK(!name.empty(), "[save checkpoint] a piece has an empty tensor name");
    int64_t n = 1;
    for (int64_t d : shape) STRATA_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n), what, ": invalid global shape ", shape_str(shape));
    STRATA_CHECK(data.defined(), what, ": data is undefined (pass a 0-element tensor for an empty piece)");
    STRATA_CHECK(data.numel() == numel, what, ": data has ", data.numel(), " elements (", data.str(), "), expected ", numel);
  };
  for (const ShardPiece& p : in.ranges) {
    const std::string what = strata::detail::str_cat("[save checkpoint] tensor '", p.name, "' piece [", p.begin, ", ", p.end, ")");
    check_common(what, p.name, p.global_shape, p.data, p.end - p.begin);
    STRATA_CHECK(0 <= p.begin && p.begin <= p.end && p.end <= shape_numel(p.global_shape), what,
                 ": range outside [0, ", shape_numel(p.global_shape), ") of global shape ", shape_str(p.global_shape));
    if (p.begin == p.end) {  // a declaration
      add(p.name, p.global_shape, Box{std::vector<int64_t>(p.global_shape.size(), 0),
                                      std::vector<int64_t>(p.global_shape.size(), 0)}, p.data, false);
      continue;
    }
    const Tensor flat = p.data.dim() == 1 ? p.data : ops::reshape(p.data, {p.end - p.begin});
    for (const FlatBox& fb : flat_range_to_boxes(p.global_shape, p.begin, p.end))
      add(p.name, p.global_shape, fb.box, ops::narrow(flat, 0, fb.flat_begin - p.begin, fb.box.numel()), true);
  }
  for (const BoxPiece& p : in.boxes) {
    const std::string what = strata::detail::str_cat("[save checkpoint] tensor '", p.name, "' box ", box_str(p.box));
    STRATA_CHECK(box_inside(p.box, p.global_shape), what, ": outside the global shape ", shape_str(p.global_shape));
    check_common(what, p.name, p.global_shape, p.data, p.box.numel());
    // A whole empty tensor is stored too, so a one-file checkpoint lists every tensor.
    add(p.name, p.global_shape, p.box, p.data, !p.box.empty() || p.box == whole_box(p.global_shape));
  }
}

nlohmann::json record_to_json(const PieceRecord& r) {
  return nlohmann::json::array({r.name, r.dtype, r.shape, r.box.offsets, r.box.lengths, !r.file.empty()});
}

MeshDims resolve_mesh(const CheckpointLayout& layout, int world) {
  MeshDims mesh = layout.mesh.empty() ? MeshDims{{"pp", 1}, {"dp", world}, {"tp", 1}} : layout.mesh;
  int64_t product = 1;
  for (const auto& [name, size] : mesh) {
    STRATA_CHECK(!name.empty() && size >= 1, "[save checkpoint] mesh dimension '", name, "' of size ", size);
    product *= size;
  }
  STRATA_CHECK(product == world, "[save checkpoint] the mesh sizes multiply to ", product, " but ", world,
               " rank(s) write the checkpoint");
  return mesh;
}

// The index.json text (keys in a readable order).
std::string index_text(int world, const MeshDims& mesh, int zero_stage, const std::vector<std::string>& files,
                       const std::vector<uint32_t>& crcs, const nlohmann::json& meta,
                       const std::vector<PieceRecord>& records) {
  using ojson = nlohmann::ordered_json;
  ojson m = ojson::object();
  for (const auto& [name, size] : mesh) m[name] = size;
  std::vector<const PieceRecord*> sorted;
  for (const PieceRecord& r : records) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(), [](const PieceRecord* a, const PieceRecord* b) {
    return a->name != b->name ? a->name < b->name : a->box.offsets < b->box.offsets;
  });
  ojson tensors = ojson::object();
  for (const PieceRecord* r : sorted) {
    ojson& t = tensors[r->name];
    if (t.is_null()) t = {{"dtype", r->dtype}, {"shape", r->shape}, {"pieces", ojson::array()}};
    if (!r->file.empty())
      t["pieces"].push_back(
          {{"file", r->file}, {"key", r->key}, {"offsets", r->box.offsets}, {"lengths", r->box.lengths}});
  }
  ojson sums = ojson::object();
  for (size_t f = 0; f < files.size(); ++f) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%08x", crcs[f]);
    sums[files[f]] = {{"crc32", hex}};
  }
  const ojson index = {{"format", kCheckpointFormat}, {"version", kCheckpointVersion},
                       {"world_size", world},         {"mesh", std::move(m)},
                       {"zero_stage", zero_stage},    {"files", files},
                       {"checksums", std::move(sums)},
                       {"meta", ojson::parse(meta.dump())}, {"tensors", std::move(tensors)}};
  return index.dump(1) + "\n";
}

void save_impl(const std::string& dir_arg, comm::ProcessGroup* group, const RankPieces& pieces,
               const CheckpointLayout& layout, const nlohmann::json& meta) {
  const std::string dir = strip_slashes(dir_arg);
  const std::string tmp = dir + ".tmp";
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const std::string my_file = detail::shard_file_name(rank, world);

  // Step 1: rank 0 prepares "<dir>.tmp"; every rank checks its pieces and sends their list.
  std::vector<PieceRecord> mine;
  NamedTensors to_write;
  MeshDims mesh;
  Status s1 = run_step([&](nlohmann::json& payload) {
    STRATA_CHECK(!dir.empty(), "[save checkpoint] empty checkpoint directory");
    mesh = resolve_mesh(layout, world);
    prepare_pieces(pieces, my_file, mine, to_write);
    if (rank == 0) {
      std::error_code ec;
      if (fs::exists(dir, ec) && !is_checkpoint_dir(dir))
        STRATA_THROW(DataError, "[save checkpoint] '", dir, "' exists and is not a checkpoint (no ", kIndexFile,
                     " or ", kV1StateFile, "); refusing to replace it");
      fs::remove_all(tmp, ec);
      if (ec) STRATA_THROW(DataError, "[save checkpoint] cannot remove the stale '", tmp, "': ", ec.message());
      fs::create_directories(tmp, ec);
      if (ec) STRATA_THROW(DataError, "[save checkpoint] cannot create '", tmp, "': ", ec.message());
    }
    nlohmann::json list = nlohmann::json::array();
    for (const PieceRecord& r : mine) list.push_back(record_to_json(r));
    payload = {{"dir", dir}, {"layout", {{"zero_stage", layout.zero_stage}, {"mesh", mesh}}}, {"pieces", std::move(list)}};
  });
  auto cleanup = [&] {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  };
  const std::vector<nlohmann::json> all = exchange(group, s1, dir, cleanup);

  // Every rank runs the same checks on the same lists, so all agree without a message.
  std::vector<PieceRecord> records;
  try {
    for (int r = 0; r < world; ++r) {
      const nlohmann::json& p = all[size_t(r)];
      if (p["dir"] != all[0]["dir"])
        STRATA_THROW(Error, "[save checkpoint] ranks disagree on the directory: rank 0 passed ", all[0]["dir"].dump(),
                     ", rank ", r, " passed ", p["dir"].dump());
      if (p["layout"] != all[0]["layout"])
        STRATA_THROW(Error, "[save checkpoint] '", dir, "': ranks disagree on the layout (mesh, zero_stage): rank 0 passed ",
                     all[0]["layout"].dump(), ", rank ", r, " passed ", p["layout"].dump());
      const std::string file = detail::shard_file_name(r, world);
      for (const auto& e : p["pieces"]) {
        PieceRecord rec{e[0].get<std::string>(), e[1].get<std::string>(), e[2].get<Shape>(),
                        Box{e[3].get<std::vector<int64_t>>(), e[4].get<std::vector<int64_t>>()}, {}, {}};
        if (e[5].get<bool>()) {
          rec.file = file;
          rec.key = detail::piece_key(rec.name, rec.box, rec.shape);
        }
        records.push_back(std::move(rec));
      }
    }
    detail::check_coverage(records, "[save checkpoint] '" + dir + "'");
  } catch (...) {
    cleanup();
    throw;
  }

  // Step 2: every rank writes its file; rank 0 learns the sizes.
  Status s2 = run_step([&](nlohmann::json& payload) {
    const std::string path = join(tmp, my_file);
    const uint32_t crc = save_safetensors(
        path, to_write,
        {{"format", "pt"}, {"strata_rank", std::to_string(rank)}, {"strata_world_size", std::to_string(world)}});
    payload = {{"bytes", fs::file_size(path)}, {"crc32", crc}};
  });
  const std::vector<nlohmann::json> written = exchange(group, s2, dir, cleanup);

  // Step 3: rank 0 checks it sees every file, writes the index and commits; all learn the outcome.
  Status s3 = run_step([&](nlohmann::json&) {
    if (rank != 0) return;
    std::vector<std::string> files;
    std::vector<uint32_t> crcs;
    for (int r = 0; r < world; ++r) {
      const std::string name = detail::shard_file_name(r, world);
      std::error_code ec;
      const uintmax_t size = fs::file_size(join(tmp, name), ec);
      if (ec || size != written[size_t(r)]["bytes"].get<uintmax_t>())
        STRATA_THROW(DataError, "[save checkpoint] '", join(tmp, name), "' written by rank ", r,
                     " is not visible to rank 0 as written (", ec ? ec.message() : strata::detail::str_cat(size, " bytes"),
                     "): the checkpoint directory must be on a filesystem all ranks share");
      files.push_back(name);
      crcs.push_back(written[size_t(r)]["crc32"].get<uint32_t>());
    }
    write_file_atomic(join(tmp, kIndexFile), index_text(world, mesh, layout.zero_stage, files, crcs, meta, records));
    commit_dir(tmp, dir);
  });
  if (!s3.ok) cleanup();
  exchange(group, s3, dir);  // doubles as the final barrier
}

}  // namespace

void save_sharded(const std::string& dir, comm::ProcessGroup& group, const RankPieces& mine,
                  const CheckpointLayout& layout, const nlohmann::json& meta) {
  save_impl(dir, &group, mine, layout, meta);
}

void save_sharded(const std::string& dir, comm::ProcessGroup& group, const std::vector<ShardPiece>& my_pieces,
                  int zero_stage, const nlohmann::json& meta) {
  save_impl(dir, &group, RankPieces{my_pieces, {}}, CheckpointLayout{{}, zero_stage}, meta);
}

void save_single(const std::string& dir, const RankPieces& pieces, const CheckpointLayout& layout,
                 const nlohmann::json& meta) {
  save_impl(dir, nullptr, pieces, layout, meta);
}

}  // namespace strata::parallel
