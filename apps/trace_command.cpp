// strata trace merge|summary and the trainer's trace window (see trace_command.h): merging
// per-rank Chrome trace files and measuring compute, communication, exposed and idle time.
#include "apps/trace_command.h"

#include "apps/output_file.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <spdlog/spdlog.h>

#include <strata/core/error.h>
#include <strata/core/trace.h>
#include <strata/nn/module.h>
#include <strata/tensor/file_io.h>

namespace strata::apps {

namespace fs = std::filesystem;

// ------------------------------------------------------------------ the trainer's window

TraceWindow::TraceWindow(int64_t start_step, int64_t steps, int rank, std::string dir, nn::Module& model)
    : start_(start_step), steps_(steps), rank_(rank), dir_(std::move(dir)), model_(model) {
  trace::set_thread_name("main");
}

void TraceWindow::before_step(int64_t done) {
  // Once per run; a run resumed inside the window records the rest of it.
  if (steps_ <= 0 || started_ || done < start_ || done >= start_ + steps_) return;
  started_ = true;
  // Modules' slices carry their dotted names ("h.0.attn"); the root is the model's type.
  for (const auto& [name, m] : model_.named_modules())
    if (!name.empty()) trace::name_object(m.get(), name);
  trace::start();
  recording_ = true;
}

void TraceWindow::after_step(int64_t done) {
  if (recording_ && done >= start_ + steps_) write();
}

void TraceWindow::finish() {
  if (recording_) write();
}

void TraceWindow::write() {
  trace::stop();
  recording_ = false;
  if (dir_.empty()) return;
  const std::string path = (fs::path(dir_) / "trace" / ("rank" + std::to_string(rank_) + ".json")).string();
  trace::write_json(path, rank_);
  spdlog::info("trace written: {} ({} slices)", path, trace::event_count());
}

// ------------------------------------------------------------------ interval sets

Intervals union_of(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& [b, e] : v) {
    if (e <= b) continue;
    if (!out.empty() && b <= out.back().second)
      out.back().second = std::max(out.back().second, e);
    else
      out.emplace_back(b, e);
  }
  return out;
}

Intervals intersect(const Intervals& a, const Intervals& b) {
  Intervals out;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.emplace_back(lo, hi);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

Intervals minus(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) ++j;
    for (size_t k = j; k < b.size() && b[k].first < hi; ++k) {
      if (b[k].first > lo) out.emplace_back(lo, b[k].first);
      lo = std::max(lo, b[k].second);
    }
    if (lo < hi) out.emplace_back(lo, hi);
  }
  return out;
}

double length(const Intervals& v) {
  double s = 0;
  for (const auto& [b, e] : v) s += e - b;
  return s;
}

// ------------------------------------------------------------------ timelines and summary

std::vector<RankTimeline> rank_timelines(const nlohmann::json& trace) {
  const nlohmann::json* events = &trace;
  if (trace.is_object()) {
    if (!trace.contains("traceEvents")) STRATA_THROW(DataError, "strata trace: no traceEvents in the trace");
    events = &trace["traceEvents"];
  }
  if (!events->is_array()) STRATA_THROW(DataError, "strata trace: traceEvents is not an array");
  struct Raw {
    Intervals steps, compute, waits, hooks, comm;
    std::map<int64_t, std::string> thread_names;
    std::set<int64_t> comm_tids;
  };
  std::map<int, Raw> by_rank;
  try {
    for (const auto& e : *events) {
      const std::string ph = e.at("ph").get<std::string>();
      Raw& r = by_rank[e.at("pid").get<int>()];
      if (ph == "M" && e.value("name", "") == "thread_name") {
        r.thread_names[e.at("tid").get<int64_t>()] = e.at("args").at("name").get<std::string>();
        continue;
      }
      if (ph != "X") continue;
      const double ts = e.at("ts").get<double>(), te = ts + e.at("dur").get<double>();
      const std::string cat = e.value("cat", "");
      if (cat == "step") r.steps.emplace_back(ts, te);
      else if (cat == "compute" || cat == "pipeline") r.compute.emplace_back(ts, te);
      else if (cat == "wait") r.waits.emplace_back(ts, te);
      else if (cat == "hook") r.hooks.emplace_back(ts, te);
      else if (cat == "comm") r.comm.emplace_back(ts, te), r.comm_tids.insert(e.at("tid").get<int64_t>());
    }
  } catch (const nlohmann::json::exception& ex) {
    STRATA_THROW(DataError, "strata trace: malformed trace event: ", ex.what());
  }
  std::vector<RankTimeline> out;
  for (auto& [rank, r] : by_rank) {
    RankTimeline t;
    t.rank = rank;
    t.steps = union_of(r.steps);
    t.waits = intersect(union_of(r.waits), t.steps);
    t.hooks = intersect(union_of(r.hooks), t.steps);
    t.compute = intersect(minus(minus(union_of(r.compute), t.waits), t.hooks), t.steps);
    t.comm = intersect(union_of(r.comm), t.steps);
    t.idle = minus(minus(minus(t.steps, t.compute), t.comm), t.hooks);
    for (int64_t tid : r.comm_tids)
      t.comm_tracks.push_back(r.thread_names.count(tid) ? r.thread_names[tid] : "thread " + std::to_string(tid));
    out.push_back(std::move(t));
  }
  return out;
}

