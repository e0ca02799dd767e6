// Building the per-rank action lists of GPipe, 1F1B and interleaved 1F1B, and the
// simulator that runs them against each other (see pipeline_schedule.h).
#include <strata/parallel/pipeline/schedule.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include <strata/core/config.h>
#include <strata/core/error.h>

namespace strata::parallel {
namespace {

Action compute(Action::Kind k, int mb, int stage) { return Action{.kind = k, .mb = mb, .stage = stage, .ops = {}}; }

// The compute order of one rank (no comms yet).
std::vector<Action> compute_order(const ScheduleShape& s, int r) {
  std::vector<Action> out;
  const int m = s.microbatches, p = s.pp;
  const auto F = [&](int mb, int st) { out.push_back(compute(Action::Kind::forward, mb, st)); };
  const auto B = [&](int mb, int st) { out.push_back(compute(Action::Kind::backward, mb, st)); };
  switch (s.kind) {
    case ScheduleKind::gpipe:
      for (int i = 0; i < m; ++i) F(i, r);
      for (int i = 0; i < m; ++i) B(i, r);
      break;
    case ScheduleKind::one_f_one_b: {
      const int warm = std::min(p - r - 1, m);
      for (int i = 0; i < warm; ++i) F(i, r);
      for (int i = 0; i < m - warm; ++i) {
        F(warm + i, r);
        B(i, r);
      }
      for (int i = m - warm; i < m; ++i) B(i, r);
      break;
    }
    case ScheduleKind::interleaved: {
      // Megatron-LM: virtual micro-batch k runs chunk (k / p) % v (backward: reversed) of
      // micro-batch (k / (p v)) p + k % p.
      const int v = s.virtual_stages, total = m * v;
      const auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
      const auto fchunk = [&](int k) { return (k / p) % v; };
      const auto bchunk = [&](int k) { return v - 1 - (k / p) % v; };
      const int warm = std::min((p - r - 1) * 2 + (v - 1) * p, total);
      for (int k = 0; k < warm; ++k) F(mb_of(k), fchunk(k) * p + r);
      for (int k = 0; k < total - warm; ++k) {
        F(mb_of(warm + k), fchunk(warm + k) * p + r);
        B(mb_of(k), bchunk(k) * p + r);
      }
      for (int k = total - warm; k < total; ++k) B(mb_of(k), bchunk(k) * p + r);
      break;
    }
    case ScheduleKind::zb_h1: {
      // 1F1B's order with each backward split into B (input gradient) and W (weight
      // gradients), as torch.distributed.pipelining's zero-bubble 1F1B lists: rank r's
      // first r steady-state cycles are F B (its W's wait), the later ones F B W, each
      // cool-down B is followed by a W, and the W's still pending run last. On equal F, B
      // and W this is ZB-H1's (p-1)(F+B-W) of idle time per rank (simulate(): 3m + p - 1
      // slots), against 1F1B's (p-1)(F+B+W).
      const int warm = std::min(p - r - 1, m);
      int w = 0;
      const auto W = [&] { out.push_back(compute(Action::Kind::weight, w++, r)); };
      for (int i = 0; i < warm; ++i) F(i, r);
      for (int i = 0; i < m - warm; ++i) {
        F(warm + i, r);
        B(i, r);
        if (i >= r) W();
      }
      for (int i = m - warm; i < m; ++i) {
        B(i, r);
        W();
      }
      while (w < m) W();
      break;
    }
  }
  return out;
}

std::string op_str(const CommOp& o) {
  return std::string(o.dir == CommOp::Dir::send ? "send " : "recv ") + (o.msg == CommOp::Msg::act ? "act(" : "grad(") +
         std::to_string(o.mb) + "," + std::to_string(o.stage) + ")" + (o.dir == CommOp::Dir::send ? "->" : "<-") +
         std::to_string(o.peer);
}

}  // namespace

const char* schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::zb_h1: return "zb-h1";
  }
  return "?";
}

bool splits_backward(ScheduleKind k) { return k == ScheduleKind::zb_h1; }

bool parse_schedule(const std::string& s, ScheduleKind& out) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved, ScheduleKind::zb_h1})
    if (s == schedule_name(k)) {
      out = k;
      return true;
    }
  return false;
}

