// Running a pipeline rank's action list (see pipeline_executor.h).
#include <strata/parallel/pipeline/executor.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <thread>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/grad_mode.h>
#include <strata/core/error.h>
#include <strata/core/memory.h>
#include <strata/core/threads.h>
#include <strata/core/trace.h>
#include <strata/nn/moe.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

PipelineExecutor::PipelineExecutor(std::shared_ptr<nn::Module> model, PipelinePlan plan, ScheduleShape shape,
                                   std::vector<PipelineStageSpec> stages, comm::ProcessGroup& pp)
    : model_(std::move(model)), plan_(std::move(plan)), shape_(shape), stages_(std::move(stages)), pp_(pp) {
  STRATA_CHECK(!plan_.empty(), "[pipeline] the model has no pipeline plan");
  STRATA_CHECK(pp_.size() == shape_.pp, "[pipeline] the pp group has ", pp_.size(), " ranks but the schedule ",
               shape_.pp);
  STRATA_CHECK(int(stages_.size()) == shape_.stages(), "[pipeline] ", stages_.size(), " stage specs for ",
               shape_.stages(), " stages");
  actions_ = build_schedule(shape_, pp_.rank());
  // One group per channel (kind x sending rank), so each has its own comm thread: a
  // receive posted ahead on one never holds up a send on another (ops of one group run
  // in issue order). Links the schedule never uses (the wrap-around from the last rank to
  // the first without virtual stages) get none. Collective over pp, same order on all.
  const int P = shape_.pp;
  for (int k = 0; k < 2; ++k) {
    channels_[k].assign(size_t(P), nullptr);
    for (int from = 0; from < P; ++from) {
      const bool act = k == 0;
      const int to = act ? (from + 1) % P : (from - 1 + P) % P;
      const bool used = shape_.virtual_stages > 1 || (act ? from < P - 1 : from > 0);
      if (!used) continue;
      channels_[k][size_t(from)] = pp_.new_group(
          {from, to}, pp_.name() + (act ? "/pp-act[" : "/pp-grad[") + std::to_string(from) + "->" + std::to_string(to) + "]");
    }
  }
  if (pp_.device().is_cpu()) {  // inline point-to-point exists on the host backends only
    std::vector<int> all(static_cast<size_t>(P), 0);
    for (int r = 0; r < P; ++r) all[size_t(r)] = r;
    loss_group_ = pp_.new_group(all, pp_.name() + "/pp-loss");
  }
  if (const char* e = std::getenv("STRATA_PP_TIMELINE"); e != nullptr && *e != 0)
    timeline_path_ = std::string(e) + "." + std::to_string(pp_.rank());
  set_inline_exchanges(
      default_inline_exchanges(pp_.host_ranks(), get_num_threads(), int(std::thread::hardware_concurrency())));
}

bool default_inline_exchanges(int host_ranks, int threads, int cores) {
  // Measured on 2 cores (docs/pipeline.md, "Inline or threaded exchanges"): with 2 ranks
  // of 1 thread, a receive whose sender posted late completed 0.27-0.35 ms after the post
  // with sleeping polls, ~5-20 us polling without sleep; comm threads must sleep between
  // polls (they share the cores with the compute) and add two thread hand-offs. With a
  // free core a comm thread progresses a transfer while the compute runs, which inline
  // exchanges cannot (they move only in waits). Other processes' load is not counted: on a
  // loaded host threads were faster (parallel.pp_exchanges: thread overrides).
  return int64_t(std::max(host_ranks, 1)) * std::max(threads, 1) >= int64_t(std::max(cores, 1));
}

void PipelineExecutor::set_inline_exchanges(bool on) {
  // On: posted by this thread and progressed in its waits, no hop to the channel's comm
  // thread. Off: each handed to the channel group's comm thread.
  inline_ = on;
  for (const auto& kind : channels_)
    for (const auto& g : kind)
      if (g) g->set_inline_p2p(on);
  if (loss_group_) loss_group_->set_inline_p2p(on);
}

std::vector<PipelineStageSpec> PipelineExecutor::my_stages() const {
  std::vector<PipelineStageSpec> out;
  for (const auto& s : stages_)
    if (shape_.owner(s.stage) == pp_.rank()) out.push_back(s);
  return out;
}

