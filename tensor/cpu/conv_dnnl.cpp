// oneDNN convolution primitives behind strata's conv kernels (conv_dnnl.h). One Plan per
// (pass, shapes, parameters, layout, thread count): the primitive, and for every argument
// strata's plain memory descriptor, the one the primitive wants and the reorder between
// them when they differ. Plans are created once and cached; reorder buffers and oneDNN's
// scratchpad live in a per-thread arena, so a call allocates nothing after the first.
#include <strata/tensor/cpu/conv_dnnl.h>

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include <strata/core/error.h>
#include <strata/core/threads.h>
#include <strata/tensor/cpu/omp_threads.h>

// OmpThreads (omp_threads.h) sets oneDNN's thread count through the OpenMP runtime strata uses.
static_assert(DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP, "strata's oneDNN convolutions expect oneDNN's OpenMP runtime");

namespace strata::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

enum class Pass : int64_t { forward, backward_data, backward_weights };

// One primitive argument: the buffer strata passes is `user` (nchw / oihw / x); the
// primitive reads or writes `inner`; `reorder` copies between them when they differ.
struct Arg {
  int id = 0;
  memory::desc user, inner;
  bool input = true;
  std::optional<dnnl::reorder> reorder;
};

struct Plan {
  dnnl::primitive prim;
  std::vector<Arg> args;
  memory::desc scratchpad;
  std::string impl;
  size_t arena_bytes = 0;  // reorder buffers + scratchpad, each 64-byte aligned
};

// pass, N, C, H, W, O, kh, kw, sh, sw, ph, pw, with bias (fwd/bwd_w), layout, threads
using Key = std::array<int64_t, 15>;

constexpr size_t kAlign = 64;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The calling thread's stream (in-order, runs on the calling thread's OpenMP team).
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

std::atomic<int> g_layout{-1};
std::atomic<int64_t> g_created{0};

DnnlConvLayout layout_from_env() {
  const char* e = std::getenv("STRATA_CONV_DNNL_LAYOUT");
  if (!e || std::strcmp(e, "blocked") == 0) return DnnlConvLayout::blocked;
  STRATA_CHECK(std::strcmp(e, "plain") == 0, "[conv2d] STRATA_CONV_DNNL_LAYOUT=", e,
               " is not a layout: use plain or blocked");
  return DnnlConvLayout::plain;
}


struct Dims {
  memory::dims src, wei, bias, dst, strides, pad_l, pad_r;
};

Dims dims_of(const Key& k) {
  const int64_t N = k[1], C = k[2], H = k[3], W = k[4], O = k[5], kh = k[6], kw = k[7], sh = k[8], sw = k[9],
                ph = k[10], pw = k[11];
  const int64_t Ho = (H + 2 * ph - kh) / sh + 1, Wo = (W + 2 * pw - kw) / sw + 1;
  return {{N, C, H, W}, {O, C, kh, kw}, {O}, {N, O, Ho, Wo}, {sh, sw}, {ph, pw}, {ph, pw}};
}

Arg make_arg(int id, const memory::desc& user, const memory::desc& inner, bool input) {
  Arg a{id, user, inner, input, std::nullopt};
  if (user != inner) {
    const auto& e = engine();
    a.reorder = input ? dnnl::reorder(dnnl::reorder::primitive_desc(e, user, e, inner))
                      : dnnl::reorder(dnnl::reorder::primitive_desc(e, inner, e, user));
  }
  return a;
}

