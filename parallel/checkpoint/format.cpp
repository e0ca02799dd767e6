// File names, piece keys and the coverage check of checkpoint format v2.
#include <strata/parallel/checkpoint/format.h>

#include <cstdio>
#include <filesystem>
#include <map>

namespace strata::parallel::detail {
namespace {

// numel of a shape read from a file: every dim >= 0 and the product fits in int64.
bool checked_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  return true;
}

}  // namespace

std::string shard_file_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "shard_%05d_of_%05d.safetensors", rank, world);
  return buf;
}

std::string piece_key(const std::string& name, const Box& box, const Shape& shape) {
  if (box == whole_box(shape)) return name;
  std::string k = name + "@";
  for (size_t d = 0; d < box.ndim(); ++d) {
    if (d) k += ',';
    k += std::to_string(box.offsets[d]);
    k += ':';
    k += std::to_string(box.offsets[d] + box.lengths[d]);
  }
  return k;
}

std::string strip_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

void check_coverage(const std::vector<PieceRecord>& records, const std::string& where) {
  std::map<std::string, std::vector<const PieceRecord*>> by_name;
  for (const PieceRecord& r : records) by_name[r.name].push_back(&r);
  auto in = [](const PieceRecord* p) { return p->file.empty() ? std::string() : " in '" + p->file + "'"; };
  for (auto& entry : by_name) {
    const std::string& name = entry.first;  // not a structured binding: clang 14 cannot capture one
    std::vector<const PieceRecord*>& ps = entry.second;
    auto fail = [&](const auto&... msg) { STRATA_THROW(DataError, where, ": tensor '", name, "': ", msg...); };
    const PieceRecord& first = *ps.front();
    if (!checked_numel(first.shape)) fail("invalid global shape ", shape_str(first.shape));
    std::vector<Box> boxes;  // of the stored pieces
    std::vector<const PieceRecord*> stored;
    for (const PieceRecord* p : ps) {
      if (p->dtype != first.dtype)
        fail("pieces disagree on the dtype: ", first.dtype, in(&first), " vs ", p->dtype, in(p));
      if (p->shape != first.shape)
        fail("pieces disagree on the global shape: ", shape_str(first.shape), in(&first), " vs ",
             shape_str(p->shape), in(p));
      if (p->file.empty()) continue;  // a declaration
      boxes.push_back(p->box);
      stored.push_back(p);
    }
    const auto err = check_tiling(first.shape, boxes);
    if (!err) continue;
    const PieceRecord* a = err->kind == TilingError::Kind::gap ? nullptr : stored[err->a];
    const PieceRecord* b = err->kind == TilingError::Kind::gap ? nullptr : stored[err->b];
    if (err->kind == TilingError::Kind::outside)
      fail("piece ", box_str(a->box), in(a), " is outside the global shape ", shape_str(first.shape));
    if (err->kind == TilingError::Kind::overlap)
      fail("pieces overlap: ", box_str(a->box), in(a), " and ", box_str(b->box), in(b));
    std::string next;  // the piece right after the hole, if any
    if (err->gap_end < shape_numel(first.shape)) {
      Box at{std::vector<int64_t>(first.shape.size()), std::vector<int64_t>(first.shape.size(), 1)};
      for (size_t d = first.shape.size(), rest = size_t(err->gap_end); d-- > 0;) {
        at.offsets[d] = int64_t(rest % size_t(first.shape[d]));
        rest /= size_t(first.shape[d]);
      }
      for (const PieceRecord* p : stored)
        if (intersect(p->box, at)) next = " (hole before the piece " + box_str(p->box) + in(p) + ")";
    }
    fail("elements [", err->gap_begin, ", ", err->gap_end, ") of ", shape_numel(first.shape),
         " (row-major; global shape ", shape_str(first.shape), ") are in no piece", next);
  }
}

}  // namespace strata::parallel::detail
