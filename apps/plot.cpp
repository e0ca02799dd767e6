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
  if (v != 0 && std::abs(v) < 1e-3)
    std::snprintf(buf, sizeof buf, "%.0e", v);
  else if (std::abs(v) >= 1e5)  // 1.2e+06, not 1e+06 for every tick between 1e6 and 2e6
    std::snprintf(buf, sizeof buf, "%.3g", v);
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

// [lo, hi] widened by 5% of the span (at least `min_pad`) each side, onto [px_lo, px_hi].
Axis padded_axis(double lo, double hi, double px_lo, double px_hi, double min_pad = 0) {
  const double pad = std::max((hi - lo) * 0.05, min_pad) + 1e-9;
  return {lo - pad, hi + pad, px_lo, px_hi};
}

// [0 (or below), the largest value of `a` and `b`] onto [px_lo, px_hi]: the x axis of the
// panels against steps or units (a unit span when there is nothing past 0).
Axis from_zero_axis(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b,
                    double px_lo, double px_hi) {
  double lo = 0, hi = -INFINITY;
  for (const auto& v : a) range_of(v, lo, hi);
  for (const auto& v : b) range_of(v, lo, hi);
  if (!(hi > lo)) hi = lo + 1;
  return {lo, hi, px_lo, px_hi};
}

// The plot rectangle of a plot_runs_svg panel `height` px tall at vertical offset y0: room
// for the title above, tick and axis labels below and left, a second axis right.
struct Frame {
  double left, right, top, bottom;
};
Frame panel_frame(int width, int height, double y0) { return {70, width - 70.0, y0 + 40, y0 + height - 60}; }

std::string panel_title(int width, double y0, const std::string& title) {
  return "<text x=\"" + fmt(width / 2.0) + "\" y=\"" + fmt(y0 + 22) + "\" text-anchor=\"middle\" font-size=\"15\">" +
         title + "</text>\n";
}

// Vertical grid lines at x's ticks from y_top to y_bottom, labelled below y_bottom.
std::string x_grid(const Axis& x, double y_top, double y_bottom, int target = 6) {
  std::string s = "<g class=\"x-axis\" stroke=\"#ccc\">\n";
  for (double t : nice_ticks(x.lo, x.hi, target))
    s += "<line x1=\"" + fmt(x.at(t)) + "\" y1=\"" + fmt(y_top) + "\" x2=\"" + fmt(x.at(t)) + "\" y2=\"" + fmt(y_bottom) +
         "\"/><text stroke=\"none\" fill=\"black\" x=\"" + fmt(x.at(t)) + "\" y=\"" + fmt(y_bottom + 16) +
         "\" text-anchor=\"middle\">" + tick_label(t) + "</text>\n";
  return s + "</g>\n";
}

// Horizontal grid lines at y's ticks across the frame, labelled left of it.
std::string y_grid(const Axis& y, const Frame& f) {
  std::string s = "<g class=\"y-axis\" stroke=\"#ccc\">\n";
  for (double t : nice_ticks(y.lo, y.hi))
    s += "<line x1=\"" + fmt(f.left) + "\" y1=\"" + fmt(y.at(t)) + "\" x2=\"" + fmt(f.right) + "\" y2=\"" + fmt(y.at(t)) +
         "\"/><text stroke=\"none\" fill=\"black\" x=\"" + fmt(f.left - 6) + "\" y=\"" + fmt(y.at(t) + 4) +
         "\" text-anchor=\"end\">" + tick_label(t) + "</text>\n";
  return s + "</g>\n";
}

