// Progress bar / lines on stdout and metrics.jsonl records (see progress.h).
#include "apps/progress.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include <strata/core/error.h>
#include <strata/tensor/file_io.h>

namespace strata::apps {

ProgressStyle choose_progress_style(bool stdout_is_tty, bool launched_by_mpi, const char* forced) {
  if (forced && *forced) {
    const std::string f = forced;
    if (f == "bar") return ProgressStyle::bar;
    if (f == "lines") return ProgressStyle::lines;
    STRATA_THROW(ConfigError, "STRATA_PROGRESS: expected bar or lines, got '", f, "'");
  }
  return stdout_is_tty && !launched_by_mpi ? ProgressStyle::bar : ProgressStyle::lines;
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600), (long long)(t % 3600 / 60));
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", (long long)t);
  return buf;
}

std::string format_count(double v) {
  char buf[32];
  if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e4)
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

void prune_metrics_for_resume(const std::string& path, int64_t step, int64_t total_steps) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string kept, line;
  bool pruned = false;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) {
      const int64_t s = j["step"].get<int64_t>();
      const bool final_eval = j.value("type", "") == "eval" && s == step && step == total_steps;
      if (s > step || final_eval) {
        pruned = true;
        continue;
      }
    }
    kept += line + "\n";
  }
  if (pruned) write_file_atomic(path, kept);
}

Progress::Progress(bool verbose, ProgressStyle style, const std::string& metrics_path, bool append)
    : verbose_(verbose), bar_(verbose && style == ProgressStyle::bar) {
  if (metrics_path.empty()) return;
  metrics_.open(metrics_path, append ? std::ios::app : std::ios::trunc);
  if (!metrics_) STRATA_THROW(DataError, "cannot open '", metrics_path, "' for writing");
}

void Progress::enable_tensorboard(const std::string& dir) { tb_ = std::make_unique<TensorBoardWriter>(dir); }

void Progress::write_metrics(const nlohmann::json& j) {
  if (!metrics_.is_open()) return;
  metrics_ << j.dump() << '\n';
  metrics_.flush();
}

void Progress::log_step(const StepLog& s) {
  nlohmann::json j = {{"type", "train"},          {"step", s.step},
                      {"epoch", s.epoch},         {"loss", s.loss},
                      {"lr", s.lr},               {"throughput", s.throughput},
                      {"throughput_unit", s.unit}, {"elapsed_s", s.elapsed_s}};
  if (s.units > 0) j[std::string(s.unit).substr(0, std::string(s.unit).find('/'))] = s.units;  // "samples"/"tokens"
  if (s.flops_per_s > 0) j["flops_per_s"] = s.flops_per_s;
  if (s.mfu > 0) j["mfu"] = s.mfu;
  if (s.loss_scale) j["loss_scale"] = *s.loss_scale;
  if (s.skipped_steps) j["skipped_steps"] = *s.skipped_steps;
  if (!s.moe.is_null()) j["moe"] = s.moe;
  write_metrics(j);
  if (tb_) {
    std::vector<std::pair<std::string, float>> v = {
        {"train/loss", float(s.loss)}, {"train/lr", float(s.lr)}, {std::string("train/") + s.unit, float(s.throughput)}};
    if (s.mfu > 0) v.emplace_back("train/mfu", float(s.mfu));
    if (s.loss_scale) v.emplace_back("train/loss_scale", float(*s.loss_scale));
    if (!s.moe.is_null()) v.emplace_back("train/moe_aux_loss", float(s.moe.value("aux_loss", 0.0)));
    tb_->scalars(s.step, v);
  }
  if (!verbose_ || bar_) return;
  char mfu[32] = "";
  if (s.mfu > 0) std::snprintf(mfu, sizeof mfu, " | mfu %.1f%%", 100.0 * s.mfu);
  std::printf("step %lld/%lld | epoch %.2f | loss %.4f | lr %.3e | %s %s%s | eta %s\n", (long long)s.step,
              (long long)s.total_steps, s.epoch, s.loss, s.lr, format_count(s.throughput).c_str(), s.unit, mfu,
              format_duration(s.eta_s).c_str());
  std::fflush(stdout);
}

void Progress::draw_bar(int64_t step, int64_t total_steps, int64_t epoch, double ema_loss, double lr, double rate,
                        const char* unit, double eta_s) {
  using Clock = std::chrono::steady_clock;
  if (!bar_ || (Clock::now() - last_draw_ < std::chrono::milliseconds(100) && step != total_steps)) return;
  last_draw_ = Clock::now();
  constexpr int kWidth = 24;
  const int fill = int(double(kWidth) * double(step) / double(std::max<int64_t>(1, total_steps)));
  std::string bar(size_t(fill), '=');
  if (fill < kWidth) bar += '>' + std::string(size_t(kWidth - fill - 1), ' ');
  std::printf("\r[%s] step %lld/%lld | epoch %lld | loss %.4f | lr %.2e | %s %s | eta %s\033[K", bar.c_str(),
              (long long)step, (long long)total_steps, (long long)epoch, ema_loss, lr, format_count(rate).c_str(),
              unit, format_duration(eta_s).c_str());
  std::fflush(stdout);
  bar_open_ = true;
}

void Progress::log_eval(const EvalLog& e) {
  nlohmann::json j = {{"type", "eval"}, {"step", e.step}, {"split", e.split}, {"loss", e.loss}, {"samples", e.samples}};
  if (e.accuracy) j["accuracy"] = *e.accuracy;
  if (e.bigram_entropy) j["bigram_entropy"] = *e.bigram_entropy;
  write_metrics(j);
  if (tb_) {
    std::vector<std::pair<std::string, float>> v = {{e.split + "/loss", float(e.loss)}};
    if (e.accuracy) v.emplace_back(e.split + "/accuracy", float(*e.accuracy));
    tb_->scalars(e.step, v);
  }
  char buf[256];
  if (e.accuracy)
    std::snprintf(buf, sizeof buf, "eval step %lld: %s accuracy %.4f, %s loss %.4f", (long long)e.step,
                  e.split.c_str(), *e.accuracy, e.split.c_str(), e.loss);
  else if (e.bigram_entropy)
    std::snprintf(buf, sizeof buf, "eval step %lld: %s loss %.4f (bigram entropy %.4f)", (long long)e.step,
                  e.split.c_str(), e.loss, *e.bigram_entropy);
  else
    std::snprintf(buf, sizeof buf, "eval step %lld: %s loss %.4f", (long long)e.step, e.split.c_str(), e.loss);
  line(buf);
}

void Progress::line(const std::string& text) {
  if (!verbose_) return;
  if (bar_open_) {
    std::printf("\r\033[K");
    bar_open_ = false;
  }
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void Progress::close_bar() {
  if (!bar_open_) return;
  std::printf("\n");
  std::fflush(stdout);
  bar_open_ = false;
}

}  // namespace strata::apps
