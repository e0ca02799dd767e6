// CUDA copy, fill and device transfers. Same-dtype contiguous copies are cudaMemcpyAsync;
// a contiguous conversion between floating dtypes (autocast's casts) is a kernel typed on
// both dtypes, one element per thread, no index arithmetic; any other strided copy with
// conversion is one kernel with the two dtypes as runtime arguments. Both follow
// tensor/cuda/convert.h's rules (the CPU copy kernel's, bit for bit).
#include <cstring>

#include <strata/tensor/cuda/convert.h>
#include <strata/tensor/cuda/indexing.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/ops.h>

namespace strata::cuda {
namespace {

__global__ void convert_kernel(int64_t n, OffsetCalc<2> oc, void* dst, DType dt, const void* src, DType st) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[2];
    oc.get(i, off);
    store_scalar(dst, off[0], dt, load_scalar(src, off[1], st));
  }
}

// Typed element access for the contiguous floating conversions: 16-bit and f32 values
// travel as float (exact), f64 as double; stores round as store_scalar does.
template <DType S>
__device__ __forceinline__ auto load_float(const void* p, int64_t i) {
  if constexpr (S == DType::f32) return static_cast<const float*>(p)[i];
  else if constexpr (S == DType::f64) return static_cast<const double*>(p)[i];
  else if constexpr (S == DType::f16) return half_bits_to_float(static_cast<const uint16_t*>(p)[i]);
  else return bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
}
template <DType D, class V>
__device__ __forceinline__ void store_float(void* p, int64_t i, V v) {
  if constexpr (D == DType::f32) static_cast<float*>(p)[i] = static_cast<float>(v);
  else if constexpr (D == DType::f64) static_cast<double*>(p)[i] = static_cast<double>(v);
  else if constexpr (D == DType::f16) static_cast<uint16_t*>(p)[i] = float_to_half_bits(static_cast<float>(v));
  else static_cast<uint16_t*>(p)[i] = float_to_bf16_bits(static_cast<float>(v));
}

template <DType S, DType D>
__global__ void cast_contiguous_k(int64_t n, const void* src, void* dst) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) store_float<D>(dst, i, load_float<S>(src, i));
}


template <DType S>
void launch_cast_from(const OpContext& ctx, int64_t n, const void* src, void* dst, DType dt) {
  const unsigned g = grid_for(n);
  switch (dt) {
    case DType::f32: cast_contiguous_k<S, DType::f32><<<g, kThreads, 0, ctx.stream>>>(n, src, dst); break;
    case DType::f64: cast_contiguous_k<S, DType::f64><<<g, kThreads, 0, ctx.stream>>>(n, src, dst); break;
    case DType::f16: cast_contiguous_k<S, DType::f16><<<g, kThreads, 0, ctx.stream>>>(n, src, dst); break;
    default: cast_contiguous_k<S, DType::bf16><<<g, kThreads, 0, ctx.stream>>>(n, src, dst); break;
  }
}

// dst = src converted, both contiguous floating tensors of n elements.
void launch_cast(const OpContext& ctx, int64_t n, const void* src, DType st, void* dst, DType dt) {
  switch (st) {
    case DType::f32: launch_cast_from<DType::f32>(ctx, n, src, dst, dt); break;
    case DType::f64: launch_cast_from<DType::f64>(ctx, n, src, dst, dt); break;
    case DType::f16: launch_cast_from<DType::f16>(ctx, n, src, dst, dt); break;
    default: launch_cast_from<DType::bf16>(ctx, n, src, dst, dt); break;
  }
}

// Same-dtype strided copy by element size (no conversion).
template <class W>
__global__ void move_kernel(int64_t n, OffsetCalc<2> oc, W* dst, const W* src) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[2];
    oc.get(i, off);
    dst[off[0]] = src[off[1]];
  }
}

template <class W>
__global__ void fill_bits_kernel(int64_t n, OffsetCalc<1> oc, W* dst, W bits) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[1];
    oc.get(i, off);
    dst[off[0]] = bits;
  }
}

template <class W>
void launch_move(const OpContext& ctx, int64_t n, const OffsetCalc<2>& oc, void* dst, const void* src) {
  move_kernel<W><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, static_cast<W*>(dst), static_cast<const W*>(src));
}

}  // namespace

