// Planner input from a config + model, and the predicted-vs-measured memory table.
#include "apps/memory_report.h"

#include <cstdio>

#include <strata/core/error.h>

namespace strata::apps {

parallel::MemoryPlanInput memory_plan_input(const TrainConfig& cfg, int64_t elements, int64_t bytes_per_element,
                                            int world, int stage, bool ddp_buckets) {
  parallel::MemoryPlanInput in;
  in.param_elements = elements;
  in.bytes_per_element = bytes_per_element;
  in.optimizer_states = parallel::optimizer_state_count(cfg.optim.name, cfg.optim.momentum);
  in.world_size = world;
  in.zero_stage = stage;
  in.ddp_bucket_bytes = ddp_buckets && !cfg.parallel.ddp.gradient_as_bucket_view ? elements * bytes_per_element : 0;
  if (precision_state_dtype(cfg.run.precision)) {  // the model may still be the f32 build (strata plan)
    in = parallel::sixteen_bit_states(in);
    if (in.ddp_bucket_bytes > 0) in.ddp_bucket_bytes = 2 * elements;  // 16-bit buckets
  }
  return in;
}

parallel::MemoryPlanInput memory_plan_input(const TrainConfig& cfg, const nn::Module& model, int world, int stage,
                                            bool ddp_buckets) {
  int64_t elements = 0, item = 0;
  for (const Tensor& p : model.parameters()) {
    const int64_t n = p.numel();
    if (n == 0) continue;
    const int64_t b = p.nbytes() / n;
    STRATA_CHECK(item == 0 || item == b, "[plan_memory] parameters of mixed element sizes (", item, " and ", b,
                 " bytes) are not supported by the planner");
    item = b;
    elements += n;
  }
  return memory_plan_input(cfg, elements, item > 0 ? item : 4, world, stage, ddp_buckets);
}

std::string format_bytes_psi(int64_t bytes, int64_t psi) {
  char buf[64];
  if (psi > 0)
    std::snprintf(buf, sizeof buf, "%.2f MiB (%.2fΨ)", double(bytes) / (1024.0 * 1024.0), double(bytes) / double(psi));
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

namespace {

// Pads a cell that may hold the 2-byte 'Ψ' to `width` display columns.
std::string cell(const std::string& s, size_t width) {
  size_t cols = 0;
  for (unsigned char c : s) cols += (c & 0xC0) != 0x80;  // count UTF-8 lead bytes
  return s + std::string(cols < width ? width - cols : 1, ' ');
}

}  // namespace

std::string format_plan_table(const parallel::MemoryPlanInput& base, int configured_stage) {
  constexpr size_t kCol = 22;
  const int64_t psi = base.param_elements;
  static const char* const kLayout[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
  std::string s = cell("stage", 7) + cell("layout", 8) + cell("params", kCol) + cell("grads", kCol) +
                  cell("optimizer", kCol) + cell("comm", kCol) + cell("total", kCol) + "total bytes\n";
  for (int stage = 0; stage <= 3; ++stage) {
    parallel::MemoryPlanInput in = base;
    in.zero_stage = stage;
    const parallel::MemoryPlan p = parallel::plan_memory(in);
    char bytes[48];
    std::snprintf(bytes, sizeof bytes, "%12lld", (long long)p.total());
    s += cell(std::to_string(stage), 7) + cell(kLayout[stage], 8) + cell(format_bytes_psi(p.params, psi), kCol) +
         cell(format_bytes_psi(p.grads, psi), kCol) + cell(format_bytes_psi(p.optimizer, psi), kCol) +
         cell(format_bytes_psi(p.comm, psi), kCol) + cell(format_bytes_psi(p.total(), psi), kCol) + bytes +
         (stage == configured_stage ? "  <- configured" : "") + "\n";
  }
  return s;
}

std::string format_memory_report(const parallel::MemoryPlan& predicted, const MemoryTracker& tracker, int64_t psi,
                                 const std::string& heading) {
  constexpr size_t kCat = 13, kCol = 24;
  std::string s = heading + "\n";
  s += cell("category", kCat) + cell("measured now", kCol) + cell("measured peak", kCol) + "predicted\n";
  struct Row {
    MemCategory cat;
    int64_t predicted;  // -1: not predicted
  };
  const Row rows[] = {{MemCategory::params, predicted.params},   {MemCategory::grads, predicted.grads},
                      {MemCategory::optimizer, predicted.optimizer}, {MemCategory::comm, predicted.comm},
                      {MemCategory::activations, -1},             {MemCategory::other, -1}};
  for (const Row& r : rows) {
    const MemStats st = tracker.stats(r.cat);
    s += cell(mem_category_name(r.cat), kCat) + cell(format_bytes_psi(st.current, psi), kCol) +
         cell(format_bytes_psi(st.peak, psi), kCol) + (r.predicted >= 0 ? format_bytes_psi(r.predicted, psi) : "-") +
         "\n";
  }
  s += cell("total", kCat) + cell(format_bytes_psi(tracker.total_current(), psi), kCol) +
       cell(format_bytes_psi(tracker.total_peak(), psi), kCol) + format_bytes_psi(predicted.total(), psi) +
       " (params + grads + optimizer + comm)\n";
  return s;
}

}  // namespace strata::apps