std::shared_ptr<const Plan> build_plan(const Key& k) {
  const Pass pass = Pass(k[0]);
  const bool bias = k[12] != 0;
  const bool blocked = DnnlConvLayout(k[13]) == DnnlConvLayout::blocked;
  const Dims d = dims_of(k);
  const auto f32 = memory::data_type::f32;
  const memory::desc src_u(d.src, f32, Tag::nchw), wei_u(d.wei, f32, Tag::oihw), bias_u(d.bias, f32, Tag::x),
      dst_u(d.dst, f32, Tag::nchw);
  const auto inner = [&](const memory::dims& dims, const memory::desc& user) {
    return blocked ? memory::desc(dims, f32, Tag::any) : user;
  };
  const memory::desc src_i = inner(d.src, src_u), wei_i = inner(d.wei, wei_u), dst_i = inner(d.dst, dst_u);
  const auto& e = engine();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto alg = dnnl::algorithm::convolution_direct;
  // The forward descriptor: the primitive itself, or the hint the backward passes need.
  const dnnl::convolution_forward::desc fwd_d(dnnl::prop_kind::forward_training, alg, src_i, wei_i,
                                              bias ? bias_u : memory::desc(), dst_i, d.strides, d.pad_l, d.pad_r);
  const dnnl::convolution_forward::primitive_desc fwd_pd(fwd_d, attr, e);
  auto plan = std::make_shared<Plan>();
  switch (pass) {
    case Pass::forward:
      plan->prim = dnnl::convolution_forward(fwd_pd);
      plan->args.push_back(make_arg(DNNL_ARG_SRC, src_u, fwd_pd.src_desc(), true));
      plan->args.push_back(make_arg(DNNL_ARG_WEIGHTS, wei_u, fwd_pd.weights_desc(), true));
      if (bias) plan->args.push_back(make_arg(DNNL_ARG_BIAS, bias_u, fwd_pd.bias_desc(), true));
      plan->args.push_back(make_arg(DNNL_ARG_DST, dst_u, fwd_pd.dst_desc(), false));
      plan->scratchpad = fwd_pd.scratchpad_desc();
      plan->impl = fwd_pd.impl_info_str();
      break;
    case Pass::backward_data: {
      const dnnl::convolution_backward_data::desc bd(alg, src_i, wei_i, dst_i, d.strides, d.pad_l, d.pad_r);
      const dnnl::convolution_backward_data::primitive_desc pd(bd, attr, e, fwd_pd);
      plan->prim = dnnl::convolution_backward_data(pd);
      plan->args.push_back(make_arg(DNNL_ARG_DIFF_DST, dst_u, pd.diff_dst_desc(), true));
      plan->args.push_back(make_arg(DNNL_ARG_WEIGHTS, wei_u, pd.weights_desc(), true));
      plan->args.push_back(make_arg(DNNL_ARG_DIFF_SRC, src_u, pd.diff_src_desc(), false));
      plan->scratchpad = pd.scratchpad_desc();
      plan->impl = pd.impl_info_str();
      break;
    }
    case Pass::backward_weights: {
      const dnnl::convolution_backward_weights::desc bd(alg, src_i, wei_i, bias ? bias_u : memory::desc(), dst_i,
                                                        d.strides, d.pad_l, d.pad_r);
      const dnnl::convolution_backward_weights::primitive_desc pd(bd, attr, e, fwd_pd);
      plan->prim = dnnl::convolution_backward_weights(pd);
      plan->args.push_back(make_arg(DNNL_ARG_SRC, src_u, pd.src_desc(), true));
      plan->args.push_back(make_arg(DNNL_ARG_DIFF_DST, dst_u, pd.diff_dst_desc(), true));
      plan->args.push_back(make_arg(DNNL_ARG_DIFF_WEIGHTS, wei_u, pd.diff_weights_desc(), false));
      if (bias) plan->args.push_back(make_arg(DNNL_ARG_DIFF_BIAS, bias_u, pd.diff_bias_desc(), false));
      plan->scratchpad = pd.scratchpad_desc();
      plan->impl = pd.impl_info_str();
      break;
    }
  }
  g_created.fetch_add(1);
  for (const Arg& a : plan->args)
    if (a.reorder) plan->arena_bytes += aligned(a.inner.get_size());
  plan->arena_bytes += aligned(plan->scratchpad.get_size());
  return plan;
}

// The cached plan for k; null where oneDNN has no primitive for it (cached too).
std::shared_ptr<const Plan> plan_for(const Key& k) {
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<const Plan>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(k);
  if (it != cache.end()) return it->second;
  std::shared_ptr<const Plan> plan;
  try {
    OmpThreads threads{int(k[14])};
    plan = build_plan(k);
  } catch (const dnnl::error&) {
    plan = nullptr;  // unimplemented for these parameters: the caller keeps strata's kernel
  }
  return cache.emplace(k, std::move(plan)).first->second;
}

Key key_of(Pass pass, const Tensor& x, const Tensor& w, const ops::Conv2dParams& p, bool bias) {
  return {int64_t(pass), x.size(0),  x.size(1),  x.size(2),  x.size(3), w.size(0),
          w.size(2),     w.size(3),  p.stride_h, p.stride_w, p.pad_h,   p.pad_w,
          bias ? 1 : 0,  int64_t(dnnl_conv_layout()), int64_t(get_num_threads())};
}

bool takes(const Tensor& x, const Tensor& w) {
  return x.dtype() == DType::f32 && w.dtype() == DType::f32 && x.numel() > 0 && w.numel() > 0;
}

// Per-thread memory for the reorder buffers and the scratchpad; grows to the largest
// request, freed when the thread exits.
std::byte* arena(size_t bytes) {
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<std::byte, Free> buf;
  thread_local size_t cap = 0;
  if (bytes > cap) {
    buf.reset(static_cast<std::byte*>(std::aligned_alloc(kAlign, aligned(bytes))));
    STRATA_CHECK(buf != nullptr, "[conv2d] out of memory for ", bytes, " bytes of oneDNN scratch");
    cap = bytes;
  }
  return buf.get();
}

