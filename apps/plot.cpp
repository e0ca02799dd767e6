// strata plot: metrics.jsonl -> SVG, and a merged trace -> Gantt SVG (see plot.h).
// Hand-written SVG: a few paths, rects, text and circles are all these charts need.
#include "apps/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/trace_command.h"
#include <strata/core/error.h>

namespace strata::apps {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  if (v != 0 && (std::abs(v) < 1e-3 || std::abs(v) >= 1e5))
    std::snprintf(buf, sizeof buf, "%.0e", v);
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// The opening <svg> element of a width x height image on a white background.
std::string svg_open(int width, int height) {
  const std::string w = std::to_string(width), h = std::to_string(height);
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w + " " + h +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
}

// Maps data coordinates into the plot rectangle.
struct Axis {
  double lo, hi, px_lo, px_hi;
  double at(double v) const { return px_lo + (v - lo) / (hi - lo) * (px_hi - px_lo); }
};

void range_of(const std::vector<double>& v, double& lo, double& hi) {
  for (double x : v)
    if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
}

std::string polyline(const std::vector<double>& xs, const std::vector<double>& ys, const Axis& x, const Axis& y,
                     const std::string& style) {
  std::string pts;
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i)
    if (std::isfinite(ys[i])) pts += fmt(x.at(xs[i])) + "," + fmt(y.at(ys[i])) + " ";
  return "<polyline fill=\"none\" " + style + " points=\"" + pts + "\"/>\n";
}

}  // namespace

RunCurves read_run_curves(const std::string& dir) {
  const std::string file = dir + "/metrics.jsonl";
  std::ifstream in(file);
  if (!in) STRATA_THROW(DataError, "strata plot: cannot open '", file, "' (is '", dir, "' a run dir?)");
  RunCurves r;
  r.name = dir;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
      const std::string type = j.at("type").get<std::string>();
      if (type == "train") {
        r.step.push_back(j.at("step").get<double>());
        r.loss.push_back(j.at("loss").get<double>());
        r.lr.push_back(j.value("lr", NAN));
        for (const char* unit : {"tokens", "samples"})
          if (j.contains(unit)) r.units.push_back(j.at(unit).get<double>()), r.unit_name = unit;
      } else if (type == "eval") {
        r.eval_step.push_back(j.at("step").get<double>());
        r.eval_loss.push_back(j.at("loss").get<double>());
      }
    } catch (const nlohmann::json::exception&) {
      STRATA_THROW(DataError, "strata plot: '", file, "' line ", lineno, " is not a metrics record");
    }
  }
  if (r.step.empty()) STRATA_THROW(DataError, "strata plot: '", file, "' holds no train record");
  if (r.units.size() != r.step.size()) r.units.clear(), r.unit_name.clear();  // older runs: steps only
  return r;
}