std::string ScheduleShape::invalid() const {
  if (pp < 2) return "parallel.pp must be >= 2 for a pipeline schedule, got " + std::to_string(pp);
  if (microbatches < 1) return "parallel.microbatches must be >= 1, got " + std::to_string(microbatches);
  if (virtual_stages < 1) return "parallel.pp_virtual must be >= 1, got " + std::to_string(virtual_stages);
  if (kind != ScheduleKind::interleaved && virtual_stages != 1)
    return "parallel.pp_virtual is " + std::to_string(virtual_stages) + " but only the interleaved schedule has " +
           "virtual stages (parallel.pp_schedule: interleaved, or pp_virtual: 1)";
  if (kind == ScheduleKind::interleaved && microbatches % pp != 0)
    return "parallel.microbatches is " + std::to_string(microbatches) + " but the interleaved schedule needs a multiple " +
           "of parallel.pp = " + std::to_string(pp);
  return "";
}

int CommOp::tag(int stages, int max_tag) const {
  return int((((int64_t(mb) * stages + stage) * 2) + (msg == Msg::grad ? 1 : 0)) % max_tag);
}

std::string Action::str() const {
  if (is_compute()) return detail::str_cat(kind == Kind::forward ? "F" : kind == Kind::backward ? "B" : "W", mb, "@", stage);
  std::string s = kind == Kind::post ? "post[" : "wait[";
  for (size_t i = 0; i < ops.size(); ++i) s += (i ? ", " : "") + op_str(ops[i]);
  return s + "]";
}

Channel channel_of(const ScheduleShape& shape, const CommOp& op) {
  const int from = shape.owner(op.stage), P = shape.pp;
  return {op.msg, from, op.msg == CommOp::Msg::act ? (from + 1) % P : (from - 1 + P) % P};
}

namespace {

// The message compute action `a` needs from another rank (false when it needs none):
// forward(mb, s > 0) the activation act(mb, s - 1), backward(mb, s < S - 1) the gradient
// grad(mb, s + 1).
bool input_of(const ScheduleShape& shape, const Action& a, CommOp& out) {
  const int S = shape.stages();
  if (a.kind == Action::Kind::forward && a.stage > 0) {
    out = {CommOp::Dir::recv, CommOp::Msg::act, a.mb, a.stage - 1, shape.owner(a.stage - 1)};
    return true;
  }
  if (a.kind == Action::Kind::backward && a.stage < S - 1) {
    out = {CommOp::Dir::recv, CommOp::Msg::grad, a.mb, a.stage + 1, shape.owner(a.stage + 1)};
    return true;
  }
  return false;
}

// The message compute action `a` produces for another rank.
bool output_of(const ScheduleShape& shape, const Action& a, CommOp& out) {
  const int S = shape.stages();
  if (a.kind == Action::Kind::forward && a.stage < S - 1) {
    out = {CommOp::Dir::send, CommOp::Msg::act, a.mb, a.stage, shape.owner(a.stage + 1)};
    return true;
  }
  if (a.kind == Action::Kind::backward && a.stage > 0) {
    out = {CommOp::Dir::send, CommOp::Msg::grad, a.mb, a.stage, shape.owner(a.stage - 1)};
    return true;
  }
  return false;
}

Action comm_action(Action::Kind k, std::vector<CommOp> ops) {
  return Action{.kind = k, .mb = -1, .stage = -1, .ops = std::move(ops)};
}

}  // namespace

std::vector<std::vector<Action>> build_schedules(const ScheduleShape& shape) {
  const std::string bad = shape.invalid();
  if (!bad.empty()) config_fail(bad.substr(0, bad.find(' ')), bad.substr(bad.find(' ') + 1));
  const int P = shape.pp;
  std::vector<std::vector<Action>> out{size_t(P)};
  for (int r = 0; r < P; ++r) {
    const std::vector<Action> order = compute_order(shape, r);
    std::vector<Action>& L = out[size_t(r)];
    std::vector<CommOp> sends;
    size_t posted = 0;  // receives of order[0, posted) are posted
    for (size_t i = 0; i < order.size(); ++i) {
      // Post the receives of this compute (the first one only) and of the next one, so
      // the next input travels while this compute runs (Megatron posts its next recv
      // with the current send; torch.distributed.pipelining's irecv ahead of use).
      std::vector<CommOp> post;
      for (; posted < std::min(i + 2, order.size()); ++posted) {
        CommOp in;
        if (input_of(shape, order[posted], in)) post.push_back(in);
      }
      if (!post.empty()) L.push_back(comm_action(Action::Kind::post, std::move(post)));
      CommOp in, outmsg;
      if (input_of(shape, order[i], in)) L.push_back(comm_action(Action::Kind::wait, {in}));
      L.push_back(order[i]);
      if (output_of(shape, order[i], outmsg)) {
        L.push_back(comm_action(Action::Kind::post, {outmsg}));
        sends.push_back(outmsg);
      }
    }
    if (!sends.empty()) L.push_back(comm_action(Action::Kind::wait, std::move(sends)));
  }
  return out;
}

