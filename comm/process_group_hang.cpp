// Naming the hung rank: after a collective times out, the ranks that timed out too tell
// each other which op they are stuck in (a short exchange on a reserved tag, like NCCL's
// Flight Recorder dump); a rank that does not answer is the one that never joined.
#include <strata/comm/launcher_signal.h>
#include <strata/comm/process_group_detail.h>

#include <algorithm>
#include <cmath>

namespace strata::comm {
namespace {

using strata::detail::str_cat;

constexpr int kStatusTag = 31500;  // user tags are below 30000, algorithm messages use 31000
constexpr int kFields = 3;         // magic, op kind, seq
constexpr int64_t kMagic = 0x5354524154410001;  // marks a status message

// "rank 3" or "ranks 0,1,3".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

std::string ProcessGroup::hang_report(const OpInfo& info) {
  // A device backend (nccl) cannot send while its stream is stuck; a p2p op involves
  // only its peers (its own message names them). One report per group: it is failed after.
  if (!device_.is_cpu() || size_ < 2 || is_p2p(info.kind) || !hang_status_.empty()) return "";
  const int n = size_;
  hang_status_.assign(size_t(n) * kFields, 0);
  int64_t* mine = hang_status_.data() + size_t(rank_) * kFields;
  mine[0] = kMagic;
  mine[1] = int64_t(info.kind);
  mine[2] = info.seq;
  // After the launcher's SIGTERM its SIGKILL follows within odls_base_sigkill_timeout
  // (1 s by default): answer within half of it.
  const double grace_s = detail::seconds_since_termination() ? std::min(detail::hang_grace_s(opts_.timeout_s), 0.5)
                                                             : detail::hang_grace_s(opts_.timeout_s);
  const auto t0 = Clock::now();
  const Deadline end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
  std::vector<std::unique_ptr<Request>> recvs(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Request>> sends;
  std::vector<char> heard(size_t(n), 0);
  heard[size_t(rank_)] = 1;
  std::string cut;  // why the exchange ended before `end`, if it did
  try {
    for (int j = 0; j < n; ++j)
      if (j != rank_)
        recvs[size_t(j)] = backend_->irecv(&hang_status_[size_t(j) * kFields], kFields * 8, j, kStatusTag);
    for (int j = 0; j < n; ++j)
      if (j != rank_) sends.push_back(backend_->isend(mine, kFields * 8, j, kStatusTag));
    // Poll every pending answer in turn (not one to the end), so an abort by a rank that
    // finished first still leaves every answer that had arrived counted.
    for (bool waiting = true; waiting && Clock::now() < end;) {
      waiting = false;
      for (int j = 0; j < n; ++j) {
        if (heard[size_t(j)]) continue;
        heard[size_t(j)] = recvs[size_t(j)]->wait_until(std::min(end, Clock::now() + std::chrono::milliseconds(2)));
        waiting |= !heard[size_t(j)];
      }
    }
  } catch (const std::exception& e) {
    cut = e.what();
    if (cut.size() > 160) cut = cut.substr(0, 160) + "...";
  }
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  // The sends to ranks that never answered stay posted; the group is failed next.
  std::vector<int> reached, missing;
  std::string elsewhere;
  for (int j = 0; j < n; ++j) {
    const int64_t* f = &hang_status_[size_t(j) * kFields];
    if (!heard[size_t(j)]) {
      missing.push_back(j);
    } else if (f[0] != kMagic || f[1] < 0 || f[1] >= kNumOpKinds) {
      elsewhere += str_cat("; rank ", j, " answered with a malformed status");
    } else if (f[1] == int64_t(info.kind) && f[2] == info.seq) {
      reached.push_back(j);
    } else {
      elsewhere += str_cat("; rank ", j, " timed out in ", op_kind_name(OpKind(f[1])), " seq ", f[2]);
    }
  }
  const std::string op = str_cat(op_kind_name(info.kind), " seq ", info.seq, " in group '", name_, "'");
  std::string out = "; ";
  if (missing.empty() && elsewhere.empty()) {
    out += str_cat("every rank reached ", op, " (status exchange)");
  } else {
    for (size_t i = 0; i < missing.size(); ++i) {
      if (i) out += ", ";
      out += backend_->describe_peer(missing[i]);
    }
    // A rank that does not answer may also have joined and then stopped inside the op.
    if (!missing.empty())
      out += str_cat(" never joined ", op, " or stopped inside it (no answer to the timeout status exchange within ",
                     std::round(waited * 100) / 100, " s); ");
    else
      out += str_cat("at ", op, ": ");
    out += rank_list(reached) + " reached it";
  }
  out += elsewhere;
  if (!cut.empty()) out += " (the status exchange ended early: " + cut + ")";
  return out;
}

}  // namespace strata::comm