std::vector<double> ema(const std::vector<double>& v, double alpha) {
  // TensorBoard's smoothing: the average starts from 0 and is divided by the weight its
  // terms carry so far (1 - (1-alpha)^(i+1)), so the first points are not pulled toward
  // the first value (a seeded average lags far behind a falling loss for its first ~1/alpha points).
  std::vector<double> out(v.size());
  const double keep = 1 - alpha;
  double s = 0, weight = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    s = keep * s + alpha * v[i];
    weight = keep * weight + alpha;
    out[i] = s / weight;
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;  // 1, 2 or 5 x 10^k: the one giving the tick count closest to target
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (std::abs((hi - lo) / (m * mag) - target) < std::abs((hi - lo) / step - target)) step = m * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

namespace {

// One panel of plot_runs_svg at vertical offset y0: loss (and lr when `with_lr`) of every
// run against xs[k] (steps or units), eval points at eval_xs[k].
std::string loss_panel(const std::vector<RunCurves>& runs, const std::vector<std::vector<double>>& xs,
                       const std::vector<std::vector<double>>& eval_xs, const std::string& x_label, bool with_lr,
                       int width, int height, double y0) {
  const double left = 70, right = width - 70, top = y0 + 40, bottom = y0 + height - 60;
  double s_lo = 0, s_hi = -INFINITY, l_lo = INFINITY, l_hi = -INFINITY, r_lo = INFINITY, r_hi = -INFINITY;
  for (size_t k = 0; k < runs.size(); ++k) {
    range_of(xs[k], s_lo, s_hi);
    range_of(eval_xs[k], s_lo, s_hi);
    range_of(runs[k].loss, l_lo, l_hi);
    range_of(runs[k].eval_loss, l_lo, l_hi);
    if (with_lr) range_of(runs[k].lr, r_lo, r_hi);
  }
  if (!(s_hi > s_lo)) s_hi = s_lo + 1;
  const double pad = (l_hi - l_lo) * 0.05 + 1e-9;
  const Axis x{s_lo, s_hi, left, right}, y{l_lo - pad, l_hi + pad, bottom, top};
  const bool has_lr = std::isfinite(r_lo);
  const Axis ylr{0, has_lr && r_hi > 0 ? r_hi * 1.05 : 1, bottom, top};
  std::string s = "<g class=\"panel\" data-x=\"" + x_label + "\">\n";
  s += "<text x=\"" + fmt(width / 2.0) + "\" y=\"" + fmt(y0 + 22) + "\" text-anchor=\"middle\" font-size=\"15\">training loss" +
       std::string(has_lr ? " and learning rate" : "") + " against " + x_label + "</text>\n";
  // Grid, ticks and labels.
  s += "<g class=\"x-axis\" stroke=\"#ccc\">\n";
  for (double t : nice_ticks(x.lo, x.hi))
    s += "<line x1=\"" + fmt(x.at(t)) + "\" y1=\"" + fmt(top) + "\" x2=\"" + fmt(x.at(t)) + "\" y2=\"" + fmt(bottom) +
         "\"/><text stroke=\"none\" fill=\"black\" x=\"" + fmt(x.at(t)) + "\" y=\"" + fmt(bottom + 16) +
         "\" text-anchor=\"middle\">" + tick_label(t) + "</text>\n";
  s += "</g>\n<g class=\"y-axis\" stroke=\"#ccc\">\n";
  for (double t : nice_ticks(y.lo, y.hi))
    s += "<line x1=\"" + fmt(left) + "\" y1=\"" + fmt(y.at(t)) + "\" x2=\"" + fmt(right) + "\" y2=\"" + fmt(y.at(t)) +
         "\"/><text stroke=\"none\" fill=\"black\" x=\"" + fmt(left - 6) + "\" y=\"" + fmt(y.at(t) + 4) +
         "\" text-anchor=\"end\">" + tick_label(t) + "</text>\n";
  s += "</g>\n";
  if (has_lr) {
    s += "<g class=\"lr-axis\" fill=\"#666\">\n";
    for (double t : nice_ticks(ylr.lo, ylr.hi, 5))
      s += "<text x=\"" + fmt(right + 6) + "\" y=\"" + fmt(ylr.at(t) + 4) + "\">" + tick_label(t) + "</text>\n";
    s += "</g>\n<text x=\"" + fmt(width - 14) + "\" y=\"" + fmt((top + bottom) / 2) +
         "\" fill=\"#666\" text-anchor=\"middle\" transform=\"rotate(90 " + fmt(width - 14) + " " +
         fmt((top + bottom) / 2) + ")\">learning rate (dashed)</text>\n";
  }
  s += "<rect x=\"" + fmt(left) + "\" y=\"" + fmt(top) + "\" width=\"" + fmt(right - left) + "\" height=\"" +
       fmt(bottom - top) + "\" fill=\"none\" stroke=\"black\"/>\n";
  s += "<text x=\"" + fmt((left + right) / 2) + "\" y=\"" + fmt(bottom + 38) + "\" text-anchor=\"middle\">" + x_label +
       "</text>\n";
  s += "<text x=\"16\" y=\"" + fmt((top + bottom) / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " +
       fmt((top + bottom) / 2) + ")\">loss</text>\n";
  // One colour per run: raw loss faint, smoothed loss solid, eval circles, lr dashed.
  for (size_t k = 0; k < runs.size(); ++k) {
    const RunCurves& r = runs[k];
    const std::string c = kColors[k % std::size(kColors)];
    s += "<g class=\"run\" data-run=\"" + escape_xml(r.name) + "\">\n";
    s += polyline(xs[k], r.loss, x, y, "class=\"loss-raw\" stroke=\"" + c + "\" stroke-opacity=\"0.25\"");
    s += polyline(xs[k], ema(r.loss, 0.1), x, y, "class=\"loss\" stroke=\"" + c + "\" stroke-width=\"2\"");
    if (has_lr) s += polyline(xs[k], r.lr, x, ylr, "class=\"lr\" stroke=\"" + c + "\" stroke-dasharray=\"6 4\"");
    for (size_t i = 0; i < eval_xs[k].size(); ++i)
      s += "<circle class=\"eval\" cx=\"" + fmt(x.at(eval_xs[k][i])) + "\" cy=\"" + fmt(y.at(r.eval_loss[i])) +
           "\" r=\"4\" fill=\"white\" stroke=\"" + c + "\" stroke-width=\"2\"/>\n";
    const double ly = top + 16 + 18.0 * double(k);
    s += "<line x1=\"" + fmt(right - 220) + "\" y1=\"" + fmt(ly - 4) + "\" x2=\"" + fmt(right - 196) + "\" y2=\"" +
         fmt(ly - 4) + "\" stroke=\"" + c + "\" stroke-width=\"2\"/><text class=\"legend\" x=\"" + fmt(right - 190) +
         "\" y=\"" + fmt(ly) + "\">" + escape_xml(r.name) + "</text>\n</g>\n";
  }
  s += "<text x=\"" + fmt(left + 8) + "\" y=\"" + fmt(bottom - 8) +
       "\" fill=\"#444\">solid: loss (EMA 0.1), faint: raw, circles: eval loss</text>\n</g>\n";
  return s;
}

}  // namespace

std::string plot_runs_svg(const std::vector<RunCurves>& runs, int width, int height) {
  STRATA_CHECK(!runs.empty(), "[plot] no runs");
  std::vector<std::vector<double>> steps, eval_steps, units, eval_units;
  bool by_units = true;
  for (const RunCurves& r : runs) {
    steps.push_back(r.step);
    eval_steps.push_back(r.eval_step);
    by_units = by_units && !r.units.empty() && r.unit_name == runs[0].unit_name;
    if (!by_units) continue;
    // Eval points sit at a step: place them at that step's units (units grow linearly).
    const double per_step = r.units.back() / std::max(1.0, r.step.back());
    units.push_back(r.units);
    eval_units.emplace_back();
    for (double s : r.eval_step) eval_units.back().push_back(s * per_step);
  }
  const int total = by_units ? 2 * height : height;
  std::string s = svg_open(width, total);
  s += loss_panel(runs, steps, eval_steps, "step", true, width, height, 0);
  if (by_units) s += loss_panel(runs, units, eval_units, runs[0].unit_name, false, width, height, height);
  s += "</svg>\n";
  return s;
}

std::string plot_trace_svg(const nlohmann::json& trace, int width) {
  const std::vector<RankTimeline> ranks = rank_timelines(trace);
  double t0 = INFINITY, t1 = -INFINITY;
  for (const RankTimeline& r : ranks)
    if (!r.steps.empty()) t0 = std::min(t0, r.steps.front().first), t1 = std::max(t1, r.steps.back().second);
  if (!std::isfinite(t0)) STRATA_THROW(DataError, "strata plot --trace: the trace holds no training step");
  const double left = 130, right = width - 20, top = 46, row_h = 26, gap = 14;
  const double bottom = top + double(ranks.size()) * (2 * row_h + gap);
  const int height = int(bottom + 70);
  const Axis x{0, (t1 - t0) * 1e-3, left, right};  // ms since the first traced step
  auto at = [&](double us) { return x.at((us - t0) * 1e-3); };
  std::string s = svg_open(width, height);
  s += "<text x=\"" + fmt(width / 2.0) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">timeline: " +
       std::to_string(ranks.size()) + " rank(s), compute, communication and idle per traced step</text>\n";
  s += "<g class=\"x-axis\" stroke=\"#ccc\">\n";
  for (double t : nice_ticks(x.lo, x.hi, 8))
    s += "<line x1=\"" + fmt(x.at(t)) + "\" y1=\"" + fmt(top - 4) + "\" x2=\"" + fmt(x.at(t)) + "\" y2=\"" +
         fmt(bottom) + "\"/><text stroke=\"none\" fill=\"black\" x=\"" + fmt(x.at(t)) + "\" y=\"" + fmt(bottom + 16) +
         "\" text-anchor=\"middle\">" + tick_label(t) + "</text>\n";
  s += "</g>\n<text x=\"" + fmt((left + right) / 2) + "\" y=\"" + fmt(bottom + 36) +
       "\" text-anchor=\"middle\">time since the first traced step (ms)</text>\n";
  auto bars = [&](const Intervals& v, double y, const char* cls, const char* colour) {
    std::string g = "<g class=\"" + std::string(cls) + "\" fill=\"" + colour + "\">";
    for (const auto& [b, e] : v)  // at least 0.3 px wide, so a short op still shows
      g += "<rect x=\"" + fmt(at(b)) + "\" y=\"" + fmt(y) + "\" width=\"" + fmt(std::max(0.3, at(e) - at(b))) +
           "\" height=\"" + fmt(row_h - 6) + "\"/>";
    return g + "</g>\n";
  };
  for (size_t k = 0; k < ranks.size(); ++k) {
    const RankTimeline& r = ranks[k];
    const double y = top + double(k) * (2 * row_h + gap);
    const std::string comm_name = r.comm_tracks.empty() ? "comm" : r.comm_tracks.front();
    s += "<g class=\"row\" data-rank=\"" + std::to_string(r.rank) + "\">\n";
    s += "<text x=\"" + fmt(left - 8) + "\" y=\"" + fmt(y + row_h / 2 + 1) + "\" text-anchor=\"end\">rank " +
         std::to_string(r.rank) + " main</text>\n";
    s += "<text x=\"" + fmt(left - 8) + "\" y=\"" + fmt(y + row_h * 1.5 + 1) + "\" text-anchor=\"end\" fill=\"#555\">" +
         escape_xml(comm_name) + "</text>\n";
    s += bars(r.idle, y, "idle", "#d0d0d0");
    s += bars(r.compute, y, "compute", "#4c72b0");
    s += bars(r.exposed(), y, "exposed", "#dd8452");
    s += bars(r.comm, y + row_h, "comm", "#dd8452");
    for (const auto& [b, e] : r.steps)
      s += "<line class=\"step\" x1=\"" + fmt(at(b)) + "\" y1=\"" + fmt(y - 3) + "\" x2=\"" + fmt(at(b)) + "\" y2=\"" +
           fmt(y + 2 * row_h - 3) + "\" stroke=\"black\"/>";
    s += "\n</g>\n";
  }
  const double ly = double(height) - 14;
  const char* legend[][2] = {{"#4c72b0", "compute"}, {"#dd8452", "communication (main row: exposed)"},
                             {"#d0d0d0", "idle"}};
  double lx = left;
  for (const auto& [colour, what] : legend) {
    s += "<rect x=\"" + fmt(lx) + "\" y=\"" + fmt(ly - 10) + "\" width=\"12\" height=\"12\" fill=\"" + colour +
         "\"/><text class=\"legend\" x=\"" + fmt(lx + 16) + "\" y=\"" + fmt(ly) + "\">" + what + "</text>\n";
    lx += 40 + 7.0 * double(std::string(what).size());
  }
  s += "<text x=\"" + fmt(right) + "\" y=\"" + fmt(ly) + "\" text-anchor=\"end\" fill=\"#444\">black ticks: step starts</text>\n";
  s += "</svg>\n";
  return s;
}

}  // namespace strata::apps
