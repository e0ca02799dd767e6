// Element-wise reduction kernels over raw contiguous buffers, shared by the send/recv
// algorithms and the shared-memory (local) backend. f16/bf16 are computed in f32.
#pragma once
#include <cstdint>

#include <strata/comm/types.h>
#include <strata/core/dtype.h>

namespace strata::comm::detail {

/// dst[i] = a[i] (op) b[i] for n elements; dst may alias a or b. avg acts as sum here
/// (the caller scales once at the end).
void reduce3(void* dst, const void* a, const void* b, int64_t n, DType dt, ReduceOp op);

/// dst[i] = scale * (srcs[0][i] (op) ... (op) srcs[nsrc-1][i]), folding left to right so
/// every caller with the same source order gets bitwise the same result. f16/bf16
/// accumulate all sources in f32 and round once. dst may alias any source. scale != 1
/// is only valid for floating dtypes.
void reduce_many(void* dst, const void* const* srcs, int nsrc, int64_t n, DType dt, ReduceOp op,
                 double scale = 1.0);

/// p[i] *= s for a floating dtype (the avg of a sum).
void scale_inplace(void* p, int64_t n, DType dt, double s);

/// Converts n elements between dtypes through double precision (f16/bf16 <-> f32 staging).
void convert(void* dst, DType dst_dt, const void* src, DType src_dt, int64_t n);

}  // namespace strata::comm::detail
