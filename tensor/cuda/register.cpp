// strata::cuda::init(): plugs the CUDA backend into the tensor layer. It registers one
// caching allocator per device index and every CUDA kernel under the op name of the
// front end's KernelTable (tensor/*.cpp), with the table's exact signature (checked at
// lookup). tensor/storage.cpp and tensor/dispatch.cpp call init() on the first CUDA
// allocation or kernel lookup, which also keeps this object file in every link.
#include <mutex>

#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/runtime.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {

namespace detail {
void register_allocators();  // allocator.cpp
}  // namespace detail

namespace {

constexpr DeviceType kCuda = DeviceType::CUDA;

void register_kernels() {
  // creation.cpp
  register_kernel("copy", kCuda, &copy_kernel);
  register_kernel("fill", kCuda, &fill_kernel);
  register_kernel("to_device", kCuda, &transfer_kernel);
  // elementwise.cpp
  register_kernel("binary", kCuda, &binary_kernel);
  register_kernel("binary_scalar", kCuda, &binary_scalar_kernel);
  register_kernel("compare", kCuda, &compare_kernel);
  register_kernel("compare_scalar", kCuda, &compare_scalar_kernel);
  register_kernel("unary", kCuda, &unary_kernel);
  register_kernel("where", kCuda, &where_kernel);
  register_kernel("masked_fill", kCuda, &masked_fill_kernel);
  register_kernel("activation_backward", kCuda, &act_grad_kernel);
  register_kernel("add_", kCuda, &add_kernel);
  register_kernel("mul_", kCuda, &scale_kernel);
  // reduce.cpp
  register_kernel("sum", kCuda, &sum_kernel);
  register_kernel("amax", kCuda, &max_kernel);
  register_kernel("sum_squares", kCuda, &sum_squares_kernel);
  // linalg.cpp
  register_kernel("matmul", kCuda, &gemm);
  register_kernel("matmul_batched", kCuda, &gemm_batched);
  // index.cpp
  register_kernel("index_select", kCuda, &index_select_kernel);
  register_kernel("index_add", kCuda, &index_add_kernel);
  register_kernel("gather", kCuda, &gather_kernel);
  register_kernel("scatter_add", kCuda, &scatter_add_kernel);
  // nn_ops.cpp
  register_kernel("softmax", kCuda, &softmax_kernel);
  register_kernel("softmax_backward", kCuda, &softmax_backward_kernel);
  register_kernel("layer_norm", kCuda, &layer_norm_kernel);
  register_kernel("layer_norm_backward", kCuda, &layer_norm_backward_kernel);
  register_kernel("batch_norm", kCuda, &batch_norm_kernel);
  register_kernel("batch_norm_backward", kCuda, &batch_norm_backward_kernel);
#ifdef STRATA_WITH_CUDNN
  register_kernel("conv2d", kCuda, &conv2d_kernel);
  register_kernel("conv2d_backward", kCuda, &conv2d_backward_kernel);
#endif
  register_kernel("max_pool2d", kCuda, &max_pool2d_kernel);
  register_kernel("max_pool2d_backward", kCuda, &max_pool2d_backward_kernel);
  register_kernel("avg_pool2d", kCuda, &avg_pool2d_kernel);
  register_kernel("avg_pool2d_backward", kCuda, &avg_pool2d_backward_kernel);
  register_kernel("embedding", kCuda, &embedding_kernel);
  register_kernel("embedding_backward", kCuda, &embedding_backward_kernel);
  register_kernel("cross_entropy", kCuda, &cross_entropy_kernel);
  register_kernel("cross_entropy_backward", kCuda, &cross_entropy_backward_kernel);
  register_kernel("dropout", kCuda, &dropout_kernel);
  register_kernel("dropout_backward", kCuda, &dropout_backward_kernel);
  // optim_ops.cpp
  register_kernel("adam_step_", kCuda, &adam_kernel);
  register_kernel("sgd_step_", kCuda, &sgd_kernel);
  register_kernel("adam_step_mixed_", kCuda, &adam_mixed_kernel);
  register_kernel("sgd_step_mixed_", kCuda, &sgd_mixed_kernel);
  // nn_ops.cpp: causal attention (the saved statistics are the log-sum-exp, not probabilities)
  register_kernel("bias_gelu", kCuda, &bias_gelu_kernel);
  register_kernel("bias_gelu_backward", kCuda, &bias_gelu_backward_kernel);
  register_kernel("bias_residual_", kCuda, &bias_residual_kernel);
  // residual_norm.cpp
  register_kernel("bias_residual_layer_norm_", kCuda, &bias_residual_layer_norm_kernel);
  register_kernel("layer_norm_backward_add", kCuda, &layer_norm_backward_add_kernel);

  register_kernel("causal_attention", kCuda, &causal_attention_kernel);
  register_kernel("causal_attention_backward", kCuda, &causal_attention_backward_kernel);
  // attention_block_ops.cpp: ring attention's blocks
  register_kernel("attention_block_forward", kCuda, &attention_block_forward_kernel);
  register_kernel("attention_block_delta", kCuda, &attention_block_delta_kernel);
  register_kernel("attention_block_backward", kCuda, &attention_block_backward_kernel);
  // llama_ops.cpp
  register_kernel("rms_norm", kCuda, &rms_norm_kernel);
  register_kernel("rms_norm_backward", kCuda, &rms_norm_backward_kernel);
  register_kernel("rms_norm_backward_add", kCuda, &rms_norm_backward_add_kernel);
  register_kernel("rotary", kCuda, &rotary_kernel);
  register_kernel("swiglu", kCuda, &swiglu_kernel);
  register_kernel("swiglu_backward", kCuda, &swiglu_backward_kernel);
  // multi_tensor_ops.cpp
  register_kernel("adam_step_multi_", kCuda, &adam_multi_kernel);
  register_kernel("sgd_step_multi_", kCuda, &sgd_multi_kernel);
  register_kernel("sum_squares_multi", kCuda, &sum_squares_multi_kernel);
  register_kernel("mul_multi_", kCuda, &mul_multi_kernel);
}

}  // namespace

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    detail::register_allocators();
    register_kernels();
  });
}

}  // namespace strata::cuda