comm::ProcessGroup& PipelineExecutor::channel(const CommOp& o, int& peer) const {
  const Channel c = channel_of(shape_, o);
  const auto& g = channels_[o.msg == CommOp::Msg::act ? 0 : 1][size_t(c.from)];
  STRATA_CHECK(g != nullptr, "[pipeline] no channel for ", schedule_name(shape_.kind), " message from rank ", c.from);
  peer = o.dir == CommOp::Dir::send ? 1 : 0;  // the group is {sender, receiver}
  return *g;
}

void PipelineExecutor::fail(const CommOp& o, const std::string& why) const {
  // Name the stage this rank runs: a send's producer, a receive's consumer.
  const bool send = o.dir == CommOp::Dir::send, act = o.msg == CommOp::Msg::act;
  const int mine = send ? o.stage : (act ? o.stage + 1 : o.stage - 1);
  STRATA_THROW(CommError, "[pipeline] rank ", pp_.rank(), ": the exchange for stage ", mine, ", micro-batch ", o.mb,
               " with peer rank ", o.peer, " (", send ? "sending " : "receiving ", act ? "the activation" : "the gradient",
               ") failed: ", why);
}

void PipelineExecutor::post(const CommOp& o, const Shape& mb_shape) {
  auto p = std::make_unique<Pending>();
  p->op = o;
  Slot& sl = slots_[size_t(o.stage)][size_t(o.mb)];
  if (o.dir == CommOp::Dir::send) {
    // The Work keeps the sent storage alive until it completes: the slot may let go.
    p->buf = o.msg == CommOp::Msg::act ? sl.out.detach() : sl.in_grad;
    if (o.msg == CommOp::Msg::grad) sl.in_grad = Tensor();
  } else {
    // act(mb, s) is stage s's output; grad(mb, s) the gradient of stage s's input, shaped
    // as stage s-1's output. Known from the specs: nothing is exchanged about shapes.
    const ActivationSpec spec =
        plan_.activation(stages_[size_t(o.msg == CommOp::Msg::act ? o.stage : o.stage - 1)], mb_shape);
    MemoryScope scope(MemCategory::activations);
    p->buf = ops::empty(spec.shape, spec.dtype, pp_.device());
  }
  int peer = 0;
  comm::ProcessGroup& g = channel(o, peer);
  // The label Action{post, {o}}.str() gives, without its string streams (a post is on the
  // critical path: every microsecond here is one of the bubble's).
  const bool send = o.dir == CommOp::Dir::send;
  char label[96];
  std::snprintf(label, sizeof label, "pipeline post[%s %s(%d,%d)%s%d]", send ? "send" : "recv",
                o.msg == CommOp::Msg::act ? "act" : "grad", o.mb, o.stage, send ? "->" : "<-", o.peer);
  try {
    p->work = g.batch_isend_irecv(
        {{send ? comm::P2POp::Kind::send : comm::P2POp::Kind::recv, p->buf, peer,
          o.tag(shape_.stages(), comm::ProcessGroup::kMaxUserTag)}},
        label);
  } catch (const Error& e) {
    fail(o, e.what());
  }
  if (o.dir == CommOp::Dir::send) p->buf = Tensor();
  pending_.push_back(std::move(p));
}

void PipelineExecutor::wait(const CommOp& o) {
  const auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& p) { return p->op == o; });
  STRATA_CHECK(it != pending_.end(), "[pipeline] waiting for an exchange that was never posted");
  std::unique_ptr<Pending> p = std::move(*it);
  pending_.erase(it);
  try {
    p->work.wait();
  } catch (const Error& e) {
    fail(o, e.what());
  }
  if (o.dir == CommOp::Dir::send) return;
  // Received: act(mb, s) is stage s+1's input, grad(mb, s) stage s-1's output gradient.
  if (o.msg == CommOp::Msg::act)
    slots_[size_t(o.stage) + 1][size_t(o.mb)].in = p->buf;
  else
    slots_[size_t(o.stage) - 1][size_t(o.mb)].out_grad = p->buf;
}

