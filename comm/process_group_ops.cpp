// ProcessGroup's public ops: argument checks and staging of non-contiguous tensors on the
// caller's thread, then one queued body per op for the comm thread (process_group.cpp).
#include <strata/comm/algorithms.h>
#include <strata/comm/process_group_detail.h>
#include <strata/core/trace.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace strata::comm {

using detail::comm_buffer;
using detail::copy_back;
using detail::overlaps;
using detail::staged;

// ------------------------------------------------------------------ argument checks

std::optional<std::string> device_mismatch(std::string_view op, std::string_view group, std::string_view backend,
                                           int rank, Device group_device, Device tensor) {
  if (tensor == group_device) return std::nullopt;
  std::string msg = strata::detail::str_cat("[", op, "] group '", group, "' (", backend, ", rank ", rank, ") runs on ",
                                            group_device.str(), " but the tensor is on ", tensor.str());
  if (group_device.is_cpu() && !tensor.is_cpu())
    msg += strata::detail::str_cat(": the ", backend, " backend moves CPU tensors only (device memory is not staged "
                                   "through the host); use the nccl backend for CUDA tensors (comm::init_nccl_world) "
                                   "or copy the tensor with .to(kCPU)");
  else if (tensor.is_cpu())
    msg += strata::detail::str_cat(": the ", backend, " backend moves tensors on this rank's GPU only; copy the tensor "
                                   "with .to(", group_device.str(), ") or use an mpi group for CPU tensors");
  else if (tensor.type == group_device.type)
    msg += strata::detail::str_cat(": each rank's ", backend, " communicator uses one GPU (init_nccl_world's device); "
                                   "create the tensor on group.device() or copy it with .to(", group_device.str(), ")");
  return msg;
}

void ProcessGroup::check_tensor(const char* op, const Tensor& t, bool written) const {
  STRATA_CHECK(t.defined(), "[", op, "] tensor is undefined (group '", name_, "', rank ", rank_, ")");
  if (auto why = device_mismatch(op, name_, backend_->kind(), rank_, device_, t.device()))
    STRATA_THROW(Error, *why, " (", t.str(), ")");
  if (written) {
    for (int64_t d = 0; d < t.dim(); ++d)
      STRATA_CHECK(t.stride(d) != 0 || t.size(d) <= 1, "[", op, "] cannot write into ", t.str(),
                   ": it is an expanded view (stride 0 in dim ", d, "); pass a real tensor");
  }
}

namespace {
void check_reduce(const char* op, DType dt, ReduceOp r) {
  STRATA_CHECK(r != ReduceOp::avg || is_floating(dt), "[", op, "] avg needs a floating dtype, got ", dtype_name(dt),
               " (use sum and divide)");
}
void check_root(const char* op, int root, int n) {
  STRATA_CHECK(root >= 0 && root < n, "[", op, "] root ", root, " out of range for a group of ", n, " ranks");
}
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  STRATA_CHECK(a.dtype() == b.dtype(), "[", op, "] input is ", dtype_name(a.dtype()), " but output is ",
               dtype_name(b.dtype()));
}
}  // namespace

// ------------------------------------------------------------------ public ops

Work ProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", t, true);
  check_root("broadcast", root, size_);
  Tensor buf = staged(t, /*copy=*/true);
  OpInfo info{.kind = OpKind::broadcast, .dtype = t.dtype(), .count = t.numel(), .bytes = t.nbytes(), .root = root};
  info.algo = algorithm();
  return enqueue(info, [this, t, buf, root](const OpInfo& i, SentBytes& bytes) {
    execute(i, Collective{OpKind::broadcast, buf, buf, ReduceOp::sum, root}, bytes);
    if (rank_ != root) copy_back(t, buf);
  });
}

Work ProcessGroup::reduce(const Tensor& t, int root, ReduceOp op) {
  check_tensor("reduce", t, true);
  check_root("reduce", root, size_);
  check_reduce("reduce", t.dtype(), op);
  Tensor buf = staged(t, true);
  OpInfo info{.kind = OpKind::reduce, .dtype = t.dtype(), .count = t.numel(), .bytes = t.nbytes(), .root = root,
              .op = op, .reduction = true};
  info.algo = algorithm();
  return enqueue(info, [this, t, buf, root, op](const OpInfo& i, SentBytes& bytes) {
    execute(i, Collective{OpKind::reduce, buf, buf, op, root}, bytes);
    if (rank_ == root) copy_back(t, buf);
  });
}