std::vector<Action> build_schedule(const ScheduleShape& shape, int rank) {
  STRATA_CHECK(rank >= 0 && rank < shape.pp, "[pipeline] rank ", rank, " outside pp ", shape.pp);
  return build_schedules(shape)[size_t(rank)];
}

double ScheduleSim::bubble() const {
  if (busy.empty() || makespan == 0) return 0.0;
  double s = 0;
  for (int64_t b : busy) s += 1.0 - double(b) / double(makespan);
  return s / double(busy.size());
}

ScheduleSim simulate(const ScheduleShape& shape, const std::vector<std::vector<Action>>& lists,
                     const std::vector<int64_t>& rank_cost) {
  ScheduleSim sim;
  const int P = shape.pp, S = shape.stages(), m = shape.microbatches;
  if (!rank_cost.empty() && (int(rank_cost.size()) != P ||
                             std::any_of(rank_cost.begin(), rank_cost.end(), [](int64_t c) { return c < 1; }))) {
    sim.error = "rank_cost needs one cost >= 1 per rank";
    return sim;
  }
  const auto cost_of = [&](size_t r) { return rank_cost.empty() ? int64_t(1) : rank_cost[r]; };
  const auto fail = [&](int r, const Action& a, const std::string& why) {
    sim.error = "rank " + std::to_string(r) + " at " + a.str() + ": " + why;
    return sim;
  };
  if (int(lists.size()) != P) {
    sim.error = "expected " + std::to_string(P) + " lists, got " + std::to_string(lists.size());
    return sim;
  }
  // Every message posted once per side, between the right ranks.
  using Key = std::tuple<int, int, int>;  // (msg, mb, stage)
  std::map<Key, int> sends, recvs;        // -> posting rank
  for (int r = 0; r < P; ++r)
    for (const Action& a : lists[size_t(r)]) {
      if (a.kind == Action::Kind::wait || a.is_compute()) continue;
      for (const CommOp& o : a.ops) {
        const Key k{int(o.msg), o.mb, o.stage};
        if (o.stage < 0 || o.stage >= S || (o.msg == CommOp::Msg::act ? o.stage + 1 >= S : o.stage == 0) || o.mb < 0 ||
            o.mb >= m)
          return fail(r, a, "message to a stage or micro-batch that does not exist");
        auto& where = o.dir == CommOp::Dir::send ? sends : recvs;
        if (!where.emplace(k, r).second) return fail(r, a, "message posted twice");
        const int from = shape.owner(o.stage);
        const int to = shape.owner(o.msg == CommOp::Msg::act ? o.stage + 1 : o.stage - 1);
        if ((o.dir == CommOp::Dir::send ? from : to) != r || (o.dir == CommOp::Dir::send ? to : from) != o.peer)
          return fail(r, a, "wrong rank or peer for " + op_str(o));
      }
    }
  for (const auto& [k, r] : sends)
    if (!recvs.count(k)) {
      sim.error = "a message sent by rank " + std::to_string(r) + " is never received";
      return sim;
    }
  for (const auto& [k, r] : recvs)
    if (!sends.count(k)) {
      sim.error = "rank " + std::to_string(r) + " receives a message no rank sends";
      return sim;
    }
  // Channels, keyed by (msg, sender): each side's posted ops in order, with post times;
  // pair k (the k-th send with the k-th receive) completes at the latest of both posts
  // and pair k-1's completion (one comm thread per channel and side: FIFO).
  struct Posted {
    CommOp op;
    int64_t at;
  };
  struct Chan {
    std::vector<Posted> side[2];  // 0: sender's, 1: receiver's
    std::vector<int64_t> done;    // completion time of each matched pair
  };
  std::map<std::pair<int, int>, Chan> chans;
  const auto chan_key = [&](const CommOp& o) { return std::make_pair(int(o.msg), shape.owner(o.stage)); };
  // Matches the pairs both sides have posted; "" or why the channel is stuck for good.
  const auto match = [&](Chan& c) -> std::string {
    while (c.done.size() < std::min(c.side[0].size(), c.side[1].size())) {
      const size_t k = c.done.size();
      const CommOp &s = c.side[0][k].op, &q = c.side[1][k].op;
      if (s.msg != q.msg || s.mb != q.mb || s.stage != q.stage)
        return "channel out of order: the sender's op " + std::to_string(k) + " is " + op_str(s) +
               " but the receiver's is " + op_str(q) + " (both wait for their other half for good)";
      c.done.push_back(std::max({c.side[0][k].at, c.side[1][k].at, k ? c.done[k - 1] : int64_t(0)}));
    }
    return "";
  };
  // Per rank: where each of its posted ops sits in its channel, and whether waited.
  struct Mine {
    size_t index;
    bool waited = false;
  };
  std::vector<std::map<std::tuple<int, int, int, int>, Mine>> mine(static_cast<size_t>(P));  // (dir, msg, mb, stage)
  const auto mine_key = [](const CommOp& o) { return std::make_tuple(int(o.dir), int(o.msg), o.mb, o.stage); };

  std::vector<size_t> pc(size_t(P), 0);
  std::vector<int64_t> t(size_t(P), 0);
  std::vector<std::vector<int>> fwd(size_t(S), std::vector<int>(size_t(m), 0)), bwd = fwd, wgt = fwd;
  std::vector<std::vector<int>> got_act = fwd, got_grad = fwd;
  std::vector<int> in_flight(size_t(P), 0);
  sim.busy.assign(size_t(P), 0);
  sim.peak_in_flight.assign(size_t(P), 0);
  sim.cells.assign(size_t(P), {});
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      const auto& L = lists[size_t(r)];
      const size_t R = size_t(r);
      while (pc[R] < L.size()) {
        const Action& a = L[pc[R]];
        if (a.is_compute()) {
          if (a.mb < 0 || a.mb >= m || a.stage < 0 || a.stage >= S) return fail(r, a, "no such micro-batch or stage");
          if (shape.owner(a.stage) != r) return fail(r, a, "stage lives on rank " + std::to_string(shape.owner(a.stage)));
          const size_t s = size_t(a.stage), mb = size_t(a.mb);
          if (a.kind == Action::Kind::forward) {
            if (fwd[s][mb]++) return fail(r, a, "forward twice");
            if (a.stage > 0 && !got_act[s - 1][mb]) return fail(r, a, "input activation not received");
            sim.peak_in_flight[R] = std::max(sim.peak_in_flight[R], ++in_flight[R]);
          } else if (a.kind == Action::Kind::backward) {
            if (!fwd[s][mb]) return fail(r, a, "backward before forward");
            if (bwd[s][mb]++) return fail(r, a, "backward twice");
            if (a.stage < S - 1 && !got_grad[s + 1][mb]) return fail(r, a, "output gradient not received");
            --in_flight[R];
          } else {
            if (!splits_backward(shape.kind)) return fail(r, a, "a weight pass in a schedule whose backward is whole");
            if (!bwd[s][mb]) return fail(r, a, "weight pass before its backward");
            if (wgt[s][mb]++) return fail(r, a, "weight pass twice");
          }
          std::string cell = (a.kind == Action::Kind::forward    ? "F"
                              : a.kind == Action::Kind::backward ? "B"
                                                                 : "W") +
                             std::to_string(a.mb);
          if (shape.virtual_stages > 1) cell += "." + std::to_string(a.stage / P);
          sim.cells[R].resize(size_t(t[R]), "");
          for (int64_t c = 0; c < cost_of(R); ++c) sim.cells[R].push_back(cell);
          t[R] += cost_of(R);
          sim.busy[R] += cost_of(R);
        } else if (a.kind == Action::Kind::post) {
          for (const CommOp& o : a.ops) {
            if (o.dir == CommOp::Dir::send) {
              const auto& done = o.msg == CommOp::Msg::act ? fwd : bwd;
              if (!done[size_t(o.stage)][size_t(o.mb)]) return fail(r, a, "sends data not computed yet");
            }
            Chan& c = chans[chan_key(o)];
            auto& side = c.side[o.dir == CommOp::Dir::send ? 0 : 1];
            mine[R][mine_key(o)] = Mine{side.size()};
            side.push_back({o, t[R]});
            const std::string why = match(c);
            if (!why.empty()) return fail(r, a, why);
          }
        } else {  // wait: blocks until every listed op has completed
          int64_t ready = t[R];
          bool all = true;
          for (const CommOp& o : a.ops) {
            const auto it = mine[R].find(mine_key(o));
            if (it == mine[R].end()) return fail(r, a, "waits for " + op_str(o) + " before posting it");
            if (it->second.waited) return fail(r, a, "waits twice for " + op_str(o));
            const Chan& c = chans[chan_key(o)];
            if (it->second.index >= c.done.size()) {
              all = false;
              break;
            }
            ready = std::max(ready, c.done[it->second.index]);
          }
          if (!all) break;
          for (const CommOp& o : a.ops) {
            mine[R][mine_key(o)].waited = true;
            if (o.dir == CommOp::Dir::recv)
              (o.msg == CommOp::Msg::act ? got_act : got_grad)[size_t(o.stage)][size_t(o.mb)] = 1;
          }
          t[R] = ready;
        }
        ++pc[R];
        progress = true;
      }
    }
  }
  for (int r = 0; r < P; ++r)
    if (pc[size_t(r)] < lists[size_t(r)].size()) {
      std::string who;
      for (int q = 0; q < P; ++q)
        if (pc[size_t(q)] < lists[size_t(q)].size())
          who += " rank " + std::to_string(q) + " at " + lists[size_t(q)][pc[size_t(q)]].str() + ";";
      sim.error = "deadlock:" + who;
      return sim;
    }
  for (int s = 0; s < S; ++s)
    for (int mb = 0; mb < m; ++mb)
      if (!fwd[size_t(s)][size_t(mb)] || !bwd[size_t(s)][size_t(mb)] ||
          (splits_backward(shape.kind) && !wgt[size_t(s)][size_t(mb)])) {
        sim.error = "micro-batch " + std::to_string(mb) + " never ran " +
                    (!fwd[size_t(s)][size_t(mb)] ? "forward" : !bwd[size_t(s)][size_t(mb)] ? "backward" : "its weight pass") +
                    " on stage " + std::to_string(s);
        return sim;
      }
  for (int r = 0; r < P; ++r)
    for (const auto& [k, my] : mine[size_t(r)])
      if (!my.waited) {
        sim.error = "rank " + std::to_string(r) + " never waits for an op it posted (" +
                    (std::get<0>(k) == int(CommOp::Dir::send) ? "send" : "recv") + " of micro-batch " +
                    std::to_string(std::get<2>(k)) + ", stage " + std::to_string(std::get<3>(k)) + ")";
        return sim;
      }
  sim.makespan = *std::max_element(t.begin(), t.end());
  for (auto& row : sim.cells) row.resize(size_t(sim.makespan), "");
  return sim;
}

