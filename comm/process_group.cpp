// ProcessGroup: argument checks and staging on the caller's thread, then the comm
// thread runs each op: optional cross-rank debug check, native collective or an
// algorithm on send/recv, byte counting, and timeouts turned into named CommErrors.
#include <strata/comm/process_group.h>
#include <strata/comm/launcher_signal.h>
#include <strata/comm/process_group_detail.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <pthread.h>

#include <strata/comm/algorithms.h>
#include <strata/core/log.h>
#include <strata/comm/reduce_kernels.h>
#include <strata/core/error.h>
#include <strata/core/memory.h>
#include <strata/core/trace.h>
#include <strata/tensor/ops.h>

namespace strata::comm {

struct ProcessGroup::Task {
  OpInfo info;
  Body body;
  std::shared_ptr<detail::WorkState> state;
  trace::OpTag tag;  // the bucket or unit the caller named (trace::tag_next_op)
};

namespace {

using detail::comm_buffer;
using detail::copy_back;
using detail::is_half;
using detail::staged;

constexpr int kAlgoTag = 31000;  // tag of algorithm-internal messages (user tags are below 30000)

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Bytes this rank is charged for a backend-native collective: the nccl-tests bus model.
int64_t model_bytes(const Collective& c, int n, int r) {
  switch (c.kind) {
    case OpKind::all_reduce: return 2 * (n - 1) * c.output.nbytes() / n;
    case OpKind::all_gather: return (n - 1) * c.input.nbytes();
    case OpKind::reduce_scatter: return (n - 1) * c.output.nbytes();
    case OpKind::broadcast: return r == c.root ? c.output.nbytes() : 0;
    case OpKind::reduce: return r == c.root ? 0 : c.output.nbytes();
    case OpKind::gather: return r == c.root ? 0 : c.input.nbytes();
    case OpKind::scatter: return r == c.root ? (n - 1) * c.output.nbytes() : 0;
    case OpKind::all_to_all: return (n - 1) * c.input.nbytes() / n;
    default: return 0;
  }
}

void report(int rank, const std::string& msg) { spdlog::error("[comm] rank {}: {}", rank, msg); }

}  // namespace

ProcessGroup::ProcessGroup(std::unique_ptr<Backend> backend, CommOptions options, std::string name)
    : backend_(std::move(backend)),
      opts_(options),
      name_(std::move(name)),
      rank_(backend_->rank()),
      size_(backend_->size()),
      debug_(options.debug_enabled()),
      device_(backend_->device()),
      algorithm_(options.algorithm),
      reduce_dtype_(options.reduce_dtype) {
  opts_.validate();
}

ProcessGroup::~ProcessGroup() {
  std::vector<std::shared_ptr<InlineBatch>> in_flight;
  {
    std::lock_guard<std::mutex> lk(qmu_);
    in_flight.swap(inline_ops_);
  }
  // Inline ops still in flight complete (or fail at their deadline) as queued ops do.
  for (auto& b : in_flight) progress_inline(*b, Deadline::max());
  in_flight.clear();
  {
    std::lock_guard<std::mutex> lk(qmu_);
    stop_ = true;
  }
  qcv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// ------------------------------------------------------------------ queue

Work ProcessGroup::enqueue(OpInfo info, Body body) {
  auto task = std::make_unique<Task>();
  task->state = std::make_shared<detail::WorkState>();
  // A little longer than the op's own limit and the hang report after it, so the op's
  // more precise error wins.
  task->state->timeout_s = opts_.timeout_s * 1.1 + 2.0 + detail::hang_grace_s(opts_.timeout_s);
  task->body = std::move(body);
  if (trace::enabled()) task->tag = trace::take_op_tag();
  Work work(task->state);
  std::unique_lock<std::mutex> lk(qmu_);
  info.seq = is_p2p(info.kind) ? next_p2p_seq_++ : next_seq_++;
  info.reduce_dtype = reduce_dtype();
  task->info = info;
  task->state->what = describe(info);
  if (size_ == 1) {  // nothing to wait for: run inline, in order with everything before
    lk.unlock();
    run_task(*task);
    return work;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { comm_loop(); });
  queue_.push_back(std::move(task));
  lk.unlock();
  qcv_.notify_one();
  return work;
}

void ProcessGroup::comm_loop() {
  trace::set_thread_name("comm " + name_);
  for (;;) {
    std::unique_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lk(qmu_);
      qcv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    run_task(*task);
    std::lock_guard<std::mutex> lk(qmu_);
    running_ = false;
  }
}

void ProcessGroup::fail_group(const std::string& msg) {
  {
    std::lock_guard<std::mutex> lk(qmu_);
    if (failure_.empty()) failure_ = msg;
  }
  report(rank_, msg);
  backend_->abort(msg);
}

void ProcessGroup::count_op(const OpInfo& info, const SentBytes& bytes, double seconds) {
  std::lock_guard<std::mutex> lk(stats_mu_);
  OpStats& s = stats_[info.kind];
  ++s.calls;
  s.bytes_sent += bytes.counted + bytes.modelled;
  s.bytes_modelled += bytes.modelled;
  s.payload_bytes += info.bytes;
  s.seconds += seconds;
}

std::exception_ptr ProcessGroup::op_failure(OpInfo& info, std::exception_ptr err) {
  const char* op = op_kind_name(info.kind);
  try {
    std::rethrow_exception(err);
  } catch (const detail::TimedOut& e) {
    std::string msg;
    if (detail::seconds_since_termination() && Clock::now() < info.deadline) {
      // Ended early by the launcher stopping the job (a lost host, launcher_signal.h).
      const double waited = opts_.timeout_s - std::chrono::duration<double>(info.deadline - Clock::now()).count();
      msg = strata::detail::str_cat("[", op, "] stopped by the launcher (SIGTERM) after waiting ",
                                    std::round(waited * 10) / 10, " s of comm.timeout_s ", opts_.timeout_s,
                                    " s: ", describe(info));
    } else {
      msg = strata::detail::str_cat("[", op, "] timed out after ", opts_.timeout_s, " s (comm.timeout_s): ",
                                    describe(info));
    }
    if (!e.detail.empty())
      msg += "; " + e.detail;
    else if (e.peer >= 0)
      msg += "; waiting for " + backend_->describe_peer(e.peer);
    msg += hang_report(info);
    fail_group(msg);
    return std::make_exception_ptr(CommError(msg));
  } catch (const CommError& e) {
    const std::string msg = strata::detail::str_cat("[", op, "] ", describe(info), ": ", e.what());
    fail_group(msg);
    return std::make_exception_ptr(CommError(msg));
  } catch (const std::exception& e) {
    // Ranks may be mid-collective: the group cannot be trusted any more.
    fail_group(strata::detail::str_cat("[", op, "] ", describe(info), ": ", e.what()));
    return std::current_exception();
  } catch (...) {
    fail_group(strata::detail::str_cat("[", op, "] ", describe(info), ": unknown exception"));
    return std::current_exception();
  }
}

void ProcessGroup::run_task(Task& t) {
  OpInfo& info = t.info;
  const char* op = op_kind_name(info.kind);
  {
    std::lock_guard<std::mutex> lk(qmu_);
    if (!failure_.empty()) {
      t.state->finish(std::make_exception_ptr(CommError(strata::detail::str_cat(
          "[", op, "] ", describe(info), ": the group is unusable after an earlier failure: ", failure_))));
      return;
    }
  }
  const auto t0 = Clock::now();
  info.deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.timeout_s));
  try {
    if (debug_ && size_ > 1 && !is_p2p(info.kind) && info.kind != OpKind::split) debug_check(info);
  } catch (const detail::TimedOut&) {
    const std::string msg = strata::detail::str_cat("[", op, "] debug check timed out after ", opts_.timeout_s,
                                            " s: ", describe(info), " (some rank never issued this op)",
                                            hang_report(info));
    fail_group(msg);
    t.state->finish(std::make_exception_ptr(CommError(msg)));
    return;
  } catch (...) {  // a mismatch: every rank throws the same error, the group stays usable
    t.state->finish(std::current_exception());
    return;
  }
  SentBytes bytes;
  try {
    trace::Scope slice;  // tracing: the op on this (comm) thread's track
    if (trace::enabled())
      slice.begin(op, {{"group", name_}, {"bytes", info.bytes}, {"seq", info.seq}, {t.tag.key, t.tag.value}},
                  trace::Cat::comm);
    t.body(info, bytes);
    slice.end();
    count_op(info, bytes, seconds_since(t0));
    // Drop the op's tensors before waking the caller: once wait() returns, the comm
    // thread holds nothing of them (memory accounting and storage reuse see it at once).
    t.body = nullptr;
    t.state->finish(nullptr);
  } catch (...) {
    t.state->finish(op_failure(info, std::current_exception()));
  }
}