Work ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor("all_reduce", t, true);
  check_reduce("all_reduce", t.dtype(), op);
  Tensor buf = staged(t, true);
  OpInfo info{.kind = OpKind::all_reduce, .dtype = t.dtype(), .count = t.numel(), .bytes = t.nbytes(), .op = op,
              .reduction = true};
  info.algo = algorithm();
  return enqueue(info, [this, t, buf, op](const OpInfo& i, SentBytes& bytes) {
    execute(i, Collective{OpKind::all_reduce, buf, buf, op, 0}, bytes);
    copy_back(t, buf);
  });
}

Work ProcessGroup::all_gather(const Tensor& input, const Tensor& output) {
  check_tensor("all_gather", input, false);
  check_tensor("all_gather", output, true);
  check_same_dtype("all_gather", input, output);
  STRATA_CHECK(output.numel() == size_ * input.numel(), "[all_gather] output ", output.str(), " has ",
               output.numel(), " elements, expected ", size_, " ranks x ", input.numel(), " (input ", input.str(), ")");
  Tensor out = staged(output, false);
  Tensor in = staged(input, true);
  // The in-place form (input is exactly this rank's block of output) is allowed; any
  // other overlap reads from a copy of the input.
  const bool own_block = out.impl() == output.impl() && in.impl() == input.impl() && input.numel() > 0 &&
                         static_cast<const char*>(in.raw_data()) ==
                             static_cast<const char*>(out.raw_data()) + rank_ * in.nbytes();
  if (!own_block && overlaps(in, out)) in = ops::clone(in);
  OpInfo info{.kind = OpKind::all_gather, .dtype = input.dtype(), .count = input.numel(), .bytes = input.nbytes()};
  info.algo = algorithm();
  return enqueue(info, [this, output, out, in](const OpInfo& i, SentBytes& bytes) {
    execute(i, Collective{OpKind::all_gather, in, out, ReduceOp::sum, 0}, bytes);
    copy_back(output, out);
  });
}

Work ProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  check_tensor("reduce_scatter", input, false);
  check_tensor("reduce_scatter", output, true);
  check_same_dtype("reduce_scatter", input, output);
  check_reduce("reduce_scatter", input.dtype(), op);
  STRATA_CHECK(input.numel() == size_ * output.numel(), "[reduce_scatter] input ", input.str(), " has ",
               input.numel(), " elements, expected ", size_, " ranks x ", output.numel(), " (output ", output.str(),
               ")");
  Tensor in = staged(input, true);
  Tensor out = staged(output, false);
  if (overlaps(in, out)) out = comm_buffer(output.numel(), output.dtype(), output.device());
  OpInfo info{.kind = OpKind::reduce_scatter, .dtype = input.dtype(), .count = output.numel(),
              .bytes = input.nbytes(), .op = op, .reduction = true};
  info.algo = algorithm();
  return enqueue(info, [this, output, out, in, op](const OpInfo& i, SentBytes& bytes) {
    execute(i, Collective{OpKind::reduce_scatter, in, out, op, 0}, bytes);
    copy_back(output, out);
  });
}

Work ProcessGroup::gather(const Tensor& input, const Tensor& output, int root) {
  check_tensor("gather", input, false);
  check_root("gather", root, size_);
  Tensor out;
  Tensor in = staged(input, true);
  if (rank_ == root) {
    check_tensor("gather", output, true);
    check_same_dtype("gather", input, output);
    STRATA_CHECK(output.numel() == size_ * input.numel(), "[gather] output ", output.str(), " on root has ",
                 output.numel(), " elements, expected ", size_, " ranks x ", input.numel());
    out = staged(output, false);
    if (overlaps(in, out)) in = ops::clone(in);
  }
  OpInfo info{.kind = OpKind::gather, .dtype = input.dtype(), .count = input.numel(), .bytes = input.nbytes(),
              .root = root};
  info.algo = algorithm();
  return enqueue(info, [this, output, out, in, root](const OpInfo& i, SentBytes& bytes) {
    execute(i, Collective{OpKind::gather, in, out, ReduceOp::sum, root}, bytes);
    if (rank_ == root) copy_back(output, out);
  });
}

