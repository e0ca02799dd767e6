// `strata bench conv` (apps/bench_conv.h). The shapes come from the config's CNN: block i
// is conv3x3 (pad 1, no bias with BatchNorm) on (B, c_{i-1}, S/2^i, S/2^i). The first
// layer's input needs no gradient, so its backward computes dw only, as in training.
#include "apps/bench_conv.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "apps/bench_gemm.h"
#include "apps/config.h"
#include "apps/factory.h"
#include <strata/core/threads.h>
#include <strata/tensor/cpu/conv.h>
#include <strata/tensor/cpu/conv_dnnl.h>
#include <strata/tensor/ops.h>

namespace strata::apps {
namespace {

using bench_detail::Clock;
using bench_detail::process_cpu_seconds;

struct Layer {
  int64_t C, O, S;  // in channels, out channels, image side
  bool bias, input_grad;
};

struct Timing {
  double wall_ms, cpu_ms;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The three contestants of one pass, called in turn `rounds` times after a warm-up.
std::vector<Timing> alternate(const std::vector<std::function<void()>>& paths, int rounds) {
  for (const auto& f : paths) f(), f();
  std::vector<std::vector<double>> wall(paths.size()), cpu(paths.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < paths.size(); ++i) {
      const double c0 = process_cpu_seconds();
      const auto t0 = Clock::now();
      paths[i]();
      wall[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e3);
      cpu[i].push_back((process_cpu_seconds() - c0) * 1e3);
    }
  std::vector<Timing> out;
  for (size_t i = 0; i < paths.size(); ++i) out.push_back({median(wall[i]), median(cpu[i])});
  return out;
}

void bench_layer(int64_t B, size_t index, const Layer& l, int rounds) {
  Generator gen(0);
  const Tensor x = ops::uniform({B, l.C, l.S, l.S}, -1, 1, gen);
  const Tensor w = ops::uniform({l.O, l.C, 3, 3}, -0.3, 0.3, gen);
  const Tensor b = l.bias ? ops::uniform({l.O}, -1, 1, gen) : Tensor();
  const Tensor dy = ops::uniform({B, l.O, l.S, l.S}, -1, 1, gen);
  const ops::Conv2dParams p{1, 1, 1, 1};
  Tensor y = ops::zeros({B, l.O, l.S, l.S}), dx = ops::zeros(x.shape()), dw = ops::zeros(w.shape());
  Tensor db = l.bias ? ops::zeros({l.O}) : Tensor(), no_dx;
  auto onednn = [](cpu::DnnlConvLayout layout, auto&& f) {
    return [layout, f] {
      cpu::set_dnnl_conv_layout(layout);
      f();
    };
  };
  const auto plain = cpu::DnnlConvLayout::plain, blocked = cpu::DnnlConvLayout::blocked;
  auto fwd_native = [&] { cpu::conv2d_im2col(x, w, b, y, p); };
  auto fwd_dnnl = [&] { cpu::dnnl_conv2d(x, w, b, y, p); };
  auto bw_native = [&] { cpu::conv2d_backward_im2col(dy, x, w, no_dx, dw, db, p); };
  auto bw_dnnl = [&] { cpu::dnnl_conv2d_backward(dy, x, w, no_dx, dw, db, p); };
  auto bwd_native = [&] { cpu::conv2d_backward_im2col(dy, x, w, dx, dw, db, p); };
  auto bwd_dnnl = [&] { cpu::dnnl_conv2d_backward(dy, x, w, dx, dw, db, p); };
  struct Row {
    const char* pass;
    std::vector<std::function<void()>> paths;
  };
  std::vector<Row> rows{{"forward", {fwd_native, onednn(plain, fwd_dnnl), onednn(blocked, fwd_dnnl)}},
                        {"bwd dw", {bw_native, onednn(plain, bw_dnnl), onednn(blocked, bw_dnnl)}}};
  if (l.input_grad)
    rows.push_back({"bwd dx+dw", {bwd_native, onednn(plain, bwd_dnnl), onednn(blocked, bwd_dnnl)}});
  for (const Row& r : rows) {
    const std::vector<Timing> t = alternate(r.paths, rounds);
    const double best = std::min(t[1].cpu_ms, t[2].cpu_ms);
    std::printf("B%-4lld conv%zu (%lld,%lld,%lld,%lld)->%lld  %-9s  %8.3f %8.3f  %8.3f %8.3f  %8.3f %8.3f  %6.2fx\n",
                (long long)B, index + 1, (long long)B, (long long)l.C, (long long)l.S, (long long)l.S,
                (long long)l.O, r.pass, t[0].wall_ms, t[0].cpu_ms, t[1].wall_ms, t[1].cpu_ms, t[2].wall_ms,
                t[2].cpu_ms, t[0].cpu_ms / best);
  }
}

}  // namespace

int bench_conv(const BenchConvOptions& o) {
  const TrainConfig cfg = TrainConfig::load(o.config);
  const Shape in = input_shape(cfg);
  std::vector<Layer> layers;
  int64_t c = in[0], s = in[1];
  for (size_t i = 0; i < cfg.model.channels.size(); ++i) {
    layers.push_back({c, cfg.model.channels[i], s, !cfg.model.batch_norm, i > 0});
    c = cfg.model.channels[i];
    s /= 2;
  }
  const cpu::DnnlConvLayout saved = cpu::dnnl_conv_layout();
  for (int t : o.threads) {
    set_num_threads(t);
    std::printf("\n%s convolutions, %d thread%s, median of %d alternating calls; ms wall / ms CPU; speed-up = native "
                "CPU / faster oneDNN CPU\n",
                o.config.c_str(), get_num_threads(), get_num_threads() == 1 ? "" : "s", o.rounds);
    for (size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      const Tensor x = ops::zeros({o.batches.front(), l.C, l.S, l.S}), w = ops::zeros({l.O, l.C, 3, 3});
      for (auto layout : {cpu::DnnlConvLayout::plain, cpu::DnnlConvLayout::blocked}) {
        cpu::set_dnnl_conv_layout(layout);
        std::printf("  conv%zu oneDNN %s: %s\n", i + 1, layout == cpu::DnnlConvLayout::plain ? "plain" : "blocked",
                    cpu::dnnl_conv_impl_info(x, w, {1, 1, 1, 1}).c_str());
      }
    }
    std::printf("%-34s %-9s  %-17s  %-17s  %-17s  %s\n", "shape", "pass", "native", "oneDNN plain", "oneDNN blocked",
                "speed-up");
    for (int B : o.batches)
      for (size_t i = 0; i < layers.size(); ++i) bench_layer(B, i, layers[i], o.rounds);
  }
  cpu::set_dnnl_conv_layout(saved);
  return 0;
}

}  // namespace strata::apps