double bubble_formula(const ScheduleShape& s) {
  const double p = s.pp, vm = double(s.virtual_stages) * s.microbatches;
  if (splits_backward(s.kind)) return (p - 1) / (3 * vm + p - 1);
  return (p - 1) / (vm + p - 1);
}

double imbalance_bubble(const ScheduleShape& s, const std::vector<double>& busy) {
  STRATA_CHECK(int(busy.size()) == s.pp, "[pipeline] ", busy.size(), " busy times for pp ", s.pp);
  const double top = *std::max_element(busy.begin(), busy.end());
  if (!(top > 0)) return 0.0;
  std::vector<int64_t> cost;
  for (double b : busy) cost.push_back(std::max<int64_t>(1, std::llround(200.0 * std::max(b, 0.0) / top)));
  const ScheduleSim sim = simulate(s, build_schedules(s), cost);
  STRATA_CHECK(sim.error.empty(), "[pipeline] ", sim.error);
  const int64_t most = *std::max_element(sim.busy.begin(), sim.busy.end());
  return 1.0 - double(most) / double(sim.makespan);
}

std::string bubble_formula_str(const ScheduleShape& s) {
  const int p = s.pp, vm = s.virtual_stages * s.microbatches;
  const bool zb = splits_backward(s.kind);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s = %d/%d = %.3f",
                zb ? "(p-1)/(3m+p-1)" : s.virtual_stages > 1 ? "(p-1)/(v*m+p-1)" : "(p-1)/(m+p-1)", p - 1,
                (zb ? 3 * vm : vm) + p - 1, bubble_formula(s));
  return buf;
}

std::string schedule_chart(const ScheduleShape& shape, const ScheduleSim& sim) {
  size_t w = 2;
  for (const auto& row : sim.cells)
    for (const auto& c : row) w = std::max(w, c.size());
  std::string out;
  for (size_t r = 0; r < sim.cells.size(); ++r) {
    out += detail::str_cat("rank ", r, " |");
    for (const auto& c : sim.cells[r]) {
      out += ' ';
      out += c.empty() ? std::string(w, '.') : c + std::string(w - c.size(), ' ');
    }
    out += " | peak in flight " + std::to_string(sim.peak_in_flight[r]) + "\n";
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s, pp %d, m %d, v %d: %lld slots; bubble simulated %.3f, formula %s\n",
                schedule_name(shape.kind), shape.pp, shape.microbatches, shape.virtual_stages,
                static_cast<long long>(sim.makespan), sim.bubble(), bubble_formula_str(shape).c_str());
  return out + buf;
}

}  // namespace strata::parallel
