#include <strata/autograd/engine.h>

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include <strata/autograd/node.h>
#include <strata/core/trace.h>
#include <strata/tensor/cpu/op_profile.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

struct BySeq {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Sums g into a pending gradient. The first one is kept as is; later ones are added in
// place when the slot solely owns contiguous bytes of the same shape (the common case:
// a fresh gradient from a backward formula), else into a new tensor.
void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
  } else if (detail::reusable_as(slot, g)) {
    ops::add_(slot, g);
  } else {
    slot = ops::binary(ops::BinaryOp::add, slot, g);
  }
}

}  // namespace

void backward(const Tensor& root, const Tensor& grad_output, bool retain_graph) {
  backward(std::vector<Tensor>{root}, std::vector<Tensor>{grad_output}, retain_graph);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  STRATA_CHECK(roots.size() == grad_outputs.size(), "[backward] ", roots.size(), " roots but ",
               grad_outputs.size(), " gradients");
  NoGradGuard no_grad;  // backward formulas are not themselves recorded
  detail::FreesSavedScope frees_saved(!retain_graph);  // SavedTensor::take may hand over saved bytes
  std::unordered_map<Node*, Tensor> pending;
  std::vector<std::shared_ptr<Node>> keep_alive;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    STRATA_CHECK(r.defined() && r.requires_grad(), "[backward] root ", i,
                 " does not require grad: no parameter or input with requires_grad reached it. If it was "
                 "computed with strata::ops:: functions, those record no autograd graph: use the "
                 "differentiable functions of <strata/autograd/functions.h> (strata::matmul, "
                 "strata::add, ...) on the path from the parameters to the loss");
    Tensor g = grad_outputs[i];
    if (!g.defined()) {
      STRATA_CHECK(r.numel() == 1, "[backward] grad_output is required for a non-scalar root ",
                   shape_str(r.shape()));
      g = ops::ones_like(r);
    }
    STRATA_CHECK(g.shape() == r.shape(), "[backward] grad_output shape ", shape_str(g.shape()),
                 " does not match root ", shape_str(r.shape()));
    Edge e = gradient_edge(r);
    keep_alive.push_back(e.fn);
    accumulate(pending[e.fn.get()], g);
  }

  // Count, for every reachable node, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (auto& n : keep_alive)
    if (seen.insert(n.get()).second) stack.push_back(n.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges()) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  // Ready nodes run latest-created first, so leaves' hooks fire in reverse forward
  // order: the order DDP fills its buckets in.
  std::priority_queue<Node*, std::vector<Node*>, BySeq> ready;
  for (auto& n : keep_alive)
    if (deps[n.get()] == 0) {
      deps[n.get()] = -1;
      ready.push(n.get());
    }
  // Tracing: one slice for the pass, and one per run of nodes created by the same module.
  trace::Scope pass("backward");
  cpu::op_profile::Phase profile_phase("backward");  // `strata bench train --ops` files kernels under it
  trace::Scope in_module;
  uint32_t module = UINT32_MAX;
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    if (trace::enabled() && n->trace_label() != module && !dynamic_cast<AccumulateGrad*>(n)) {
      in_module.end();
      module = n->trace_label();
      in_module.begin("backward " + (module ? trace::label(module) : std::string("(no module)")));
    }
    Tensor g = std::move(pending[n]);
    pending.erase(n);
    STRATA_CHECK(!n->released(), "[backward] ", n->name(),
                 ": the graph was already freed by a previous backward; use retain_graph=true");
    if (const int e = n->absorbs_edge(); e >= 0 && size_t(e) < n->next_edges().size()) {
      const auto it = pending.find(n->next_edges()[size_t(e)].fn.get());
      if (it != pending.end() && it->first) {
        n->absorb(std::move(it->second));
        pending.erase(it);
      }
    }
    std::vector<Tensor> grads = n->apply(g);
    // A leaf's AccumulateGrad is cached on the leaf and reused by every later graph;
    // it saves nothing, so it is never marked released.
    if (!retain_graph && !dynamic_cast<AccumulateGrad*>(n)) n->release_saved();
    auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      Node* next = edges[i].fn.get();
      if (!next) continue;
      if (i < grads.size() && grads[i].defined()) accumulate(pending[next], grads[i]);
      if (--deps[next] == 0) {
        if (pending.count(next)) {
          ready.push(next);
        } else {
          // no gradient reached it along any edge: skip it but release its inputs' counts
          std::vector<Node*> skip{next};
          while (!skip.empty()) {
            Node* s = skip.back();
            skip.pop_back();
            for (auto& e2 : s->next_edges())
              if (e2.fn && --deps[e2.fn.get()] == 0) {
                if (pending.count(e2.fn.get()))
                  ready.push(e2.fn.get());
                else
                  skip.push_back(e2.fn.get());
              }
          }
        }
      }
    }
  }
}

namespace {
thread_local DeferredGrads* t_deferred = nullptr;
}  // namespace

DeferWeightGrads::DeferWeightGrads(DeferredGrads& into) : prev_(t_deferred) { t_deferred = &into; }
DeferWeightGrads::~DeferWeightGrads() { t_deferred = prev_; }
DeferredGrads* DeferWeightGrads::active() { return t_deferred; }

void run_deferred(DeferredGrads& work) {
  NoGradGuard no_grad;
  cpu::op_profile::Phase profile_phase("backward");
  for (auto& f : work) f();
  work.clear();
}

void accumulate_grad(const Tensor& t, const Tensor& g) {
  STRATA_CHECK(t.defined() && t.requires_grad() && !t.grad_fn(), "[accumulate_grad] not a leaf that requires grad");
  gradient_edge(t).fn->apply(g);
}

}  // namespace strata