// Runs the plan on the buffers `ptrs`, in the order of plan.args.
// `mem`: plan.arena_bytes of scratch. The argument `given_inner` (0: none) is passed
// already in the primitive's layout, so its reorder is skipped.
void execute(const Plan& plan, const std::vector<void*>& ptrs, std::byte* mem, int given_inner = 0) {
  const auto& e = engine();
  dnnl::stream& st = stream();
  std::byte* free_mem = mem;
  std::unordered_map<int, memory> args;
  std::vector<std::pair<memory, memory>> outputs;  // (inner, user) to reorder after the primitive
  for (size_t i = 0; i < plan.args.size(); ++i) {
    const Arg& a = plan.args[i];
    if (a.id == given_inner) {
      args.emplace(a.id, memory(a.inner, e, ptrs[i]));
      continue;
    }
    memory user(a.user, e, ptrs[i]);
    if (!a.reorder) {
      args.emplace(a.id, user);
      continue;
    }
    memory inner(a.inner, e, free_mem);
    free_mem += aligned(a.inner.get_size());
    if (a.input)
      a.reorder->execute(st, user, inner);
    else
      outputs.emplace_back(inner, user);
    args.emplace(a.id, inner);
  }
  if (plan.scratchpad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(plan.scratchpad, e, free_mem));
  plan.prim.execute(st, args);
  size_t out = 0;
  for (const Arg& a : plan.args)
    if (a.reorder && !a.input) {
      a.reorder->execute(st, outputs[out].first, outputs[out].second);
      ++out;
    }
  st.wait();
}

}  // namespace

DnnlConvLayout dnnl_conv_layout() {
  int v = g_layout.load(std::memory_order_relaxed);
  if (v < 0) {
    v = int(layout_from_env());
    g_layout.store(v);
  }
  return DnnlConvLayout(v);
}

void set_dnnl_conv_layout(DnnlConvLayout layout) { g_layout.store(int(layout)); }

bool dnnl_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p) {
  if (!takes(x, w)) return false;
  const Key k = key_of(Pass::forward, x, w, p, b.defined());
  const auto plan = plan_for(k);
  if (!plan) return false;
  OmpThreads threads{int(k[14])};
  std::vector<void*> ptrs{x.data<float>(), w.data<float>()};
  if (b.defined()) ptrs.push_back(b.data<float>());
  ptrs.push_back(y.data<float>());
  execute(*plan, ptrs, arena(plan->arena_bytes));
  return true;
}

bool dnnl_conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db,
                          const ops::Conv2dParams& p) {
  if (!takes(x, w)) return false;
  const Key kw = key_of(Pass::backward_weights, x, w, p, db.defined());
  const auto plan_w = plan_for(kw);
  const auto plan_d = dx.defined() ? plan_for(key_of(Pass::backward_data, x, w, p, false)) : nullptr;
  if (!plan_w || (dx.defined() && !plan_d)) return false;
  OmpThreads threads{int(kw[14])};
  const size_t arena_bytes = std::max(plan_d ? plan_d->arena_bytes : 0, plan_w->arena_bytes);
  void* dyp = dy.data<float>();
  std::vector<void*> ptrs{x.data<float>(), dyp, dw.data<float>()};
  if (db.defined()) ptrs.push_back(db.data<float>());
  if (!plan_d) {
    execute(*plan_w, ptrs, arena(arena_bytes));
    return true;
  }
  // Both passes read dy; where both want it in the same non-plain layout, it is
  // reordered once, into memory after the passes' own scratch.
  const Arg& dy_d = plan_d->args[0];
  const Arg& dy_w = plan_w->args[1];
  if (dy_d.reorder && dy_w.reorder && dy_d.inner == dy_w.inner) {
    std::byte* mem = arena(arena_bytes + aligned(dy_d.inner.get_size()));
    memory dy_inner(dy_d.inner, engine(), mem + arena_bytes);
    memory dy_user(dy_d.user, engine(), dyp);
    dy_d.reorder->execute(stream(), dy_user, dy_inner);
    execute(*plan_d, {dy_inner.get_data_handle(), w.data<float>(), dx.data<float>()}, mem, DNNL_ARG_DIFF_DST);
    ptrs[1] = dy_inner.get_data_handle();
    execute(*plan_w, ptrs, mem, DNNL_ARG_DIFF_DST);
    return true;
  }
  std::byte* mem = arena(arena_bytes);
  execute(*plan_d, {dyp, w.data<float>(), dx.data<float>()}, mem);
  execute(*plan_w, ptrs, mem);
  return true;
}

int64_t dnnl_conv_primitives_created() { return g_created.load(); }

std::string dnnl_conv_impl_info(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p) {
  if (!takes(x, w)) return "not taken (dtype)";
  std::string out;
  const std::pair<Pass, const char*> passes[] = {
      {Pass::forward, "fwd"}, {Pass::backward_data, "bwd_d"}, {Pass::backward_weights, "bwd_w"}};
  for (const auto& [pass, name] : passes) {
    const auto plan = plan_for(key_of(pass, x, w, p, false));
    if (!out.empty()) out += ", ";
    out += std::string(name) + " " + (plan ? plan->impl : std::string("none"));
  }
  return out;
}

}  // namespace strata::cpu