double PipelineExecutor::run(const Tensor& input, const Tensor& target, const Shape& batch_shape) {
  const int m = shape_.microbatches;
  STRATA_CHECK(!batch_shape.empty() && batch_shape[0] % m == 0, "[pipeline] the batch of ", batch_shape.empty() ? 0 : batch_shape[0],
               " rows is not divisible into ", m, " micro-batches (parallel.microbatches)");
  const int64_t b = batch_shape[0] / m;
  // Each micro-batch's loss enters the backward divided by m: so do MoE auxiliary losses.
  const nn::AuxLossWeight aux_weight(1.0 / double(m));
  Shape mb_shape = batch_shape;
  mb_shape[0] = b;
  stats_ = {};
  slots_.assign(size_t(shape_.stages()), std::vector<Slot>(size_t(m)));
  double loss_sum = 0;
  int in_flight = 0;
  pending_.clear();
  for (const Action& a : actions_) {
    if (!a.is_compute()) {
      // A label on the timeline (Cat::other: the waits inside it are recorded as waits).
      trace::Scope ts(a.kind == Action::Kind::post ? "pp post" : "pp wait", trace::Cat::other,
                      {{"ops", int64_t(a.ops.size())}});
      const auto t0 = Clock::now();
      for (const CommOp& o : a.ops) {
        const int64_t n0 = timeline_path_.empty() ? 0 : now_ns();
        const double c0 = timeline_path_.empty() ? 0 : thread_cpu_s();
        if (a.kind == Action::Kind::post)
          post(o, mb_shape);
        else
          wait(o);
        if (!timeline_path_.empty())
          note(a.kind == Action::Kind::post ? 'P' : 'W', &o, o.mb, o.stage, n0, now_ns(), thread_cpu_s() - c0);
      }
      stats_.comm_s += since(t0);
      continue;
    }
    const PipelineStageSpec& st = stages_[size_t(a.stage)];
    Slot& sl = slots_[size_t(a.stage)][size_t(a.mb)];
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_s();
    trace::Scope ts(a.kind == Action::Kind::forward ? "F" : a.kind == Action::Kind::backward ? "B" : "W",
                    trace::Cat::pipeline,
                    {{"mb", int64_t(a.mb)}, {"stage", int64_t(a.stage)}});
    if (a.kind == Action::Kind::forward) {
      if (st.first()) {
        STRATA_CHECK(input.defined(), "[pipeline] the first stage's rank got no input batch");
        sl.in = ops::narrow(input, 0, a.mb * b, b);
      } else {
        STRATA_CHECK(sl.in.defined(), "[pipeline] stage ", a.stage, " has no input for micro-batch ", a.mb);
        sl.in.set_requires_grad(true);
      }
      MemoryScope scope(MemCategory::activations);
      sl.out = plan_.forward(*model_, st, sl.in);
      if (st.last()) {
        STRATA_CHECK(target.defined(), "[pipeline] the last stage's rank got no targets");
        sl.loss = plan_.loss(sl.out, ops::narrow(target, 0, a.mb * b, b));
        loss_sum += sl.loss.item<double>();
      }
      stats_.peak_in_flight = std::max(stats_.peak_in_flight, ++in_flight);
    } else if (a.kind == Action::Kind::backward) {
      {
        // zb-h1: B computes the input's gradient (and the parameters' other than the
        // linear layers' weights); the weights' gradients wait in the slot for W.
        std::optional<DeferWeightGrads> defer;
        if (splits_backward(shape_.kind)) defer.emplace(sl.weight_grads);
        if (st.last())
          backward(sl.loss * (1.0 / double(m)));
        else
          backward(sl.out, sl.out_grad);
      }
      if (!st.first()) sl.in_grad = sl.in.grad();
      sl.in = sl.out = sl.loss = sl.out_grad = Tensor();  // the micro-batch's activations go
      --in_flight;
    } else {
      run_deferred(sl.weight_grads);
    }
    stats_.compute_s += since(t0);
    stats_.compute_cpu_s += thread_cpu_s() - c0;
    if (!timeline_path_.empty())
      note(a.kind == Action::Kind::forward ? 'F' : a.kind == Action::Kind::backward ? 'B' : 'G', nullptr, a.mb, a.stage,
           std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count(), now_ns(),
           thread_cpu_s() - c0);
  }
  STRATA_CHECK(pending_.empty(), "[pipeline] ", pending_.size(), " exchange(s) posted but never waited for");
  slots_.clear();
  const int64_t l0 = timeline_path_.empty() ? 0 : now_ns();
  const double lc0 = timeline_path_.empty() ? 0 : thread_cpu_s();
  const double loss = share_loss(loss_sum / double(m));
  if (!timeline_path_.empty()) {
    note('L', nullptr, -1, -1, l0, now_ns(), thread_cpu_s() - lc0);
    write_timeline();
  }
  return loss;
}