// Tick labels of a second axis right of the frame (grey, group class `cls`) and its label.
std::string right_axis(const Axis& y, const Frame& f, int width, const std::string& cls, const std::string& label) {
  std::string s = "<g class=\"" + cls + "\" fill=\"#666\">\n";
  for (double t : nice_ticks(y.lo, y.hi, 5))
    s += "<text x=\"" + fmt(f.right + 6) + "\" y=\"" + fmt(y.at(t) + 4) + "\">" + tick_label(t) + "</text>\n";
  return s + "</g>\n<text x=\"" + fmt(width - 14) + "\" y=\"" + fmt((f.top + f.bottom) / 2) +
         "\" fill=\"#666\" text-anchor=\"middle\" transform=\"rotate(90 " + fmt(width - 14) + " " +
         fmt((f.top + f.bottom) / 2) + ")\">" + label + "</text>\n";
}

// The frame's border, the x axis label below it and the y axis label rotated on its left.
std::string frame_box(const Frame& f, const std::string& x_label, const std::string& y_label) {
  return "<rect x=\"" + fmt(f.left) + "\" y=\"" + fmt(f.top) + "\" width=\"" + fmt(f.right - f.left) + "\" height=\"" +
         fmt(f.bottom - f.top) + "\" fill=\"none\" stroke=\"black\"/>\n" + "<text x=\"" + fmt((f.left + f.right) / 2) +
         "\" y=\"" + fmt(f.bottom + 38) + "\" text-anchor=\"middle\">" + x_label + "</text>\n" +
         "<text x=\"16\" y=\"" + fmt((f.top + f.bottom) / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " +
         fmt((f.top + f.bottom) / 2) + ")\">" + y_label + "</text>\n";
}

// Legend row `k` in the frame's top right corner: a short line in `colour`, then `name`.
std::string legend_entry(const Frame& f, size_t k, const std::string& colour, const std::string& name) {
  const double ly = f.top + 16 + 18.0 * double(k);
  return "<line x1=\"" + fmt(f.right - 220) + "\" y1=\"" + fmt(ly - 4) + "\" x2=\"" + fmt(f.right - 196) + "\" y2=\"" +
         fmt(ly - 4) + "\" stroke=\"" + colour + "\" stroke-width=\"2\"/><text class=\"legend\" x=\"" +
         fmt(f.right - 190) + "\" y=\"" + fmt(ly) + "\">" + escape_xml(name) + "</text>\n";
}

// A grey caption in the frame's bottom left corner saying what the line styles mean.
std::string frame_note(const Frame& f, const std::string& text) {
  return "<text x=\"" + fmt(f.left + 8) + "\" y=\"" + fmt(f.bottom - 8) + "\" fill=\"#444\">" + text + "</text>\n";
}

// Appends a train record's "moe" object at `step` to `moe` (plot.h: MoeCurves); `where` names
// the file and line in errors. Every record must have the first one's layers and, per layer,
// its expert count.
void read_moe(const nlohmann::json& m, double step, MoeCurves& moe, const std::string& where) {
  auto fail = [&](const auto&... what) { STRATA_THROW(DataError, where, ": \"moe\" ", what...); };
  if (!m.is_object()) fail("is ", m.dump(), ", not an object");
  for (const char* key : {"layers", "tokens", "dropped", "aux_loss", "z_loss"})
    if (!m.contains(key)) fail("has no \"", key, "\" (layers, tokens, dropped, aux_loss and z_loss come together)");
  const nlohmann::json &layers = m.at("layers"), &tokens = m.at("tokens"), &dropped = m.at("dropped");
  if (!layers.is_array() || layers.empty()) fail("\"layers\" is ", layers.dump(), ", not a list of block indices");
  std::vector<int> ids;
  for (const nlohmann::json& l : layers) {
    if (!l.is_number_integer() || l.get<long long>() < 0) fail("\"layers\" holds ", l.dump(), ", not a block index");
    ids.push_back(l.get<int>());
  }
  if (!moe.empty() && ids != moe.layers)
    fail("\"layers\" is ", layers.dump(), " where the earlier records have ", nlohmann::json(moe.layers).dump());
  // What a list holds instead of one entry per layer: its length, or the value that is no list.
  auto held = [](const nlohmann::json& v) { return v.is_array() ? std::to_string(v.size()) : v.dump(); };
  if (!tokens.is_array() || tokens.size() != ids.size())
    fail("\"tokens\" must hold one row per layer (", ids.size(), " for \"layers\" ", layers.dump(), "), not ",
         held(tokens));
  if (!dropped.is_array() || dropped.size() != ids.size())
    fail("\"dropped\" must hold one count per layer (", ids.size(), " for \"layers\" ", layers.dump(), "), not ",
         held(dropped));
  for (const char* key : {"aux_loss", "z_loss"})
    if (!m.at(key).is_number()) fail("\"", key, "\" is ", m.at(key).dump(), ", not a number");
  auto count = [&](const nlohmann::json& v, const char* what) {
    if (!v.is_number() || v.get<double>() < 0) fail(what, " holds ", v.dump(), ", not a count");
    return v.get<double>();
  };
  std::vector<std::vector<double>> per_layer(ids.size());
  std::vector<double> drop(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string row = "\"tokens\"[" + std::to_string(i) + "]";
    if (!tokens[i].is_array() || tokens[i].empty()) fail(row, " is ", tokens[i].dump(), ", not a list of counts per expert");
    for (const nlohmann::json& v : tokens[i]) per_layer[i].push_back(count(v, row.c_str()));
    if (!moe.empty() && per_layer[i].size() != moe.tokens.front()[i].size())
      fail(row, " (layer ", ids[i], ") has ", per_layer[i].size(), " experts where the earlier records have ",
           moe.tokens.front()[i].size());
    drop[i] = count(dropped[i], "\"dropped\"");
  }
  moe.layers = std::move(ids);
  moe.step.push_back(step);
  moe.tokens.push_back(std::move(per_layer));
  moe.dropped.push_back(std::move(drop));
  moe.aux_loss.push_back(m.at("aux_loss").get<double>());
  moe.z_loss.push_back(m.at("z_loss").get<double>());
}

}  // namespace