std::string ProcessGroup::describe(const OpInfo& i) const {
  std::string s = strata::detail::str_cat(op_kind_name(i.kind), is_p2p(i.kind) ? " p2p seq " : " seq ", i.seq,
                                          " in group '", name_, "' (", backend_->kind(), ", ", size_,
                                          " ranks) on rank ", rank_);
  if (!i.label.empty()) s += " [" + i.label + "]";
  if (i.kind == OpKind::batch_isend_irecv) return s + ": " + i.ops;
  if (i.kind == OpKind::barrier || i.kind == OpKind::split) return s;
  s += strata::detail::str_cat(": ", dtype_name(i.dtype), " x ", i.count, " (", format_bytes(i.bytes), ")");
  if (i.reduction) s += strata::detail::str_cat(", op ", reduce_op_name(i.op));
  if (i.root >= 0) s += strata::detail::str_cat(", root ", i.root);
  if (i.peer >= 0)
    s += strata::detail::str_cat(i.kind == OpKind::recv ? ", from rank " : ", peer rank ", i.peer, ", tag ", i.tag);
  else
    s += strata::detail::str_cat(", algorithm ", algorithm_name(i.algo));
  return s;
}

// ------------------------------------------------------------------ running collectives

void ProcessGroup::execute(const OpInfo& info, const Collective& c, SentBytes& bytes) {
  // The ring/tree algorithms run host code on the buffers: a device backend (nccl) always
  // takes its own implementation.
  const bool device_backend = !device_.is_cpu();
  const bool reduction =
      c.kind == OpKind::all_reduce || c.kind == OpKind::reduce || c.kind == OpKind::reduce_scatter;
  const Tensor& data = c.output.defined() ? c.output : c.input;
  if (reduction && is_half(data.dtype()) && info.reduce_dtype == ReduceDtype::f32) {
    // comm.reduce_dtype f32: widen into f32 buffers, reduce those on whatever backend and
    // algorithm runs f32 (f32 on the wire), round once into the 16-bit output.
    auto up = [&](const Tensor& t) {
      if (device_backend) {
        MemoryScope scope(MemCategory::comm);
        return ops::to_dtype(t, DType::f32);
      }
      Tensor f = comm_buffer(t.numel(), DType::f32);
      detail::convert(f.raw_data(), DType::f32, t.raw_data(), t.dtype(), t.numel());
      return f;
    };
    Collective c32 = c;
    if (c.kind == OpKind::reduce_scatter) {
      c32.input = up(c.input);
      c32.output = comm_buffer(c.output.numel(), DType::f32, device_);
    } else {
      c32.input = c32.output = up(c.output);
    }
    execute(info, c32, bytes);
    if (c.kind != OpKind::reduce || rank_ == c.root) {
      if (device_backend) {
        Tensor out = c.output;
        ops::copy_(out, c32.output);
      } else {
        detail::convert(c.output.raw_data(), c.output.dtype(), c32.output.raw_data(), DType::f32, c.output.numel());
      }
    }
    return;
  }
  STRATA_CHECK(!device_backend || backend_->supports(c), "[", op_kind_name(c.kind), "] the ", backend_->kind(),
               " backend has no implementation of this op and host algorithms cannot run on device memory");
  const bool want_native = device_backend || info.algo == Algorithm::native || info.algo == Algorithm::automatic;
  if (want_native && backend_->supports(c)) {
    auto req = backend_->start(c);
    if (!req->wait_until(info.deadline)) throw detail::TimedOut(req->peer());
    bytes.modelled += model_bytes(c, size_, rank_);
    return;
  }
  if (reduction && c.op == ReduceOp::avg) {
    // A 16-bit avg (comm.reduce_dtype param) rounds twice: the sum, then its scaling
    // (exact when N is a power of two, barring subnormals).
    Collective sum = c;
    sum.op = ReduceOp::sum;
    execute(info, sum, bytes);
    if (c.kind != OpKind::reduce || rank_ == c.root)
      detail::scale_inplace(c.output.raw_data(), c.output.numel(), c.output.dtype(), 1.0 / size_);
    return;
  }
  // 16-bit reductions here (comm.reduce_dtype param) reduce3 in their own dtype: each
  // hop widens to f32, adds and rounds (comm/reduce_kernels.h).
  execute_generic(info, c, bytes.counted);
}

