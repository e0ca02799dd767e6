// How DDP lays gradients out for communication: one flat buffer per dtype holding the
// parameters in the order backward produces their gradients (guessed as reverse
// registration order, or as recorded by the Reducer), cut into buckets of at most `cap`
// bytes with smaller first and last ones. Pure arithmetic, tested alone.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <strata/core/dtype.h>

namespace strata::parallel {

/// What the planner needs to know about one parameter (in registration order).
struct BucketParam {
  int64_t numel = 0;
  DType dtype = DType::f32;
};

/// Where one parameter's gradient lives: elements [offset, offset + numel) of buffer `buffer`.
struct ParamSlot {
  int buffer = 0;
  int64_t offset = 0;
  int64_t numel = 0;
};

/// Elements [begin, end) of buffer `buffer`: one all-reduce. `params` lists every
/// parameter (index into the planner's input) with an element in the range, in the order
/// they were laid out. A bucket boundary may cut a parameter in two: that parameter then
/// belongs to both buckets and each bucket waits for it.
struct Bucket {
  int buffer = 0;
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<int> params;
  int64_t numel() const { return end - begin; }
};

/// The whole layout. Buckets are listed in launch order: every rank issues bucket i's
/// all-reduce before bucket i+1's, whatever order they become ready in.
struct BucketPlan {
  std::vector<DType> buffer_dtypes;   ///< per buffer
  std::vector<int64_t> buffer_numel;  ///< per buffer, elements
  std::vector<ParamSlot> slots;       ///< per parameter (input order)
  std::vector<Bucket> buckets;        ///< launch order
  std::vector<std::vector<int>> param_buckets;  ///< per parameter: the buckets it overlaps (ascending)

  /// Sum of buffer bytes.
  int64_t total_bytes() const;
  /// "3 buckets over 1 buffer: [f32 0..1024) [f32 1024..7424) ..." for logs.
  std::string describe() const;
};

/// Lays out `params` (registration order): buffer per dtype in order of first appearance
/// walking the parameters backwards; within a buffer the parameters go last-registered
/// first. Each buffer of n elements is cut into consecutive buckets: the first holds at
/// most `first_cap_bytes` (its gradients are ready first, so communication starts early),
/// the last at most `last_cap_bytes` (the first-registered parameters, typically ready only
/// when backward ends, so their all-reduce cannot be hidden: keep it small), and the
/// middle is split into the fewest equal pieces of at most `cap_bytes`. Caps are rounded
/// down to whole elements (at least one) and the first/last caps to at most `cap_bytes`.
/// Zero-element parameters get an empty slot and no bucket. Throws if a cap is not positive.
BucketPlan plan_buckets(const std::vector<BucketParam>& params, int64_t cap_bytes, int64_t first_cap_bytes,
                        int64_t last_cap_bytes);

/// The same layout with the parameters in `ready_order` instead of reverse registration
/// order: a permutation of 0..params.size()-1, the parameter expected to be ready first
/// first (what the Reducer recorded in its first synchronized backward). Buffers appear in
/// order of their dtype's first parameter in `ready_order`. Throws if it is not a
/// permutation. plan_buckets(p, ...) is plan_buckets_in_order(p, {n-1, ..., 0}, ...).
BucketPlan plan_buckets_in_order(const std::vector<BucketParam>& params, const std::vector<int>& ready_order,
                                 int64_t cap_bytes, int64_t first_cap_bytes, int64_t last_cap_bytes);

/// bucket_cap_mb (MiB, as in PyTorch: 25 -> 26214400 bytes) to bytes, at least 1.
int64_t mib_to_bytes(double mib);

}  // namespace strata::parallel