double expert_load_ratio(std::span<const double> tokens) {
  double sum = 0, most = 0;
  for (double t : tokens) sum += t, most = std::max(most, t);
  if (!(sum > 0)) return NAN;
  return most / (sum / double(tokens.size()));
}

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
        if (j.contains("moe"))
          read_moe(j.at("moe"), r.step.back(), r.moe, "strata plot: '" + file + "' line " + std::to_string(lineno));
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
  const Frame f = panel_frame(width, height, y0);
  double l_lo = INFINITY, l_hi = -INFINITY, r_lo = INFINITY, r_hi = -INFINITY;
  for (const RunCurves& r : runs) {
    range_of(r.loss, l_lo, l_hi);
    range_of(r.eval_loss, l_lo, l_hi);
    if (with_lr) range_of(r.lr, r_lo, r_hi);
  }
  const Axis x = from_zero_axis(xs, eval_xs, f.left, f.right), y = padded_axis(l_lo, l_hi, f.bottom, f.top);
  const bool has_lr = std::isfinite(r_lo);
  const Axis ylr{0, has_lr && r_hi > 0 ? r_hi * 1.05 : 1, f.bottom, f.top};
  std::string s = "<g class=\"panel\" data-x=\"" + x_label + "\">\n";
  s += panel_title(width, y0, "training loss" + std::string(has_lr ? " and learning rate" : "") + " against " + x_label);
  s += x_grid(x, f.top, f.bottom) + y_grid(y, f);
  if (has_lr) s += right_axis(ylr, f, width, "lr-axis", "learning rate (dashed)");
  s += frame_box(f, x_label, "loss");
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
    s += legend_entry(f, k, c, r.name) + "</g>\n";
  }
  return s + frame_note(f, "solid: loss (EMA 0.1), faint: raw, circles: eval loss") + "</g>\n";
}

// The panels of runs with MoE data, below the loss panels. `steps` is the first loss panel's
// step range, so the curves line up with the loss.

