#include <strata/autograd/node.h>

#include <atomic>
#include <utility>

#include <strata/core/trace.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {
std::atomic<uint64_t> g_next_seq{0};
}

namespace detail {
namespace {
thread_local bool t_frees_saved = false;
}  // namespace

bool backward_frees_saved() { return t_frees_saved; }
FreesSavedScope::FreesSavedScope(bool frees) : prev_(t_frees_saved) { t_frees_saved = frees; }
FreesSavedScope::~FreesSavedScope() { t_frees_saved = prev_; }

namespace {
// Nothing but this handle holds t or its bytes, and they are contiguous.
bool sole_contiguous(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous();
}
}  // namespace

bool reusable_as(const Tensor& t, const Tensor& like) {
  return sole_contiguous(t) && t.shape() == like.shape() && t.dtype() == like.dtype() && t.device() == like.device();
}
}  // namespace detail

Node::Node()
    : seq_(g_next_seq.fetch_add(1, std::memory_order_relaxed)),
      trace_label_(trace::enabled() ? trace::current_label() : 0) {}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  auto leaf_impl = leaf_.lock();
  if (!leaf_impl) return {};
  Tensor leaf(leaf_impl);
  if (!leaf_impl->grad) {
    MemoryScope scope(MemCategory::grads);
    // Own the gradient. An incoming tensor that nothing else holds (the engine's pending
    // gradient, fresh from a backward formula) and whose bytes are exactly the leaf's is
    // taken over as is; a view, or a tensor shared with another edge, is copied.
    const bool take = detail::reusable_as(grad_output, leaf) &&
                      size_t(grad_output.nbytes()) == grad_output.storage()->nbytes();
    Tensor g;
    if (take) {
      grad_output.storage()->recharge(MemCategory::grads);
      g = Tensor::make_view(grad_output.storage(), leaf.shape(), grad_output.strides(), grad_output.offset(),
                            grad_output.dtype());
    } else {
      g = ops::clone(ops::sum_to_shape(grad_output, leaf.shape()));
    }
    leaf_impl->grad = g.impl_ptr();
  } else {
    Tensor g(leaf_impl->grad);
    ops::add_(g, grad_output);
  }
  for (auto& hook : leaf_impl->post_accumulate_hooks) hook(leaf);
  return {};
}

std::pair<Tensor, bool> PendingAddNode::take_pending(const Tensor& like) {
  Tensor p = std::exchange(pending_, Tensor());
  const bool in_place = p.defined() && detail::reusable_as(p, like);
  return {std::move(p), in_place};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn()};
  TensorImpl* impl = t.impl();
  if (!impl->grad_accumulator) impl->grad_accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
  return {impl->grad_accumulator};
}

bool any_requires_grad_list(const std::vector<Tensor>& ts) {
  if (!grad_enabled()) return false;
  for (const auto& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void set_history(Tensor& out, const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs) {
  auto& edges = node->next_edges();
  edges.clear();
  for (const auto& in : inputs) edges.push_back(gradient_edge(in));
  out.impl()->grad_fn = node;
  out.impl()->requires_grad = true;
}

const Tensor& SavedTensor::get(const char* op) const {
  STRATA_CHECK(t_.defined(), "[", op,
               "] saved tensors were freed by a previous backward; pass retain_graph=true to backward twice");
  STRATA_CHECK(t_.version() == version_, "[", op, "] a tensor needed for backward was modified in place (version ",
               version_, " -> ", t_.version(), ")");
  return t_;
}

std::pair<Tensor, bool> SavedTensor::take(const char* op) {
  get(op);
  const Storage& st = *t_.storage();
  if (!detail::backward_frees_saved() || !detail::sole_contiguous(t_) || st.external() || st.released())
    return {t_, false};
  return {std::exchange(t_, Tensor()), true};
}

}  // namespace strata