void ProcessGroup::execute_generic(const OpInfo& info, const Collective& c, int64_t& bytes_counted) {
  detail::P2P p(*backend_, info.deadline, kAlgoTag, &bytes_counted);
  const int64_t chunk = opts_.chunk_bytes;
  auto raw = [](const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
  switch (c.kind) {
    case OpKind::all_reduce: {
      const int64_t count = c.output.numel(), nbytes = c.output.nbytes();
      const bool small = nbytes <= opts_.small_message_bytes;
      const DType dt = c.output.dtype();
      if (info.algo == Algorithm::ring)
        detail::ring_all_reduce(p, raw(c.output), count, dt, c.op, chunk);
      else if (info.algo == Algorithm::tree)
        detail::tree_all_reduce(p, raw(c.output), count, dt, c.op, chunk);
      else if (info.algo == Algorithm::recursive && !small)
        detail::halving_doubling_all_reduce(p, raw(c.output), count, dt, c.op);
      else if (small)
        detail::recursive_doubling_all_reduce(p, raw(c.output), count, dt, c.op);
      else
        detail::ring_all_reduce(p, raw(c.output), count, dt, c.op, chunk);
      break;
    }
    case OpKind::broadcast: detail::tree_broadcast(p, raw(c.output), c.output.nbytes(), c.root, chunk); break;
    case OpKind::reduce:
      detail::tree_reduce(p, raw(c.output), c.output.numel(), c.output.dtype(), c.op, c.root, chunk);
      break;
    case OpKind::all_gather: detail::ring_all_gather(p, raw(c.input), raw(c.output), c.input.nbytes()); break;
    case OpKind::reduce_scatter:
      detail::ring_reduce_scatter(p, raw(c.input), raw(c.output), c.output.numel(), c.output.dtype(), c.op, chunk);
      break;
    case OpKind::gather: detail::linear_gather(p, raw(c.input), raw(c.output), c.input.nbytes(), c.root); break;
    case OpKind::scatter: detail::linear_scatter(p, raw(c.input), raw(c.output), c.output.nbytes(), c.root); break;
    case OpKind::all_to_all:
      detail::pairwise_all_to_all(p, raw(c.input), raw(c.output), c.input.nbytes() / size_);
      break;
    case OpKind::barrier: detail::dissemination_barrier(p); break;
    default: STRATA_THROW(Error, "[comm] no algorithm for ", op_kind_name(c.kind));
  }
}

void ProcessGroup::debug_check(const OpInfo& info) {
  constexpr int kFields = 7;
  Tensor mine = comm_buffer(kFields, DType::i64);
  Tensor all = comm_buffer(int64_t(kFields) * size_, DType::i64);
  int64_t* m = mine.data<int64_t>();
  m[0] = int64_t(info.kind);
  m[1] = int64_t(info.dtype);
  m[2] = info.count;
  m[3] = info.root;
  m[4] = info.reduction ? int64_t(info.op) : -1;
  m[5] = info.seq;
  m[6] = int64_t(info.algo);
  Collective c{OpKind::all_gather, mine, all, ReduceOp::sum, 0};
  int64_t ignored = 0;
  if (backend_->supports(c)) {
    auto req = backend_->start(c);
    if (!req->wait_until(info.deadline)) throw detail::TimedOut(req->peer());
  } else {
    detail::P2P p(*backend_, info.deadline, kAlgoTag, &ignored);
    detail::ring_all_gather(p, mine.raw_data(), all.raw_data(), mine.nbytes());
  }
  const int64_t* a = all.data<int64_t>();
  bool same = true;
  for (int r = 1; r < size_; ++r) same &= std::equal(a, a + kFields, a + int64_t(r) * kFields);
  if (same) return;
  std::string msg = strata::detail::str_cat("[comm debug] ranks of group '", name_, "' (", backend_->kind(), ", ", size_,
                                    " ranks) issued different collectives:");
  for (int r = 0; r < size_; ++r) {
    const int64_t* f = a + int64_t(r) * kFields;
    msg += strata::detail::str_cat("\n  rank ", r, ": ", op_kind_name(OpKind(f[0])), " seq ", f[5], ", ",
                           dtype_name(DType(f[1])), " x ", f[2]);
    if (f[3] >= 0) msg += strata::detail::str_cat(", root ", f[3]);
    if (f[4] >= 0) msg += strata::detail::str_cat(", op ", reduce_op_name(ReduceOp(f[4])));
    msg += strata::detail::str_cat(", algorithm ", algorithm_name(Algorithm(f[6])));
  }
  msg += "\n  (seen on rank " + std::to_string(rank_) + "; the op was not run)";
  throw CommError(msg);
}

// ------------------------------------------------------------------ groups, stats, abort

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key, std::string name) {
  auto child = std::make_shared<std::unique_ptr<Backend>>();
  OpInfo info{.kind = OpKind::split};
  info.algo = algorithm();
  Work w = enqueue(info, [this, child, color, key](const OpInfo& i, SentBytes&) {
    *child = backend_->split(color, key, i.deadline);
  });
  w.wait();
  if (!*child) return nullptr;
  if (name.empty()) name = strata::detail::str_cat(name_, "/split", color);
  auto g = std::make_shared<ProcessGroup>(std::move(*child), opts_, std::move(name));
  g->set_algorithm(algorithm());
  g->set_reduce_dtype(reduce_dtype());
  return g;
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks, std::string name) {
  STRATA_CHECK(!ranks.empty(), "[new_group] empty rank list");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  STRATA_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "[new_group] duplicate ranks");
  STRATA_CHECK(sorted.front() >= 0 && sorted.back() < size_, "[new_group] ranks must be in [0, ", size_,
               "), got one of ", sorted.front(), "..", sorted.back());
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = it != ranks.end();
  if (name.empty()) {
    name = name_ + "/group[";
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (i) name += ',';
      name += std::to_string(ranks[i]);
    }
    name += "]";
  }
  return split(member ? 0 : -1, member ? int(it - ranks.begin()) : 0, std::move(name));
}