// Expert load of every MoE layer of every run: expert_load_ratio per recorded step, a colour
// per (run, layer) line (named by run too when several runs are plotted), a dashed reference
// at 1 (perfect balance).
std::string expert_load_panel(const std::vector<RunCurves>& runs, const Axis& steps, int width, int height, double y0) {
  const Frame f = panel_frame(width, height, y0);
  const Axis x{steps.lo, steps.hi, f.left, f.right};
  std::vector<std::vector<std::vector<double>>> ratio(runs.size());  // (run, layer, record)
  double lo = 1, hi = 1;
  for (size_t k = 0; k < runs.size(); ++k) {
    const MoeCurves& m = runs[k].moe;
    ratio[k].resize(m.layers.size());
    for (size_t l = 0; l < m.layers.size(); ++l) {
      for (const auto& record : m.tokens) ratio[k][l].push_back(expert_load_ratio(record[l]));
      range_of(ratio[k][l], lo, hi);
    }
  }
  const Axis y = padded_axis(lo - 0.05, hi, f.bottom, f.top);  // the line at 1 stays off the frame
  std::string s = "<g class=\"panel\" data-panel=\"expert-load\" data-x=\"step\">\n";
  s += panel_title(width, y0, "expert load: max / mean tokens per expert against step");
  s += x_grid(x, f.top, f.bottom) + y_grid(y, f) + frame_box(f, "step", "max / mean tokens per expert");
  s += "<line class=\"balanced\" x1=\"" + fmt(f.left) + "\" y1=\"" + fmt(y.at(1)) + "\" x2=\"" + fmt(f.right) +
       "\" y2=\"" + fmt(y.at(1)) + "\" stroke=\"black\" stroke-dasharray=\"6 4\"/>\n";
  size_t series = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const MoeCurves& m = runs[k].moe;
    if (m.empty()) continue;
    s += "<g class=\"run\" data-run=\"" + escape_xml(runs[k].name) + "\">\n";
    for (size_t l = 0; l < m.layers.size(); ++l, ++series) {
      const std::string c = kColors[series % std::size(kColors)], layer = std::to_string(m.layers[l]);
      s += polyline(m.step, ratio[k][l], x, y,
                    "class=\"expert-load\" data-layer=\"" + layer + "\" stroke=\"" + c + "\" stroke-width=\"2\"");
      s += legend_entry(f, series, c, (runs.size() > 1 ? runs[k].name + ": " : std::string()) + "layer " + layer);
    }
    s += "</g>\n";
  }
  return s + frame_note(f, "dashed: 1 = every expert of the layer gets as many tokens") + "</g>\n";
}

bool has_z_loss(const MoeCurves& m) {
  return std::any_of(m.z_loss.begin(), m.z_loss.end(), [](double v) { return v != 0; });
}

// The load-balancing loss (solid) of every MoE run against the step, in the run's colour of
// the loss panel, and the router z-loss (dashed, right axis) where a run records one.
std::string aux_loss_panel(const std::vector<RunCurves>& runs, const Axis& steps, int width, int height, double y0) {
  const Frame f = panel_frame(width, height, y0);
  const Axis x{steps.lo, steps.hi, f.left, f.right};
  double lo = INFINITY, hi = -INFINITY, z_lo = INFINITY, z_hi = -INFINITY;
  for (const RunCurves& r : runs) {
    range_of(r.moe.aux_loss, lo, hi);
    if (has_z_loss(r.moe)) range_of(r.moe.z_loss, z_lo, z_hi);
  }
  const bool any_z = std::isfinite(z_lo);
  // A loss that barely moves still gets a readable axis: at least 5% of its size each side.
  const Axis y = padded_axis(lo, hi, f.bottom, f.top, 0.05 * std::abs(hi));
  const Axis yz = any_z ? padded_axis(z_lo, z_hi, f.bottom, f.top, 0.05 * std::abs(z_hi)) : y;
  std::string s = "<g class=\"panel\" data-panel=\"aux-loss\" data-x=\"step\">\n";
  s += panel_title(width, y0, std::string("MoE load-balancing loss") + (any_z ? " and router z-loss" : "") + " against step");
  s += x_grid(x, f.top, f.bottom) + y_grid(y, f);
  if (any_z) s += right_axis(yz, f, width, "z-loss-axis", "z-loss (dashed)");
  s += frame_box(f, "step", "aux loss");
  size_t row = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const MoeCurves& m = runs[k].moe;
    if (m.empty()) continue;
    const std::string c = kColors[k % std::size(kColors)];
    s += "<g class=\"run\" data-run=\"" + escape_xml(runs[k].name) + "\">\n";
    s += polyline(m.step, m.aux_loss, x, y, "class=\"aux-loss\" stroke=\"" + c + "\" stroke-width=\"2\"");
    if (has_z_loss(m))
      s += polyline(m.step, m.z_loss, x, yz, "class=\"z-loss\" stroke=\"" + c + "\" stroke-dasharray=\"6 4\"");
    s += legend_entry(f, row++, c, runs[k].name) + "</g>\n";
  }
  return s + "</g>\n";
}

