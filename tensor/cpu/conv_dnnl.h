// 2-d convolution through oneDNN's primitives (forward with bias, backward data, backward
// weights with the bias gradient), the alternative to the im2col kernel of conv.h that
// conv2d_kernel routes to where it is faster (conv.h says where).
#pragma once
#include <cstdint>
#include <string>

#include <strata/tensor/ops.h>

namespace strata::cpu {

/// How oneDNN sees the tensors. plain: the convolution reads and writes strata's nchw /
/// oihw buffers. blocked: the primitive picks its layouts (format_tag::any, nChw16c on
/// AVX-512) and reorders copy in and out on every call.
enum class DnnlConvLayout { plain, blocked };

/// The layout the dnnl conv functions use: STRATA_CONV_DNNL_LAYOUT=plain|blocked, else
/// blocked (the faster on the CNN's shapes, reorders included: docs/convolutions.md).
/// set_dnnl_conv_layout overrides it (benchmarks; call it between ops).
DnnlConvLayout dnnl_conv_layout();
void set_dnnl_conv_layout(DnnlConvLayout layout);

/// y (N,O,Ho,Wo) = conv(x (N,C,H,W), w (O,C,kh,kw)) + b (O, may be undefined), as
/// cpu::conv2d_kernel; contiguous operands, y preallocated. Returns false, having written
/// nothing, where oneDNN does not take the convolution: a dtype other than f32, an empty
/// tensor, or no primitive for it. oneDNN runs on strata's thread count (get_num_threads);
/// primitives are cached per shape, parameters, layout and thread count, so repeated calls
/// create none. Thread-safe: concurrent calls use per-thread scratch memory.
bool dnnl_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p);

/// dx (N,C,H,W), dw (O,C,kh,kw), db (O), overwritten, as cpu::conv2d_backward_kernel; dx
/// and db may be undefined (not computed). Returns false, having written nothing, where
/// oneDNN does not take it (as dnnl_conv2d). For a given thread count the results are
/// the same bits on every run.
bool dnnl_conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db,
                          const ops::Conv2dParams& p);

/// How many primitives the dnnl conv functions have created in this process (each pass
/// of a new shape, layout or thread count creates one); for tests of the cache.
int64_t dnnl_conv_primitives_created();

/// The oneDNN implementations chosen for the three passes of this convolution at the
/// current thread count and layout, e.g. "fwd brg:avx512_core, bwd_d jit:avx512_core,
/// bwd_w jit:avx512_core"; for benchmarks and `strata info`-style reports.
std::string dnnl_conv_impl_info(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p);

}  // namespace strata::cpu