CommStats ProcessGroup::stats() const {
  std::lock_guard<std::mutex> lk(stats_mu_);
  return stats_;
}

double ProcessGroup::comm_thread_cpu_s() const {
  std::lock_guard<std::mutex> lk(qmu_);
  if (!thread_.joinable()) return 0.0;
  clockid_t cid;
  timespec ts{};
  if (pthread_getcpuclockid(const_cast<std::thread&>(thread_).native_handle(), &cid) != 0 ||
      clock_gettime(cid, &ts) != 0)
    return 0.0;
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void ProcessGroup::reset_stats() {
  std::lock_guard<std::mutex> lk(stats_mu_);
  stats_ = CommStats{};
}

void ProcessGroup::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lk(qmu_);
    if (failure_.empty()) failure_ = "aborted: " + reason;
  }
  backend_->abort(reason);
}

Tensor all_reduce_host(ProcessGroup& group, const Tensor& t, ReduceOp op) {
  Tensor d = group.device() == t.device() ? ops::clone(t) : t.to(group.device());
  group.all_reduce(d, op).wait();
  return ops::to_cpu(d);
}

Tensor all_gather_host(ProcessGroup& group, const Tensor& t) {
  const Tensor in = ops::reshape(ops::contiguous(t), {-1}).to(group.device());
  Tensor out = Tensor::empty({int64_t(group.size()) * t.numel()}, t.dtype(), group.device());
  group.all_gather(in, out).wait();
  return ops::to_cpu(out);
}

}  // namespace strata::comm
