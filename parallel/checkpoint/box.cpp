// Box arithmetic for checkpoint pieces (see box.h). Everything here is pure and
// allocation-light; the reader and writer call it per tensor.
#include <strata/parallel/checkpoint/box.h>

#include <algorithm>
#include <numeric>

namespace strata::parallel {
namespace {

// Row-major element strides of `dims`.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
  return s;
}

// [b, e) lies inside one index of every dimension before k (one block of stride[k-1]).
void split_range(const Shape& shape, const std::vector<int64_t>& stride, int64_t b, int64_t e, size_t k,
                 std::vector<FlatBox>& out) {
  if (b >= e) return;
  const int64_t s = stride[k];
  const int64_t lo = (b + s - 1) / s * s, hi = e / s * s;
  if (lo > hi) {  // inside one index of dim k (s > 1, so dim k + 1 exists)
    split_range(shape, stride, b, e, k + 1, out);
    return;
  }
  split_range(shape, stride, b, lo, k + 1, out);  // head: the rest of a partial index of dim k
  if (lo < hi) {                                  // whole indices [lo/s, hi/s) of dim k
    FlatBox fb{{std::vector<int64_t>(shape.size(), 0), std::vector<int64_t>(shape)}, lo};
    for (size_t d = 0; d <= k; ++d) {
      fb.box.offsets[d] = (lo / stride[d]) % shape[d];
      fb.box.lengths[d] = 1;
    }
    fb.box.lengths[k] = (hi - lo) / s;
    out.push_back(std::move(fb));
  }
  split_range(shape, stride, hi, e, k + 1, out);  // tail: the start of a partial index
}

// Calls fn(outer index offsets) for every index of dims [0, j) of `lengths` (odometer).
template <class F>
void for_each_outer(const std::vector<int64_t>& lengths, size_t j, F&& fn) {
  for (size_t d = 0; d < j; ++d)
    if (lengths[d] == 0) return;
  std::vector<int64_t> idx(j, 0);
  while (true) {
    fn(idx);
    size_t d = j;
    while (d > 0) {
      --d;
      if (++idx[d] < lengths[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (j == 0) return;
  }
}

}  // namespace

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t l : lengths) n *= l;
  return n;
}

Box whole_box(const Shape& shape) { return {std::vector<int64_t>(shape.size(), 0), std::vector<int64_t>(shape)}; }

std::string box_str(const Box& b) {
  std::string s = "[";
  for (size_t d = 0; d < b.ndim(); ++d) {
    if (d) s += ", ";
    s += std::to_string(b.offsets[d]);
    s += ':';
    s += std::to_string(b.offsets[d] + b.lengths[d]);
  }
  return s + "]";
}

bool box_inside(const Box& b, const Shape& shape) {
  if (b.offsets.size() != shape.size() || b.lengths.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (b.offsets[d] < 0 || b.lengths[d] < 0 || b.offsets[d] > shape[d] || b.lengths[d] > shape[d] - b.offsets[d])
      return false;
  return true;
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  STRATA_CHECK(a.ndim() == b.ndim(), "[intersect] boxes of rank ", a.ndim(), " and ", b.ndim());
  Box out{std::vector<int64_t>(a.ndim()), std::vector<int64_t>(a.ndim())};
  for (size_t d = 0; d < a.ndim(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.lengths[d], b.offsets[d] + b.lengths[d]);
    if (hi <= lo) return std::nullopt;
    out.offsets[d] = lo;
    out.lengths[d] = hi - lo;
  }
  if (a.empty() || b.empty()) return std::nullopt;
  return out;
}

std::vector<FlatBox> flat_range_to_boxes(const Shape& shape, int64_t begin, int64_t end) {
  const int64_t numel = shape_numel(shape);
  STRATA_CHECK(0 <= begin && begin <= end && end <= numel, "[flat_range_to_boxes] range [", begin, ", ", end,
               ") outside [0, ", numel, ") of shape ", shape_str(shape));
  std::vector<FlatBox> out;
  if (begin == end) return out;
  if (shape.empty()) return {FlatBox{Box{}, 0}};
  split_range(shape, strides_of(shape), begin, end, 0, out);
  return out;
}

std::vector<std::pair<int64_t, int64_t>> box_runs(const Box& b, const Shape& shape) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (b.empty()) return out;
  if (shape.empty()) return {{0, 1}};
  const std::vector<int64_t> stride = strides_of(shape);
  size_t j = shape.size() - 1;
  while (j > 0 && b.lengths[j] == shape[j]) --j;
  const int64_t run = b.lengths[j] * stride[j];
  for_each_outer(b.lengths, j, [&](const std::vector<int64_t>& idx) {
    int64_t at = b.offsets[j] * stride[j];
    for (size_t d = 0; d < j; ++d) at += (b.offsets[d] + idx[d]) * stride[d];
    out.emplace_back(at, at + run);
  });
  return out;
}

std::optional<TilingError> check_tiling(const Shape& shape, const std::vector<Box>& boxes) {
  std::vector<size_t> order;
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (!box_inside(boxes[i], shape)) return TilingError{TilingError::Kind::outside, i, i, 0, 0};
    if (!boxes[i].empty()) order.push_back(i);
  }
  // Overlaps: sorted by the start along dim 0, a box can only meet those starting before it ends.
  if (shape.empty()) {
    if (order.size() > 1) return TilingError{TilingError::Kind::overlap, order[0], order[1], 0, 0};
  } else {
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return boxes[x].offsets[0] != boxes[y].offsets[0] ? boxes[x].offsets[0] < boxes[y].offsets[0] : x < y;
    });
    for (size_t i = 0; i < order.size(); ++i) {
      const Box& a = boxes[order[i]];
      for (size_t k = i + 1; k < order.size() && boxes[order[k]].offsets[0] < a.offsets[0] + a.lengths[0]; ++k)
        if (intersect(a, boxes[order[k]]))
          return TilingError{TilingError::Kind::overlap, std::min(order[i], order[k]), std::max(order[i], order[k]), 0, 0};
    }
  }
  // Disjoint boxes inside the tensor tile it iff their sizes add up to it.
  int64_t covered = 0;
  for (size_t i : order) covered += boxes[i].numel();
  const int64_t numel = shape_numel(shape);
  if (covered == numel) return std::nullopt;
  std::vector<std::pair<int64_t, int64_t>> runs;  // only on the error path
  for (size_t i : order) {
    const auto r = box_runs(boxes[i], shape);
    runs.insert(runs.end(), r.begin(), r.end());
  }
  std::sort(runs.begin(), runs.end());
  int64_t pos = 0;
  for (const auto& [b, e] : runs) {
    if (b > pos) return TilingError{TilingError::Kind::gap, 0, 0, pos, b};
    pos = e;
  }
  return TilingError{TilingError::Kind::gap, 0, 0, pos, numel};
}