Work ProcessGroup::scatter(const Tensor& input, const Tensor& output, int root) {
  check_tensor("scatter", output, true);
  check_root("scatter", root, size_);
  Tensor in;
  Tensor out = staged(output, false);
  if (rank_ == root) {
    check_tensor("scatter", input, false);
    check_same_dtype("scatter", input, output);
    STRATA_CHECK(input.numel() == size_ * output.numel(), "[scatter] input ", input.str(), " on root has ",
                 input.numel(), " elements, expected ", size_, " ranks x ", output.numel());
    in = staged(input, true);
    if (overlaps(in, out)) in = ops::clone(in);
  }
  OpInfo info{.kind = OpKind::scatter, .dtype = output.dtype(), .count = output.numel(), .bytes = output.nbytes(),
              .root = root};
  info.algo = algorithm();
  return enqueue(info, [this, output, out, in, root](const OpInfo& i, SentBytes& bytes) {
    execute(i, Collective{OpKind::scatter, in, out, ReduceOp::sum, root}, bytes);
    copy_back(output, out);
  });
}

Work ProcessGroup::all_to_all(const Tensor& input, const Tensor& output) {
  check_tensor("all_to_all", input, false);
  check_tensor("all_to_all", output, true);
  check_same_dtype("all_to_all", input, output);
  STRATA_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0, "[all_to_all] input ", input.str(),
               " and output ", output.str(), " need the same number of elements, divisible by ", size_, " ranks");
  Tensor in = staged(input, true);
  Tensor out = staged(output, false);
  if (overlaps(in, out)) in = ops::clone(in);
  OpInfo info{.kind = OpKind::all_to_all, .dtype = input.dtype(), .count = input.numel(), .bytes = input.nbytes()};
  info.algo = algorithm();
  return enqueue(info, [this, output, out, in](const OpInfo& i, SentBytes& bytes) {
    execute(i, Collective{OpKind::all_to_all, in, out, ReduceOp::sum, 0}, bytes);
    copy_back(output, out);
  });
}

Work ProcessGroup::barrier() {
  OpInfo info{.kind = OpKind::barrier};
  info.algo = algorithm();
  return enqueue(info, [this](const OpInfo& i, SentBytes& bytes) { execute(i, Collective{}, bytes); });
}

namespace {
void check_peer(const char* op, int peer, int rank, int n, int tag) {
  STRATA_CHECK(peer >= 0 && peer < n && peer != rank, "[", op, "] peer rank ", peer,
               " is not another rank of this group (rank ", rank, " of ", n, ")");
  STRATA_CHECK(tag >= 0 && tag < ProcessGroup::kMaxUserTag, "[", op, "] tag ", tag, " out of range [0, ",
               ProcessGroup::kMaxUserTag, ")");
}
}  // namespace

Work ProcessGroup::send(const Tensor& t, int dst, int tag) {
  check_tensor("send", t, false);
  check_peer("send", dst, rank_, size_, tag);
  Tensor buf = staged(t, true);
  OpInfo info{.kind = OpKind::send, .dtype = t.dtype(), .count = t.numel(), .bytes = t.nbytes(), .peer = dst,
              .tag = tag};
  return enqueue(info, [this, buf, dst, tag](const OpInfo& i, SentBytes& bytes) {
    detail::P2P p(*backend_, i.deadline, tag, &bytes.counted);
    p.send(buf.raw_data(), buf.nbytes(), dst);
  });
}

Work ProcessGroup::recv(const Tensor& t, int src, int tag) {
  check_tensor("recv", t, true);
  check_peer("recv", src, rank_, size_, tag);
  Tensor buf = staged(t, false);
  OpInfo info{.kind = OpKind::recv, .dtype = t.dtype(), .count = t.numel(), .bytes = t.nbytes(), .peer = src,
              .tag = tag};
  return enqueue(info, [this, t, buf, src, tag](const OpInfo& i, SentBytes& bytes) {
    detail::P2P p(*backend_, i.deadline, tag, &bytes.counted);
    p.recv(buf.raw_data(), buf.nbytes(), src);
    copy_back(t, buf);
  });
}