void copy_kernel(Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  OpContext ctx(dst);
  const size_t es = element_size(dst.dtype());
  if (dst.dtype() == src.dtype() && dst.shape() == src.shape() && dst.is_contiguous() && src.is_contiguous()) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), size_t(n) * es, cudaMemcpyDeviceToDevice,
                                      ctx.stream),
                      "copy");
    return;
  }
  if (dst.shape() == src.shape() && dst.is_contiguous() && src.is_contiguous() && is_floating(dst.dtype()) &&
      is_floating(src.dtype())) {
    launch_cast(ctx, n, src.raw_data(), src.dtype(), dst.raw_data(), dst.dtype());
    STRATA_CUDA_CHECK_LAUNCH("copy");
    return;
  }
  const auto oc = make_offset_calc<2>(dst.shape(), {dst.strides(), broadcast_strides(src.shape(), src.strides(), dst.shape())},
                                      "copy");
  if (dst.dtype() == src.dtype()) {
    switch (es) {
      case 1: launch_move<uint8_t>(ctx, n, oc, dst.raw_data(), src.raw_data()); break;
      case 2: launch_move<uint16_t>(ctx, n, oc, dst.raw_data(), src.raw_data()); break;
      case 4: launch_move<uint32_t>(ctx, n, oc, dst.raw_data(), src.raw_data()); break;
      default: launch_move<uint64_t>(ctx, n, oc, dst.raw_data(), src.raw_data()); break;
    }
  } else {
    convert_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dst.raw_data(), dst.dtype(), src.raw_data(),
                                                             src.dtype());
  }
  STRATA_CUDA_CHECK_LAUNCH("copy");
}

void fill_kernel(Tensor& t, double value) {
  const int64_t n = t.numel();
  if (n == 0) return;
  OpContext ctx(t);
  // the element's bits, converted on the host exactly as the CPU fill does
  uint64_t bits = 0;
  const Scalar s{value, 0, false};
  store_scalar(&bits, 0, t.dtype(), s);
  const size_t es = element_size(t.dtype());
  if (bits == 0 && t.is_contiguous()) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, size_t(n) * es, ctx.stream), "fill");
    return;
  }
  const auto oc = make_offset_calc<1>(t.shape(), {t.strides()}, "fill");
  const unsigned g = grid_for(n);
  switch (es) {
    case 1: fill_bits_kernel<<<g, kThreads, 0, ctx.stream>>>(n, oc, dptr<uint8_t>(t), uint8_t(bits)); break;
    case 2: fill_bits_kernel<<<g, kThreads, 0, ctx.stream>>>(n, oc, dptr<uint16_t>(t), uint16_t(bits)); break;
    case 4: fill_bits_kernel<<<g, kThreads, 0, ctx.stream>>>(n, oc, dptr<uint32_t>(t), uint32_t(bits)); break;
    default: fill_bits_kernel<<<g, kThreads, 0, ctx.stream>>>(n, oc, dptr<uint64_t>(t), bits); break;
  }
  STRATA_CUDA_CHECK_LAUNCH("fill");
}

void transfer_kernel(Tensor& out, const Tensor& src_in) {
  const size_t nbytes = size_t(out.nbytes());
  if (nbytes == 0) return;
  const Device od = out.device(), sd = src_in.device();
  // a strided source is made contiguous on its own device first (one kernel, no host loop)
  const Tensor src = ops::contiguous(src_in);
  if (sd.is_cpu()) {  // host -> device: complete before returning, so the host buffer may be freed
    const int dev = od.index;
    DeviceGuard g(dev);
    const cudaStream_t s = current_stream(dev);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(out.raw_data(), src.raw_data(), nbytes, cudaMemcpyHostToDevice, s),
                      "to_device");
    STRATA_CUDA_CHECK(cudaStreamSynchronize(s), "to_device");
    return;
  }
  if (od.is_cpu()) {  // device -> host: waits for the kernels that produced src
    const int dev = sd.index;
    DeviceGuard g(dev);
    const cudaStream_t s = current_stream(dev);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(out.raw_data(), src.raw_data(), nbytes, cudaMemcpyDeviceToHost, s),
                      "to_device");
    STRATA_CUDA_CHECK(cudaStreamSynchronize(s), "to_device");
    return;
  }
  // device -> device: the copy runs on the source's stream (src's memory stays valid in
  // its order) after the destination's stream reached the point where `out` was allocated.
  const cudaStream_t ss = current_stream(sd.index), ds = current_stream(od.index);
  Event dst_ready, copied;
  dst_ready.record(od.index, ds);
  {
    DeviceGuard g(sd.index);
    dst_ready.wait(ss);
    STRATA_CUDA_CHECK(cudaMemcpyPeerAsync(out.raw_data(), od.index, src.raw_data(), sd.index, nbytes, ss),
                      "to_device");
  }
  copied.record(sd.index, ss);
  {
    DeviceGuard g(od.index);
    copied.wait(ds);
  }
}

}  // namespace strata::cuda
