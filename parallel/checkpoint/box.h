// N-dimensional boxes of a row-major tensor, the unit of checkpoint format v2 (as in
// torch.distributed.checkpoint's chunks): pure arithmetic for intersection, cutting a flat
// row-major range into boxes, the tiling check and the contiguous runs a sub-box copy needs.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <strata/tensor/tensor.h>

namespace strata::parallel {

/// The elements [offsets[d], offsets[d] + lengths[d]) along every dimension d of a tensor.
/// A 0-d box (no dimensions) is the one element of a scalar.
struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;

  size_t ndim() const { return offsets.size(); }
  int64_t numel() const;
  bool empty() const { return numel() == 0; }
  bool operator==(const Box&) const = default;
};

/// The box of a whole tensor of `shape`.
Box whole_box(const Shape& shape);
/// "[0:3, 2:5]" (half-open per dimension); "[]" for a scalar.
std::string box_str(const Box& b);
/// True when `b` has shape's rank, non-negative lengths and lies inside [0, shape).
bool box_inside(const Box& b, const Shape& shape);
/// The common elements of two boxes of the same rank, or nullopt when they share none.
std::optional<Box> intersect(const Box& a, const Box& b);

/// One box of a flat range, with the flat index of its first element.
struct FlatBox {
  Box box;
  int64_t flat_begin = 0;
};
/// The row-major range [begin, end) of a tensor of `shape` as at most 2(ndim-1)+1 boxes,
/// in flat order (each covers a contiguous flat sub-range; together exactly [begin, end)).
/// Empty for begin == end. Requires 0 <= begin <= end <= numel(shape).
std::vector<FlatBox> flat_range_to_boxes(const Shape& shape, int64_t begin, int64_t end);

/// The contiguous flat runs [begin, end) of `b` inside a row-major tensor of `shape`, in
/// order (a box spanning the trailing dimensions is one run).
std::vector<std::pair<int64_t, int64_t>> box_runs(const Box& b, const Shape& shape);

/// Why a set of boxes does not tile a tensor.
struct TilingError {
  enum class Kind { outside, overlap, gap } kind = Kind::gap;
  size_t a = 0, b = 0;         // outside: box a; overlap: boxes a and b (indices into the input)
  int64_t gap_begin = 0;       // gap: the first uncovered flat range [gap_begin, gap_end)
  int64_t gap_end = 0;
};
/// Checks that the non-empty boxes cover every element of a tensor of `shape` exactly
/// once (empty boxes are ignored). Returns the first problem found, or nullopt.
/// O(P log P) plus the pairs of boxes that overlap along dimension 0.
std::optional<TilingError> check_tiling(const Shape& shape, const std::vector<Box>& boxes);

/// The copies that move region `inter` between two row-major arrays, `src` holding box
/// `src_box` and `dst` holding box `dst_box` (inter lies inside both): calls
/// fn(src_element_offset, dst_element_offset, count) for each maximal run contiguous in
/// both, in increasing order of both offsets.
void for_each_copy_run(const Box& inter, const Box& src_box, const Box& dst_box,
                       const std::function<void(int64_t src, int64_t dst, int64_t count)>& fn);

}  // namespace strata::parallel