Work ProcessGroup::send_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src, int tag) {
  check_tensor("send_recv", send_t, false);
  check_tensor("send_recv", recv_t, true);
  check_peer("send_recv", dst, rank_, size_, tag);
  check_peer("send_recv", src, rank_, size_, tag);
  Tensor sbuf = staged(send_t, true);
  Tensor rbuf = staged(recv_t, false);
  if (overlaps(sbuf, rbuf)) sbuf = ops::clone(sbuf);
  OpInfo info{.kind = OpKind::send_recv, .dtype = send_t.dtype(), .count = send_t.numel(), .bytes = send_t.nbytes(),
              .peer = dst, .tag = tag};
  return enqueue(info, [this, recv_t, sbuf, rbuf, dst, src, tag](const OpInfo& i, SentBytes& bytes) {
    detail::P2P p(*backend_, i.deadline, tag, &bytes.counted);
    p.sendrecv(sbuf.raw_data(), sbuf.nbytes(), dst, rbuf.raw_data(), rbuf.nbytes(), src);
    copy_back(recv_t, rbuf);
  });
}

// ------------------------------------------------------------------ batched point-to-point

namespace {
// One op of a batch as the comm thread runs it: `buf` is the contiguous stand-in of `user`.
struct BatchOp {
  bool send;
  Tensor user, buf;
  int peer, tag;
};

// "recv f32 x 100 from rank 0 tag 3". Built only for messages (errors, timeouts, the
// queued op's description): formatting every op's text, the batch's description and the
// caller's label on each inline post cost 3-7 us of CPU per pipeline exchange, on the
// critical path (docs/pipeline.md, "Where the step goes").
std::string op_text(const BatchOp& o) {
  return strata::detail::str_cat(o.send ? "send " : "recv ", dtype_name(o.user.dtype()), " x ", o.user.numel(),
                                 o.send ? " to rank " : " from rank ", o.peer, " tag ", o.tag);
}

// OpInfo::ops of a batch: "2 ops (1.0 KiB): send ...; recv ...".
std::string batch_text(const std::vector<BatchOp>& batch, int64_t payload) {
  std::string s = strata::detail::str_cat(batch.size(), batch.size() == 1 ? " op (" : " ops (", format_bytes(payload), "): ");
  for (size_t k = 0; k < batch.size(); ++k) {
    if (k == 16) {
      s += strata::detail::str_cat("; ... (", batch.size() - k, " more)");
      break;
    }
    s += (k ? "; " : "") + op_text(batch[k]);
  }
  return s;
}

// Posts every op of a batch on the transport (none waits on another).
std::vector<std::unique_ptr<Request>> post_batch(Backend& be, const std::vector<BatchOp>& batch, int64_t& counted) {
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.reserve(batch.size());
  for (const BatchOp& o : batch) {
    if (o.send) {
      counted += o.buf.nbytes();
      reqs.push_back(be.isend(o.buf.raw_data(), o.buf.nbytes(), o.peer, o.tag));
    } else {
      reqs.push_back(be.irecv(o.buf.raw_data(), o.buf.nbytes(), o.peer, o.tag));
    }
  }
  return reqs;
}

// The timeout of a batch whose op k did not complete by the deadline: names every op
// still pending (the later ones are polled once) and their peers.
detail::TimedOut batch_timed_out(Backend& be, const std::vector<BatchOp>& batch,
                                 std::vector<std::unique_ptr<Request>>& reqs, size_t k) {
  std::string pending, peers;
  std::vector<int> named;
  for (size_t j = k; j < reqs.size(); ++j) {
    if (j > k && reqs[j]->wait_until(Clock::now())) continue;
    pending += (pending.empty() ? "" : "; ") + op_text(batch[j]);
    if (std::find(named.begin(), named.end(), batch[j].peer) != named.end()) continue;
    named.push_back(batch[j].peer);
    peers += (peers.empty() ? "" : ", ") + be.describe_peer(batch[j].peer);
  }
  return detail::TimedOut(batch[k].peer, strata::detail::str_cat("still pending: ", pending, "; waiting for ", peers,
                                                                 " (never posted the matching half)"));
}
}  // namespace