constexpr double kCellHeight = 28;  // px per layer row of the heatmap

// Title, a row per layer, expert indices, and the colour scale below.
int heatmap_height(const MoeCurves& m) { return int(40 + kCellHeight * double(m.layers.size()) + 80); }

// Linear from white (t = 0) to dark blue (t = 1, the largest share in the heatmap).
std::string share_colour(double t) {
  auto mix = [&](int to) { return int(std::lround(255 + (to - 255) * std::clamp(t, 0.0, 1.0))); };
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", mix(0x08), mix(0x30), mix(0x6b));
  return buf;
}

std::string percent(double share, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f%%", decimals, 100 * share);
  return buf;
}

// The token share of each expert (its tokens / the layer's tokens) at the run's last recorded
// step: a row per layer, a cell per expert coloured by share, the layer's dropped assignments
// on the right, and a colour scale below.
std::string expert_share_heatmap(const RunCurves& r, int width, double y0) {
  const MoeCurves& m = r.moe;
  const std::vector<std::vector<double>>& last = m.tokens.back();  // (L, E_l)
  std::vector<std::vector<double>> share(last.size());              // (L, E_l)
  size_t experts = 0;
  double top_share = 0;
  for (size_t l = 0; l < last.size(); ++l) {
    double sum = 0;
    for (double t : last[l]) sum += t;
    for (double t : last[l]) share[l].push_back(sum > 0 ? t / sum : 0), top_share = std::max(top_share, share[l].back());
    experts = std::max(experts, last[l].size());
  }
  const double left = 70, right = width - 70.0, top = y0 + 40, bottom = top + kCellHeight * double(last.size());
  const double cell_w = (right - left) / double(experts);
  std::string s = "<g class=\"panel\" data-panel=\"expert-share\">\n";
  s += panel_title(width, y0, "token share per expert at step " + tick_label(m.step.back()) + " (" + escape_xml(r.name) + ")");
  s += "<text x=\"" + fmt(right + 6) + "\" y=\"" + fmt(top - 6) + "\" fill=\"#444\">dropped</text>\n";
  for (size_t l = 0; l < last.size(); ++l) {
    const double y = top + kCellHeight * double(l);
    const std::string layer = std::to_string(m.layers[l]);
    s += "<g class=\"layer\" data-layer=\"" + layer + "\">\n<text x=\"" + fmt(left - 6) + "\" y=\"" +
         fmt(y + kCellHeight / 2 + 4) + "\" text-anchor=\"end\">layer " + layer + "</text>\n";
    for (size_t e = 0; e < share[l].size(); ++e) {
      const double t = top_share > 0 ? share[l][e] / top_share : 0, x = left + cell_w * double(e);
      s += "<rect class=\"moe-cell\" x=\"" + fmt(x) + "\" y=\"" + fmt(y) + "\" width=\"" + fmt(cell_w) + "\" height=\"" +
           fmt(kCellHeight) + "\" fill=\"" + share_colour(t) + "\" stroke=\"white\"><title>layer " + layer + ", expert " +
           std::to_string(e) + ": " + percent(share[l][e], 1) + " (" + tick_label(last[l][e]) + " tokens)</title></rect>\n";
      if (cell_w >= 30)  // the share in the cell when it fits
        s += "<text x=\"" + fmt(x + cell_w / 2) + "\" y=\"" + fmt(y + kCellHeight / 2 + 4) +
             "\" text-anchor=\"middle\" font-size=\"10\" fill=\"" + (t > 0.6 ? "white" : "black") + "\">" +
             percent(share[l][e], 0) + "</text>\n";
    }
    s += "<text x=\"" + fmt(right + 6) + "\" y=\"" + fmt(y + kCellHeight / 2 + 4) + "\">" +
         tick_label(m.dropped.back()[l]) + "</text>\n</g>\n";
  }
  // Expert indices under the columns: every one when they fit, else nice ticks.
  std::vector<double> columns;
  if (experts <= 16)
    for (size_t e = 0; e < experts; ++e) columns.push_back(double(e));
  else
    columns = nice_ticks(0, double(experts - 1), 8);
  for (double e : columns)
    s += "<text x=\"" + fmt(left + cell_w * (e + 0.5)) + "\" y=\"" + fmt(bottom + 16) + "\" text-anchor=\"middle\">" +
         tick_label(e) + "</text>\n";
  s += "<text x=\"" + fmt((left + right) / 2) + "\" y=\"" + fmt(bottom + 34) + "\" text-anchor=\"middle\">expert</text>\n";
  s += "<defs><linearGradient id=\"moe-share-scale\"><stop offset=\"0\" stop-color=\"" + share_colour(0) +
       "\"/><stop offset=\"1\" stop-color=\"" + share_colour(1) + "\"/></linearGradient></defs>\n";
  s += "<rect x=\"" + fmt(left) + "\" y=\"" + fmt(bottom + 46) +
       "\" width=\"200\" height=\"10\" fill=\"url(#moe-share-scale)\" stroke=\"#999\"/>\n";
  s += "<text x=\"" + fmt(left) + "\" y=\"" + fmt(bottom + 70) + "\">0%</text><text x=\"" + fmt(left + 200) + "\" y=\"" +
       fmt(bottom + 70) + "\" text-anchor=\"end\">" + percent(top_share, 1) + "</text>\n";
  s += "<text x=\"" + fmt(left + 210) + "\" y=\"" + fmt(bottom + 56) + "\" fill=\"#444\">share of the layer's tokens (balanced: 1/" +
       std::to_string(experts) + " = " + percent(1.0 / double(experts), 1) + " each)</text>\n";
  return s + "</g>\n";
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
  const auto first_moe = std::find_if(runs.begin(), runs.end(), [](const RunCurves& r) { return !r.moe.empty(); });
  const int aux_height = std::max(200, height / 2);
  int total = by_units ? 2 * height : height;
  if (first_moe != runs.end()) total += height + aux_height + heatmap_height(first_moe->moe);
  std::string s = svg_open(width, total);
  s += loss_panel(runs, steps, eval_steps, "step", true, width, height, 0);
  if (by_units) s += loss_panel(runs, units, eval_units, runs[0].unit_name, false, width, height, height);
  if (first_moe != runs.end()) {
    const Axis step_axis = from_zero_axis(steps, eval_steps, 0, 1);  // the loss panel's step range
    double y0 = by_units ? 2 * height : height;
    s += expert_load_panel(runs, step_axis, width, height, y0);
    s += aux_loss_panel(runs, step_axis, width, aux_height, y0 += height);
    s += expert_share_heatmap(*first_moe, width, y0 += aux_height);
  }
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
  s += x_grid(x, top - 4, bottom, 8);
  s += "<text x=\"" + fmt((left + right) / 2) + "\" y=\"" + fmt(bottom + 36) +
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