void PipelineExecutor::note(char kind, const CommOp* o, int mb, int stage, int64_t t0, int64_t t1, double cpu_s) {
  timeline_.push_back({kind, o ? *o : CommOp{CommOp::Dir::send, CommOp::Msg::act, -1, -1, -1}, mb, stage, t0, t1,
                       int64_t(cpu_s * 1e9)});
}

void PipelineExecutor::write_timeline() {
  // One block per step: a header, then one line per event,
  //   <kind> <mb> <stage> <dir s|r|-> <msg a|g|-> <peer> <t0 ns> <t1 ns> <thread CPU ns>
  // (for P/W the message's micro-batch and producing stage, as CommOp).
  FILE* f = std::fopen(timeline_path_.c_str(), "a");
  if (f == nullptr) {
    timeline_.clear();
    return;  // a diagnostics file that cannot be written changes nothing else
  }
  std::fprintf(f, "step %lld rank %d pp %d schedule %s m %d v %d inline %d\n", (long long)timeline_step_++, pp_.rank(),
               shape_.pp, schedule_name(shape_.kind), shape_.microbatches, shape_.virtual_stages, int(inline_));
  for (const TimelineEvent& e : timeline_) {
    const bool comm = e.kind == 'P' || e.kind == 'W';
    std::fprintf(f, "%c %d %d %c %c %d %lld %lld %lld\n", e.kind, e.mb, e.stage,
                 comm ? (e.op.dir == CommOp::Dir::send ? 's' : 'r') : '-',
                 comm ? (e.op.msg == CommOp::Msg::act ? 'a' : 'g') : '-', comm ? e.op.peer : -1, (long long)e.t0,
                 (long long)e.t1, (long long)e.cpu);
  }
  std::fclose(f);
  timeline_.clear();
}

double PipelineExecutor::share_loss(double local_on_last) {
  // The loss lives on the last stage's rank: every pp rank gets it.
  const int last = shape_.owner(shape_.stages() - 1);
  const bool holds_loss = last == pp_.rank();
  Tensor l = ops::full({1}, holds_loss ? local_on_last : 0.0, DType::f64).to(pp_.device());
  if (!inline_ || !loss_group_) {
    pp_.all_reduce(l, comm::ReduceOp::sum).wait();
    return ops::to_cpu(l).item<double>();
  }
  // Inline exchanges: the last stage's rank sends its loss to every other rank, posted
  // and completed here. The comm thread's all-reduce added its wake-ups (and, on a host
  // whose cores the ranks fill, a preemption) after every step. The value is the same
  // bits as the sum of it and zeros.
  std::vector<comm::P2POp> ops;
  for (int r = 0; r < shape_.pp; ++r)
    if (holds_loss && r != last)
      ops.push_back({comm::P2POp::Kind::send, l, r, 0});
  if (!holds_loss) ops.push_back({comm::P2POp::Kind::recv, l, last, 0});
  loss_group_->batch_isend_irecv(std::move(ops), "pipeline loss").wait();
  return ops::to_cpu(l).item<double>();
}

double PipelineExecutor::eval_loss(const Tensor& input, const Tensor& target, const Shape& batch_shape) {
  NoGradGuard no_grad;
  const Tensor out = eval_forward(input, batch_shape);
  return share_loss(out.defined() ? plan_.loss(out, target).item<double>() : 0.0);
}

Tensor PipelineExecutor::eval_forward(const Tensor& input, const Shape& batch_shape) {
  NoGradGuard no_grad;
  const int S = shape_.stages();
  pending_.clear();
  slots_.assign(size_t(S), std::vector<Slot>(1));
  Tensor result;
  for (int s = 0; s < S; ++s) {  // stage order: a chain, each exchange one send or receive
    const int me = pp_.rank();
    if (s > 0 && shape_.owner(s) == me) {
      const CommOp in{CommOp::Dir::recv, CommOp::Msg::act, 0, s - 1, shape_.owner(s - 1)};
      post(in, batch_shape);
      wait(in);
    }
    if (shape_.owner(s) != me) continue;
    Slot& sl = slots_[size_t(s)][0];
    const PipelineStageSpec& st = stages_[size_t(s)];
    if (st.first()) sl.in = input;
    sl.out = plan_.forward(*model_, st, sl.in);
    if (st.last()) result = sl.out;
    if (s + 1 < S) {
      const CommOp out{CommOp::Dir::send, CommOp::Msg::act, 0, s, shape_.owner(s + 1)};
      post(out, batch_shape);
      wait(out);
    }
    sl = Slot{};
  }
  slots_.clear();
  return result;
}

}  // namespace strata::parallel