// A batch posted by the caller (set_inline_p2p): progressed by whoever waits on its Work.
struct ProcessGroup::InlineBatch {
  std::mutex mu;  // held while posting or progressing
  std::atomic<bool> finished{false};
  bool failed = false;  // its buffers stay with the group (the transport may still touch them)
  OpInfo info;
  std::vector<BatchOp> batch;
  std::vector<std::unique_ptr<Request>> reqs;
  size_t next = 0;  // reqs[0, next) completed
  SentBytes bytes;
  Clock::time_point t0;
  std::shared_ptr<detail::WorkState> state;
};

std::string ProcessGroup::describe_inline(InlineBatch& b) const {
  if (b.info.ops.empty()) b.info.ops = batch_text(b.batch, b.info.bytes);
  return describe(b.info);
}

bool ProcessGroup::progress_inline(InlineBatch& b, Deadline until) {
  // Another thread may be on it: poll for the lock until `until`. Not a timed lock:
  // std::timed_mutex::try_lock_until on the steady clock is pthread_mutex_clocklock, which
  // ThreadSanitizer does not intercept (llvm/llvm-project#62623): it saw no acquisition,
  // reported the unlock as one of an unlocked mutex, and could check nothing this lock
  // orders. Contention is rare and short: a second waiter on the same Work, or
  // is_completed() polling beside a wait; the destructor waits with Deadline::max().
  std::unique_lock<std::mutex> lk(b.mu, std::try_to_lock);
  for (int spin = 0; !lk.owns_lock(); ++spin) {
    if (Clock::now() >= until) return b.finished.load();
    if (spin < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    lk.try_lock();
  }
  if (b.finished.load()) return true;
  std::exception_ptr err;
  try {
    for (; b.next < b.reqs.size(); ++b.next) {
      if (b.reqs[b.next]->wait_until(std::min(until, b.info.deadline))) continue;
      if (Clock::now() < b.info.deadline) return false;  // the caller's limit, not the op's
      throw batch_timed_out(*backend_, b.batch, b.reqs, b.next);
    }
    for (const BatchOp& o : b.batch)
      if (!o.send) copy_back(o.user, o.buf);
    count_op(b.info, b.bytes, std::chrono::duration<double>(Clock::now() - b.t0).count());
  } catch (...) {
    b.info.ops = batch_text(b.batch, b.info.bytes);
    err = op_failure(b.info, std::current_exception());
    b.failed = true;
  }
  if (!b.failed) {  // drop the tensors before waking the waiter, as the comm thread does
    b.reqs.clear();
    b.batch.clear();
  }
  b.finished.store(true);
  b.state->finish(err);
  return true;
}

void ProcessGroup::set_inline_p2p(bool on) {
  std::lock_guard<std::mutex> lk(qmu_);
  inline_p2p_ = on;
}

bool ProcessGroup::inline_p2p() const {
  std::lock_guard<std::mutex> lk(qmu_);
  return inline_p2p_;
}

Work ProcessGroup::batch_isend_irecv(std::vector<P2POp> ops, std::string label) {
  if (ops.empty()) return Work();
  std::vector<BatchOp> batch;
  batch.reserve(ops.size());
  int64_t payload = 0;
  for (size_t k = 0; k < ops.size(); ++k) {
    const P2POp& o = ops[k];
    const bool send = o.kind == P2POp::Kind::send;
    try {
      check_tensor("batch_isend_irecv", o.tensor, !send);
      check_peer("batch_isend_irecv", o.peer, rank_, size_, o.tag);
    } catch (const Error&) {  // the same checks again, naming the op (built only on failure)
      const std::string where = strata::detail::str_cat("batch_isend_irecv op ", k, " (", send ? "send" : "recv",
                                                        label.empty() ? "" : ", " + label, ")");
      check_tensor(where.c_str(), o.tensor, !send);
      check_peer(where.c_str(), o.peer, rank_, size_, o.tag);
      throw;
    }
    payload += o.tensor.nbytes();
    batch.push_back(BatchOp{send, o.tensor, staged(o.tensor, send), o.peer, o.tag});
  }
  // A send must not read what a receive of the same batch writes: it sends a copy.
  auto written = [&](const Tensor& t) {
    return std::any_of(batch.begin(), batch.end(), [&](const BatchOp& r) { return !r.send && overlaps(t, r.buf); });
  };
  for (BatchOp& s : batch)
    if (s.send && written(s.buf)) s.buf = ops::clone(s.buf);
  OpInfo info{.kind = OpKind::batch_isend_irecv, .dtype = ops[0].tensor.dtype(), .count = int64_t(ops.size()),
              .bytes = payload, .peer = ops[0].peer, .tag = ops[0].tag};
  info.label = std::move(label);
  {
    std::unique_lock<std::mutex> lk(qmu_);
    if (inline_p2p_ && queue_.empty() && !running_ && backend_->p2p_any_thread()) {
      // Posted here, progressed by the waiter: no comm-thread hop (set_inline_p2p).
      auto b = std::make_shared<InlineBatch>();
      info.seq = next_p2p_seq_++;
      std::erase_if(inline_ops_, [](const auto& o) { return o->finished.load() && !o->failed; });
      inline_ops_.push_back(b);
      const std::string failure = failure_;
      lk.unlock();
      // Taken after qmu_ is released: progress_inline takes qmu_ under b->mu (fail_group),
      // so the other order could deadlock in principle (TSan: lock-order inversion), and
      // no other thread can reach b before this returns its Work (the destructor, which
      // also progresses inline_ops_, must not race with an op being issued).
      std::lock_guard<std::mutex> blk(b->mu);
      b->info = std::move(info);
      b->batch = std::move(batch);
      b->state = std::make_shared<detail::WorkState>();
      b->state->timeout_s = opts_.timeout_s * 1.1 + 2.0;
      // The full description (every op) is built when something goes wrong (describe_inline);
      // `what` (the trace's label, Work::wait's own backstop timeout) names the op and group.
      if (trace::enabled())
        b->state->what = describe_inline(*b);
      else
        b->state->what = "batch_isend_irecv p2p seq " + std::to_string(b->info.seq) + " in group '" + name_ + "'" +
                         (b->info.label.empty() ? "" : " [" + b->info.label + "]");
      b->state->progress = [this, w = std::weak_ptr<InlineBatch>(b)](Deadline until) {
        const auto p = w.lock();  // gone: completed and let go by the group
        return !p || progress_inline(*p, until);
      };
      b->t0 = Clock::now();
      b->info.deadline =
          b->t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.timeout_s));
      std::exception_ptr err;
      if (!failure.empty()) {
        err = std::make_exception_ptr(CommError(strata::detail::str_cat(
            "[batch_isend_irecv] ", describe_inline(*b), ": the group is unusable after an earlier failure: ", failure)));
      } else {
        try {
          b->reqs = post_batch(*backend_, b->batch, b->bytes.counted);
          // Waited on by a caller with nothing else to run (not a comm thread beside the
          // compute): poll without sleeping (Request::busy_poll).
          for (auto& r : b->reqs) r->busy_poll = true;
        } catch (...) {
          b->info.ops = batch_text(b->batch, b->info.bytes);
          err = op_failure(b->info, std::current_exception());
          b->failed = true;
        }
      }
      if (err) {
        b->finished.store(true);
        b->state->finish(err);
      }
      return Work(b->state);
    }
  }
  info.ops = batch_text(batch, payload);
  return enqueue(std::move(info), [this, batch = std::move(batch)](const OpInfo& i, SentBytes& bytes) {
    std::vector<std::unique_ptr<Request>> reqs = post_batch(*backend_, batch, bytes.counted);
    for (size_t k = 0; k < reqs.size(); ++k) {
      if (reqs[k]->wait_until(i.deadline)) continue;
      detail::TimedOut e = batch_timed_out(*backend_, batch, reqs, k);
      for (size_t j = k; j < reqs.size(); ++j) orphaned_.push_back(batch[j].buf);
      throw e;
    }
    for (const BatchOp& o : batch)
      if (!o.send) copy_back(o.user, o.buf);
  });
}

}  // namespace strata::comm