Intervals RankTimeline::exposed() const {
  Intervals both = comm;
  both.insert(both.end(), hooks.begin(), hooks.end());
  return minus(union_of(std::move(both)), compute);
}

RankSummary summarize(const RankTimeline& t) {
  RankSummary s;
  s.rank = t.rank;
  s.steps = int64_t(t.steps.size());
  s.step_s = length(t.steps) * 1e-6;
  s.compute_s = length(t.compute) * 1e-6;
  s.comm_s = length(t.comm) * 1e-6;
  s.hooks_s = length(t.hooks) * 1e-6;
  s.exposed_s = length(t.exposed()) * 1e-6;
  s.idle_s = length(t.idle) * 1e-6;
  return s;
}

std::string format_summary(const std::vector<RankSummary>& rows) {
  std::string s =
      "rank  steps  step ms  compute ms (%)    comm ms (%)       hooks ms (%)      exposed comm ms (%)  idle ms (%)\n";
  for (const RankSummary& r : rows) {
    const double n = double(std::max<int64_t>(r.steps, 1)), ms = 1e3 / n;
    const double pct = r.step_s > 0 ? 100.0 / r.step_s : 0.0;
    char line[256];
    std::snprintf(line, sizeof line,
                  "%4d  %5lld  %7.2f  %7.2f (%5.1f)   %7.2f (%5.1f)   %7.2f (%5.1f)   %7.2f (%5.1f)        %7.2f (%5.1f)\n",
                  r.rank, (long long)r.steps, r.step_s * ms, r.compute_s * ms, r.compute_s * pct, r.comm_s * ms,
                  r.comm_s * pct, r.hooks_s * ms, r.hooks_s * pct, r.exposed_s * ms, r.exposed_s * pct, r.idle_s * ms,
                  r.idle_s * pct);
    s += line;
  }
  s += "(per traced step; compute + exposed comm + idle = step; docs/observe.md defines each)\n";
  return s;
}

// ------------------------------------------------------------------ files

nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) STRATA_THROW(DataError, "strata trace: cannot open '", path, "'");
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
      STRATA_THROW(DataError, "strata trace: '", path, "' is not a trace-event file (no traceEvents array)");
    return j;
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataError, "strata trace: '", path, "' is not valid JSON: ", e.what());
  }
}

nlohmann::json merge_traces(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "trace";
  std::map<int, std::string> files;  // rank -> path, in rank order
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("rank", 0) == 0 && f.path().extension() == ".json" && name.size() > 9) {
      const std::string digits = name.substr(4, name.size() - 9);
      if (!digits.empty() && std::all_of(digits.begin(), digits.end(), ::isdigit))
        files[std::stoi(digits)] = f.path().string();
    }
  }
  if (files.empty()) STRATA_THROW(DataError, "strata trace: no rank<R>.json under '", dir.string(), "'");
  if (files.rbegin()->first + 1 != int(files.size()))
    STRATA_THROW(DataError, "strata trace: '", dir.string(), "' holds ", files.size(), " rank files but the last is rank",
                 files.rbegin()->first, " (one is missing)");
  nlohmann::json all = nlohmann::json::array();
  double t0 = INFINITY;
  for (const auto& [rank, path] : files) {
    nlohmann::json j = read_trace(path);
    for (auto& e : j["traceEvents"]) {
      e["pid"] = rank;  // the file's rank, whatever it says
      if (e.value("ph", "") == "X" && e.contains("ts")) t0 = std::min(t0, e["ts"].get<double>());
      all.push_back(std::move(e));
    }
  }
  if (std::isfinite(t0))
    for (auto& e : all)
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() - t0;
  return {{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}, {"otherData", {{"ranks", files.size()}}}};
}

Command add_trace_command(CLI::App& parent) {
  struct Opts {
    std::string run, out, input;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand("trace", "Merge and summarise the timelines that run.trace recorded");
  cmd->require_subcommand(1);
  CLI::App* merge = cmd->add_subcommand("merge", "One Chrome trace (Perfetto) file: a track per rank, one per thread");
  merge->add_option("run_dir", o->run, "Run dir holding trace/rank<R>.json")->required();
  merge->add_option("-o,--out", o->out, "File to write (default RUN_DIR/trace/merged.json)");
  CLI::App* summary = cmd->add_subcommand("summary", "Per rank: compute, communication, exposed communication, idle");
  summary->add_option("input", o->input, "Run dir (holding trace/rank<R>.json) or a merged trace file")->required();
  return {cmd, [o, merge] {
            if (merge->parsed()) {
              const std::string out = o->out.empty() ? (fs::path(o->run) / "trace" / "merged.json").string() : o->out;
              if (!o->out.empty()) check_output_path(out, "--out");  // before the traces are read
              const nlohmann::json m = merge_traces(o->run);
              write_output_file(out, "--out", m.dump() + "\n");
              std::printf("wrote %s (%zu events from %d rank(s))\n", out.c_str(), m["traceEvents"].size(),
                          m["otherData"]["ranks"].get<int>());
              return 0;
            }
            const nlohmann::json t = fs::is_directory(o->input) ? merge_traces(o->input) : read_trace(o->input);
            std::vector<RankSummary> rows;
            for (const RankTimeline& r : rank_timelines(t)) rows.push_back(summarize(r));
            std::fputs(format_summary(rows).c_str(), stdout);
            return 0;
          }};
}

}  // namespace strata::apps