void for_each_copy_run(const Box& inter, const Box& src_box, const Box& dst_box,
                       const std::function<void(int64_t src, int64_t dst, int64_t count)>& fn) {
  const size_t n = inter.ndim();
  STRATA_CHECK(src_box.ndim() == n && dst_box.ndim() == n, "[for_each_copy_run] boxes of rank ", n, ", ",
               src_box.ndim(), " and ", dst_box.ndim());
  if (inter.empty()) return;
  if (n == 0) {
    fn(0, 0, 1);
    return;
  }
  const std::vector<int64_t> ss = strides_of(src_box.lengths), ds = strides_of(dst_box.lengths);
  size_t j = n - 1;
  while (j > 0 && inter.lengths[j] == src_box.lengths[j] && inter.lengths[j] == dst_box.lengths[j]) --j;
  const int64_t count = inter.lengths[j] * ss[j];  // dims after j are whole in src (and in dst: same lengths)
  for_each_outer(inter.lengths, j, [&](const std::vector<int64_t>& idx) {
    int64_t s = (inter.offsets[j] - src_box.offsets[j]) * ss[j], t = (inter.offsets[j] - dst_box.offsets[j]) * ds[j];
    for (size_t d = 0; d < j; ++d) {
      s += (inter.offsets[d] - src_box.offsets[d] + idx[d]) * ss[d];
      t += (inter.offsets[d] - dst_box.offsets[d] + idx[d]) * ds[d];
    }
    fn(s, t, count);
  });
}

}  // namespace strata::parallel
