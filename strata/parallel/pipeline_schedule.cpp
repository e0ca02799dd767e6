// Building the per-rank action lists of GPipe, 1F1B and interleaved 1F1B, and the
// simulator that runs them against each other (see pipeline_schedule.h).
#include <strata/parallel/pipeline_schedule.h>

#include <algorithm>
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
  }
  return "?";
}

bool parse_schedule(const std::string& s, ScheduleKind& out) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
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
  if (kind != Kind::comm) return detail::str_cat(kind == Kind::forward ? "F" : "B", mb, "@", stage);
  std::string s = "comm[";
  for (size_t i = 0; i < ops.size(); ++i) s += (i ? ", " : "") + op_str(ops[i]);
  return s + "]";
}

std::vector<std::vector<Action>> build_schedules(const ScheduleShape& shape) {
  const std::string bad = shape.invalid();
  if (!bad.empty()) config_fail(bad.substr(0, bad.find(' ')), bad.substr(bad.find(' ') + 1));
  const int P = shape.pp, S = shape.stages(), m = shape.microbatches;
  std::vector<std::vector<Action>> order{size_t(P)}, out{size_t(P)};
  for (int r = 0; r < P; ++r) order[size_t(r)] = compute_order(shape, r);
  std::vector<size_t> next(size_t(P), 0);
  // got[msg][stage][mb]: the message has been received by the rank that needs it.
  std::vector<std::vector<std::vector<char>>> got(2, std::vector<std::vector<char>>(size_t(S), std::vector<char>(size_t(m), 0)));
  size_t left = 0;
  for (const auto& o : order) left += o.size();
  // Lock-step rounds: in step t every rank runs its next compute when its input is in,
  // then round t exchanges exactly the messages step t produced, each rank's share as one
  // batch. All halves of a round's batches are posted in that round, so no batch waits
  // on a later one: deadlock-free for any compute order that is itself feasible.
  while (left > 0) {
    std::vector<CommOp> produced;  // sends of this step
    int ran = 0;
    for (int r = 0; r < P; ++r) {
      auto& o = order[size_t(r)];
      if (next[size_t(r)] == o.size()) continue;
      const Action& a = o[next[size_t(r)]];
      const bool fwd = a.kind == Action::Kind::forward;
      const int s = a.stage;
      const bool ready = fwd ? (s == 0 || got[0][size_t(s - 1)][size_t(a.mb)])
                             : (s == S - 1 || got[1][size_t(s + 1)][size_t(a.mb)]);
      if (!ready) continue;
      out[size_t(r)].push_back(a);
      ++next[size_t(r)];
      --left;
      ++ran;
      if (fwd && s < S - 1) produced.push_back({CommOp::Dir::send, CommOp::Msg::act, a.mb, s, shape.owner(s + 1)});
      if (!fwd && s > 0) produced.push_back({CommOp::Dir::send, CommOp::Msg::grad, a.mb, s, shape.owner(s - 1)});
    }
    std::vector<std::vector<CommOp>> batch{size_t(P)};
    for (const CommOp& o : produced) {
      const int from = shape.owner(o.stage);
      batch[size_t(from)].push_back(o);
      batch[size_t(o.peer)].push_back({CommOp::Dir::recv, o.msg, o.mb, o.stage, from});
      got[o.msg == CommOp::Msg::act ? 0 : 1][size_t(o.stage)][size_t(o.mb)] = 1;
    }
    // A step where no rank could compute and nothing was sent never ends.
    STRATA_CHECK(ran > 0, "[pipeline] the ", schedule_name(shape.kind), " compute order stalls (pp ", P, ", m ", m,
                 ", v ", shape.virtual_stages, ")");
    for (int r = 0; r < P; ++r)
      if (!batch[size_t(r)].empty())
        out[size_t(r)].push_back(Action{.kind = Action::Kind::comm, .mb = -1, .stage = -1, .ops = std::move(batch[size_t(r)])});
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

ScheduleSim simulate(const ScheduleShape& shape, const std::vector<std::vector<Action>>& lists) {
  ScheduleSim sim;
  const int P = shape.pp, S = shape.stages(), m = shape.microbatches;
  const auto fail = [&](int r, const Action& a, const std::string& why) {
    sim.error = "rank " + std::to_string(r) + " at " + a.str() + ": " + why;
    return sim;
  };
  if (int(lists.size()) != P) {
    sim.error = "expected " + std::to_string(P) + " lists, got " + std::to_string(lists.size());
    return sim;
  }
  // Where each message's send and receive sit: (msg, mb, stage) -> (rank, action index).
  using Key = std::tuple<int, int, int>;
  std::map<Key, std::pair<int, size_t>> sends, recvs;
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < lists[size_t(r)].size(); ++i)
      for (const CommOp& o : lists[size_t(r)][i].ops) {
        const Key k{int(o.msg), o.mb, o.stage};
        auto& where = o.dir == CommOp::Dir::send ? sends : recvs;
        if (!where.emplace(k, std::make_pair(r, i)).second) return fail(r, lists[size_t(r)][i], "message posted twice");
        const int from = shape.owner(o.stage);
        const int to = shape.owner(o.msg == CommOp::Msg::act ? o.stage + 1 : o.stage - 1);
        if (o.stage < 0 || o.stage >= S || (o.msg == CommOp::Msg::act ? o.stage + 1 >= S : o.stage == 0))
          return fail(r, lists[size_t(r)][i], "message to a stage that does not exist");
        if ((o.dir == CommOp::Dir::send ? from : to) != r || (o.dir == CommOp::Dir::send ? to : from) != o.peer)
          return fail(r, lists[size_t(r)][i], "wrong rank or peer for " + op_str(o));
      }
  // State per rank.
  std::vector<size_t> pc(size_t(P), 0);
  std::vector<int64_t> t(size_t(P), 0);
  std::vector<std::vector<int64_t>> post_at{size_t(P)};  // when each comm action was posted (-1: not yet)
  for (int r = 0; r < P; ++r) post_at[size_t(r)].assign(lists[size_t(r)].size(), -1);
  std::vector<std::vector<int>> fwd(size_t(S), std::vector<int>(size_t(m), 0)), bwd = fwd;
  std::vector<std::vector<int>> got_act = fwd, got_grad = fwd;
  std::vector<int> in_flight(size_t(P), 0);
  sim.busy.assign(size_t(P), 0);
  sim.peak_in_flight.assign(size_t(P), 0);
  sim.cells.assign(size_t(P), {});
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      const auto& L = lists[size_t(r)];
      while (pc[size_t(r)] < L.size()) {
        const Action& a = L[pc[size_t(r)]];
        const size_t R = size_t(r);
        if (a.kind != Action::Kind::comm) {
          if (a.mb < 0 || a.mb >= m || a.stage < 0 || a.stage >= S) return fail(r, a, "no such micro-batch or stage");
          if (shape.owner(a.stage) != r) return fail(r, a, "stage lives on rank " + std::to_string(shape.owner(a.stage)));
          const size_t s = size_t(a.stage), mb = size_t(a.mb);
          if (a.kind == Action::Kind::forward) {
            if (fwd[s][mb]++) return fail(r, a, "forward twice");
            if (a.stage > 0 && !got_act[s - 1][mb]) return fail(r, a, "input activation not received");
            sim.peak_in_flight[R] = std::max(sim.peak_in_flight[R], ++in_flight[R]);
          } else {
            if (!fwd[s][mb]) return fail(r, a, "backward before forward");
            if (bwd[s][mb]++) return fail(r, a, "backward twice");
            if (a.stage < S - 1 && !got_grad[s + 1][mb]) return fail(r, a, "output gradient not received");
            --in_flight[R];
          }
          std::string cell = (a.kind == Action::Kind::forward ? "F" : "B") + std::to_string(a.mb);
          if (shape.virtual_stages > 1) cell += "." + std::to_string(a.stage / P);
          sim.cells[R].resize(size_t(t[R]), "");
          sim.cells[R].push_back(cell);
          ++t[R];
          ++sim.busy[R];
        } else {
          int64_t& posted_at = post_at[R][pc[R]];
          if (posted_at < 0) {  // post the batch; its sends must have their data
            posted_at = t[R];
            for (const CommOp& o : a.ops)
              if (o.dir == CommOp::Dir::send) {
                const auto& done = o.msg == CommOp::Msg::act ? fwd : bwd;
                if (!done[size_t(o.stage)][size_t(o.mb)]) return fail(r, a, "sends data not computed yet");
              }
            progress = true;
          }
          int64_t ready = posted_at;
          bool all = true;
          for (const CommOp& o : a.ops) {
            const Key k{int(o.msg), o.mb, o.stage};
            const auto& other = o.dir == CommOp::Dir::send ? recvs : sends;
            const auto it = other.find(k);
            if (it == other.end()) return fail(r, a, "no rank posts the other half of " + op_str(o));
            const auto [pr, pi] = it->second;
            if (post_at[size_t(pr)][pi] < 0) {
              all = false;
              break;
            }
            ready = std::max(ready, post_at[size_t(pr)][pi]);  // both halves posted: it completes
          }
          if (!all) break;
          for (const CommOp& o : a.ops)
            if (o.dir == CommOp::Dir::recv)
              (o.msg == CommOp::Msg::act ? got_act : got_grad)[size_t(o.stage)][size_t(o.mb)] = 1;
          t[R] = std::max(t[R], ready);
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
      if (!fwd[size_t(s)][size_t(mb)] || !bwd[size_t(s)][size_t(mb)]) {
        sim.error = "micro-batch " + std::to_string(mb) + " never ran " + (fwd[size_t(s)][size_t(mb)] ? "backward" : "forward") +
                    " on stage " + std::to_string(s);
        return sim;
      }
  for (const auto& [k, where] : sends)
    if (!recvs.count(k)) {
      sim.error = "a message sent by rank " + std::to_string(where.first) + " is never received";
      return sim;
    }
  sim.makespan = *std::max_element(t.begin(), t.end());
  for (auto& row : sim.cells) row.resize(size_t(sim.makespan), "");
  return sim;
}

double bubble_formula(const ScheduleShape& s) {
  const double p = s.pp, vm = double(s.virtual_stages) * s.microbatches;
  return (p - 1) / (vm + p - 1);
}

std::string bubble_formula_str(const ScheduleShape& s) {
  const int p = s.pp, vm = s.virtual_stages * s.microbatches;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s = %d/%d = %.3f",
                s.virtual_stages > 1 ? "(p-1)/(v*m+p-1)" : "(p-1)/(m+p-1)", p - 1, vm + p - 1, bubble_formula(s));
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
