// The mpi backend: RAII owners for MPI itself and for communicators, nonblocking
// point-to-point and collectives polled against a deadline, and same-host peer
// liveness checks so a killed rank is named instead of hanging (see comm/mpi.h).
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <cstring>
#include <fstream>
#include <mutex>
#include <span>
#include <sstream>
#include <thread>

#include <strata/comm/algorithms.h>
#include <strata/comm/launcher_signal.h>
#include <strata/comm/mpi.h>
#include <strata/comm/reduce_kernels.h>
#include <strata/core/error.h>

namespace strata::comm {
namespace {

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, size_t(len));
}

void mpi_check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) STRATA_THROW(CommError, "[mpi] ", call, " failed: ", mpi_error_string(rc));
}

// ------------------------------------------------------------------ peer identity / liveness

// Identity of a process, enough to tell from the same host whether it still exists.
struct PeerInfo {
  int64_t pid = 0;
  uint64_t host_key = 0;    // boot id + pid namespace: pids are comparable when equal
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22, guards against pid reuse
  char host[64] = {};
};

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Returns state char and start time from /proc/<pid>/stat, or state 0 if it is gone.
std::pair<char, uint64_t> proc_stat(int64_t pid) {
  const std::string s = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = s.rfind(')');
  if (s.empty() || close == std::string::npos) return {0, 0};
  std::istringstream is(s.substr(close + 2));
  char state = 0;
  is >> state;
  std::string field;
  for (int i = 4; i <= 21 && is >> field; ++i) {
  }
  uint64_t start = 0;
  is >> start;
  return {state, start};
}

PeerInfo self_info() {
  PeerInfo p;
  p.pid = int64_t(getpid());
  p.start_time = proc_stat(p.pid).second;
  char ns[256] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  const std::string key = read_file("/proc/sys/kernel/random/boot_id") + (n > 0 ? std::string(ns, size_t(n)) : "");
  p.host_key = key.empty() ? 0 : std::hash<std::string>{}(key);
  gethostname(p.host, sizeof p.host - 1);
  return p;
}

// ------------------------------------------------------------------ the MPI runtime

// Owns MPI_Init/MPI_Finalize for the process and the lock every MPI call holds.
class MpiRuntime {
 public:
  static std::shared_ptr<MpiRuntime> acquire(int* argc, char*** argv) {
    // MPI is process-global (MPI_Init once per process), so its owner is found here.
    static std::mutex m;
    static std::weak_ptr<MpiRuntime> current;
    std::lock_guard<std::mutex> lk(m);
    if (auto rt = current.lock()) return rt;
    auto rt = std::shared_ptr<MpiRuntime>(new MpiRuntime(argc, argv));
    current = rt;
    return rt;
  }

  ~MpiRuntime() {
    std::lock_guard<std::mutex> lk(mu);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || !owns_init_) return;
    if (failed.load()) {
      // Peers may be stuck in a collective with us: end this rank now, without
      // MPI_Finalize (it would wait for them), with the CLI's comm-failure status.
      // mpirun then tears the job down; a peer a launcher leaves running fails its own
      // next op within comm.timeout_s. Not MPI_Abort: under OpenMPI 4 it blocks until
      // mpirun, which first waits odls_base_sigkill_timeout, kills this rank by signal,
      // so its status was rarely the code passed (docs/reliability.md).
      std::fflush(nullptr);
      std::_Exit(kCommFailureExitCode);
    } else {
      MPI_Finalize();
    }
  }

  std::mutex mu;  // held around every MPI call (MPI_THREAD_SERIALIZED)
  int world_rank = 0, world_size = 1;
  std::vector<PeerInfo> peers;  // by world rank
  PeerInfo self;
  std::atomic<bool> failed{false};

  // Empty if alive (or not checkable from here), else why it is considered dead.
  std::string peer_status(int world) const {
    const PeerInfo& p = peers[size_t(world)];
    if (p.host_key == 0 || p.host_key != self.host_key) return "";
    auto [state, start] = proc_stat(p.pid);
    if (state == 0) return "exited";
    if (state == 'Z' || state == 'X') return "was killed or exited (zombie)";
    if (start != p.start_time) return "exited (pid reused)";
    return "";
  }

 private:
  MpiRuntime(int* argc, char*** argv) {
    std::lock_guard<std::mutex> lk(mu);
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) STRATA_THROW(CommError, "[mpi] MPI was already finalised in this process; it cannot restart");
    int provided = 0;
    if (!inited) {
      mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      owns_init_ = true;
    } else {
      mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread");
    }
    if (provided < MPI_THREAD_SERIALIZED)
      STRATA_THROW(CommError, "[mpi] MPI provides thread level ", provided,
                   "; strata's comm threads need MPI_THREAD_SERIALIZED (initialise MPI with it, or let "
                   "init_mpi_world do it)");
    if (owns_init_) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    detail::install_launcher_signal_handler();
    mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &world_size), "MPI_Comm_size");
    self = self_info();
    peers.resize(size_t(world_size));
    mpi_check(MPI_Allgather(&self, int(sizeof(PeerInfo)), MPI_BYTE, peers.data(), int(sizeof(PeerInfo)), MPI_BYTE,
                            MPI_COMM_WORLD),
              "MPI_Allgather(peer info)");
  }
  bool owns_init_ = false;
};

// ------------------------------------------------------------------ communicator and requests

// Owns one communicator (never MPI_COMM_WORLD itself).
class MpiComm {
 public:
  MpiComm(std::shared_ptr<MpiRuntime> rt, MPI_Comm c) : rt_(std::move(rt)), c_(c) {}
  ~MpiComm() {
    std::lock_guard<std::mutex> lk(rt_->mu);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && c_ != MPI_COMM_NULL && !rt_->failed.load()) MPI_Comm_free(&c_);
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MPI_Comm get() const { return c_; }

 private:
  std::shared_ptr<MpiRuntime> rt_;
  MPI_Comm c_;
};

MPI_Datatype mpi_type(DType dt) {
  switch (dt) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;  // moved as bits; reduced by the user ops below
  }
  return MPI_BYTE;
}

// 16-bit floats have no MPI type: they travel as MPI_UINT16_T and reduce with a user
// MPI_Op per (dtype, op) whose combining step widens to f32, combines and rounds
// (comm.reduce_dtype param; MPI chooses the combining order, every step rounds, as
// NCCL's ring does). inout[i] = in[i] (op) inout[i], as MPI defines user functions.
template <DType D, ReduceOp Op>
void half_user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::reduce3(inout, in, inout, *len, D, Op);
}

// Called with the runtime's lock held (after MPI_Init); the ops live until the process ends.
MPI_Op half_mpi_op(DType dt, ReduceOp op) {
  static MPI_Op ops[2][4] = {};
  static bool made = false;
  if (!made) {
    MPI_User_function* fns[2][4] = {
        {half_user_op<DType::bf16, ReduceOp::sum>, half_user_op<DType::bf16, ReduceOp::prod>,
         half_user_op<DType::bf16, ReduceOp::min>, half_user_op<DType::bf16, ReduceOp::max>},
        {half_user_op<DType::f16, ReduceOp::sum>, half_user_op<DType::f16, ReduceOp::prod>,
         half_user_op<DType::f16, ReduceOp::min>, half_user_op<DType::f16, ReduceOp::max>}};
    for (int d = 0; d < 2; ++d)
      for (int o = 0; o < 4; ++o) mpi_check(MPI_Op_create(fns[d][o], /*commute=*/1, &ops[d][o]), "MPI_Op_create");
    made = true;
  }
  const int d = dt == DType::bf16 ? 0 : 1;
  switch (op) {
    case ReduceOp::sum: return ops[d][0];
    case ReduceOp::prod: return ops[d][1];
    case ReduceOp::min: return ops[d][2];
    case ReduceOp::max: return ops[d][3];
    case ReduceOp::avg: break;
  }
  STRATA_THROW(Error, "[mpi] no MPI op for ", reduce_op_name(op));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::prod: return MPI_PROD;
    case ReduceOp::min: return MPI_MIN;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::avg: break;
  }
  STRATA_THROW(Error, "[mpi] no MPI op for ", reduce_op_name(op));
}

constexpr int64_t kMaxMessage = int64_t(1) << 30;  // bytes per MPI message / elements per collective piece

int to_int(int64_t n, const char* what) {
  if (n > INT_MAX)
    STRATA_THROW(Error, "[mpi] ", what, " has ", n, " elements per rank; the mpi backend handles at most ",
                 INT_MAX, " (split the tensor)");
  return int(n);
}

class MpiBackend;

class MpiRequest final : public Request {
 public:
  MpiRequest(MpiBackend* b, int peer, int64_t recv_bytes, int tag = -1)
      : b_(b), peer_(peer), recv_bytes_(recv_bytes), user_p2p_(peer >= 0 && tag >= 0 && tag < ProcessGroup::kMaxUserTag) {}
  std::vector<MPI_Request> reqs;
  std::vector<int64_t> piece_bytes;  // receive pieces, for the size check
  bool wait_until(Deadline deadline) override;
  int peer() const override { return peer_; }

 private:
  MpiBackend* b_;
  int peer_;
  int64_t recv_bytes_;  // -1 unless this is a receive
  bool user_p2p_;       // a caller's send/recv (user tag), not one inside a collective algorithm
};

class MpiBackend final : public Backend {
 public:
  MpiBackend(std::shared_ptr<MpiRuntime> rt, MPI_Comm comm) : rt_(rt), comm_(rt, comm) {
    std::lock_guard<std::mutex> lk(rt_->mu);
    mpi_check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
    MPI_Group g, wg;
    mpi_check(MPI_Comm_group(comm, &g), "MPI_Comm_group");
    mpi_check(MPI_Comm_group(MPI_COMM_WORLD, &wg), "MPI_Comm_group");
    std::vector<int> mine(size_t(size_), 0);
    for (int i = 0; i < size_; ++i) mine[size_t(i)] = i;
    world_ranks_.resize(size_t(size_));
    mpi_check(MPI_Group_translate_ranks(g, size_, mine.data(), wg, world_ranks_.data()), "MPI_Group_translate_ranks");
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
  }

  const char* kind() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MpiRuntime& runtime() const { return *rt_; }

  std::unique_ptr<Request> isend(const void* data, int64_t bytes, int dst, int tag) override {
    auto r = std::make_unique<MpiRequest>(this, dst, -1, tag);
    std::lock_guard<std::mutex> lk(rt_->mu);
    int64_t off = 0;
    do {  // one message per <= 1 GiB piece (zero-byte messages too); matched in order
      const int64_t len = std::min(kMaxMessage, bytes - off);
      MPI_Request q;
      mpi_check(MPI_Isend(static_cast<const char*>(data) + off, int(len), MPI_BYTE, dst, tag, comm_.get(), &q),
                "MPI_Isend");
      r->reqs.push_back(q);
      off += len;
    } while (off < bytes);
    return r;
  }

  std::unique_ptr<Request> irecv(void* data, int64_t bytes, int src, int tag) override {
    auto r = std::make_unique<MpiRequest>(this, src, bytes, tag);
    std::lock_guard<std::mutex> lk(rt_->mu);
    int64_t off = 0;
    do {
      const int64_t len = std::min(kMaxMessage, bytes - off);
      MPI_Request q;
      mpi_check(MPI_Irecv(static_cast<char*>(data) + off, int(len), MPI_BYTE, src, tag, comm_.get(), &q),
                "MPI_Irecv");
      r->reqs.push_back(q);
      r->piece_bytes.push_back(len);
      off += len;
    } while (off < bytes);
    return r;
  }

  bool supports(const Collective& c) const override {
    const bool reduction =
        c.kind == OpKind::all_reduce || c.kind == OpKind::reduce || c.kind == OpKind::reduce_scatter;
    if (!reduction) return true;
    return c.op != ReduceOp::avg;  // f16/bf16 by the user ops (half_mpi_op)
  }

  std::unique_ptr<Request> start(const Collective& c) override;
  std::unique_ptr<Backend> split(int color, int key, Deadline deadline) override;

  bool p2p_any_thread() const override { return true; }
  int host_ranks() const override {
    int n = 0;  // world ranks on this host (same boot id, pid namespace and host name)
    for (const PeerInfo& p : rt_->peers)
      n += p.host_key == rt_->self.host_key && std::strcmp(p.host, rt_->self.host) == 0;
    return std::max(n, 1);
  }
  void check_peers() override {
    if (aborted_.load()) STRATA_THROW(CommError, "group aborted: ", abort_reason());
    // Every dead peer, not the first: when one rank is killed another survivor may exit
    // before this check runs, and the rank killed first must still be named.
    std::string lost;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const std::string st = rt_->peer_status(world_ranks_[size_t(r)]);
      if (!st.empty()) lost += (lost.empty() ? "" : "; ") + describe_peer(r) + " " + st;
    }
    if (!lost.empty()) STRATA_THROW(CommError, "lost peer: ", lost);
  }

  std::string describe_peer(int r) const override {
    const int w = world_ranks_[size_t(r)];
    const PeerInfo& p = rt_->peers[size_t(w)];
    std::string s = "rank " + std::to_string(r);
    if (w != r) s += " (world rank " + std::to_string(w) + ")";
    return s + " (pid " + std::to_string(p.pid) + " on " + p.host + ")";
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lk(abort_mu_);
      if (abort_reason_.empty()) abort_reason_ = reason;
    }
    aborted_.store(true);
    rt_->failed.store(true);
  }
  bool aborted() const { return aborted_.load(); }
  std::string abort_reason() const {
    std::lock_guard<std::mutex> lk(abort_mu_);
    return abort_reason_;
  }

 private:
  std::shared_ptr<MpiRuntime> rt_;
  MpiComm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  std::string abort_reason_;
};

bool MpiRequest::wait_until(Deadline deadline) {
  MpiRuntime& rt = b_->runtime();
  const detail::WaitingScope waiting;  // the launcher's SIGTERM ends this wait (launcher_signal.h)
  const auto t0 = Clock::now();
  auto next_check = t0 + std::chrono::milliseconds(10);
  // One status per piece; a message under 1 GiB is one piece, kept off the heap (this runs
  // once per wait, on the pipeline's critical path).
  MPI_Status one[1];
  std::vector<MPI_Status> many(reqs.size() > 1 ? reqs.size() : 0);
  const std::span<MPI_Status> st = reqs.size() > 1 ? std::span<MPI_Status>(many) : std::span<MPI_Status>(one, reqs.size());
  for (int64_t spin = 0;; ++spin) {
    int flag = 0;
    {
      std::lock_guard<std::mutex> lk(rt.mu);
      const int rc = MPI_Testall(int(reqs.size()), reqs.data(), &flag, st.data());
      if (rc != MPI_SUCCESS) {
        std::string detail = mpi_error_string(rc);
        if (rc == MPI_ERR_IN_STATUS)
          for (auto& s : st)
            if (s.MPI_ERROR != MPI_SUCCESS) detail = mpi_error_string(s.MPI_ERROR);
        STRATA_THROW(CommError, "MPI reported an error", (peer_ >= 0 ? " talking to " + b_->describe_peer(peer_) : ""),
                     ": ", detail);
      }
      if (flag && recv_bytes_ >= 0) {
        for (size_t i = 0; i < st.size(); ++i) {
          int got = 0;
          MPI_Get_count(&st[i], MPI_BYTE, &got);
          if (got != piece_bytes[i])
            STRATA_THROW(CommError, "[recv] size mismatch: ", b_->describe_peer(peer_), " sent a message of ", got,
                         " bytes where ", piece_bytes[i], " were expected");
        }
      }
    }
    if (flag) return true;
    const auto now = Clock::now();
    if (b_->aborted()) STRATA_THROW(CommError, "group aborted: ", b_->abort_reason());
    if (now >= deadline || detail::take_termination_request()) return false;
    if (now >= next_check) {
      b_->check_peers();
      next_check = now + std::chrono::milliseconds(10);
    }
    // Progress happens inside MPI_Test, so poll hard at first; after a second of no
    // completion (a slow or dead peer) poll every millisecond.
    if (now - t0 > std::chrono::seconds(1))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    else if (spin > 64 && user_p2p_ && !busy_poll)
      // A caller's point-to-point message (a pipeline exchange) usually waits for the
      // peer's compute: past a short spin, poll every ~50 us instead of yield-spinning.
      // On 2 cores the spinning comm threads took the cores the compute threads needed:
      // `strata bench pp` steps were 2-6x longer under load (docs/pipeline.md). A message
      // the peer has posted completes within a few MPI_Tests, so this adds one sleep (a
      // 50 us sleep lasts ~125 us with the default timer slack) plus a wake-up per
      // message: 150-250 us measured from the send's post to the receive's completion,
      // against 5-20 us spinning. Waits with nothing else to run on their thread (inline
      // exchanges: Request::busy_poll) therefore keep yield-spinning. Native collectives
      // and the host algorithms' own messages (tags above the user range) keep spinning
      // too: their many short rounds and pipelined fragments progress only inside
      // MPI_Test (a ring all-reduce of 0.5-4 MiB ran 2-6x slower with this poll).
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else if (spin > 64)
      sched_yield();
  }
}

std::unique_ptr<Request> MpiBackend::start(const Collective& c) {
  auto r = std::make_unique<MpiRequest>(this, -1, -1);
  std::lock_guard<std::mutex> lk(rt_->mu);
  const MPI_Comm comm = comm_.get();
  auto add = [&](int rc, const char* call) {
    mpi_check(rc, call);
  };
  auto raw = [](const Tensor& t) -> char* { return t.defined() ? static_cast<char*>(t.raw_data()) : nullptr; };
  const Tensor& data = c.output.defined() ? c.output : c.input;
  const DType dt = data.defined() ? data.dtype() : DType::u8;
  const MPI_Datatype type = mpi_type(dt);
  const bool half = dt == DType::f16 || dt == DType::bf16;
  auto op_of = [&](ReduceOp op) { return half ? half_mpi_op(dt, op) : mpi_op(op); };
  const int64_t es = int64_t(element_size(dt));
  // Element-wise ops go in pieces of <= 2^30 elements (MPI counts are int).
  auto pieces = [&](int64_t count, auto&& fn) {
    int64_t off = 0;
    do {
      const int64_t len = std::min(kMaxMessage, count - off);
      MPI_Request q;
      fn(off, int(len), &q);
      r->reqs.push_back(q);
      off += len;
    } while (off < count);
  };
  switch (c.kind) {
    case OpKind::all_reduce: {
      char* b = raw(c.output);
      pieces(c.output.numel(), [&](int64_t off, int len, MPI_Request* q) {
        add(MPI_Iallreduce(MPI_IN_PLACE, b + off * es, len, type, op_of(c.op), comm, q), "MPI_Iallreduce");
      });
      break;
    }
    case OpKind::broadcast: {
      char* b = raw(c.output);
      pieces(c.output.numel(), [&](int64_t off, int len, MPI_Request* q) {
        add(MPI_Ibcast(b + off * es, len, type, c.root, comm, q), "MPI_Ibcast");
      });
      break;
    }
    case OpKind::reduce: {
      char* b = raw(c.output);
      pieces(c.output.numel(), [&](int64_t off, int len, MPI_Request* q) {
        if (rank_ == c.root)
          add(MPI_Ireduce(MPI_IN_PLACE, b + off * es, len, type, op_of(c.op), c.root, comm, q), "MPI_Ireduce");
        else
          add(MPI_Ireduce(b + off * es, nullptr, len, type, op_of(c.op), c.root, comm, q), "MPI_Ireduce");
      });
      break;
    }
    case OpKind::all_gather: {
      const int n = to_int(c.input.numel(), "all_gather");
      char* out = raw(c.output);
      const bool in_place = raw(c.input) == out + int64_t(rank_) * c.input.nbytes() && n > 0;
      MPI_Request q;
      add(MPI_Iallgather(in_place ? MPI_IN_PLACE : raw(c.input), n, type, out, n, type, comm, &q), "MPI_Iallgather");
      r->reqs.push_back(q);
      break;
    }
    case OpKind::reduce_scatter: {
      MPI_Request q;
      add(MPI_Ireduce_scatter_block(raw(c.input), raw(c.output), to_int(c.output.numel(), "reduce_scatter"), type,
                                    op_of(c.op), comm, &q),
          "MPI_Ireduce_scatter_block");
      r->reqs.push_back(q);
      break;
    }
    case OpKind::gather: {
      const int n = to_int(c.input.numel(), "gather");
      char* out = raw(c.output);
      const bool in_place = rank_ == c.root && n > 0 && raw(c.input) == out + int64_t(rank_) * c.input.nbytes();
      MPI_Request q;
      add(MPI_Igather(in_place ? MPI_IN_PLACE : raw(c.input), n, type, out, n, type, c.root, comm, &q),
          "MPI_Igather");
      r->reqs.push_back(q);
      break;
    }
    case OpKind::scatter: {
      const int n = to_int(c.output.numel(), "scatter");
      MPI_Request q;
      add(MPI_Iscatter(raw(c.input), n, type, raw(c.output), n, type, c.root, comm, &q), "MPI_Iscatter");
      r->reqs.push_back(q);
      break;
    }
    case OpKind::all_to_all: {
      const int n = to_int(c.input.numel() / size_, "all_to_all");
      MPI_Request q;
      add(MPI_Ialltoall(raw(c.input), n, type, raw(c.output), n, type, comm, &q), "MPI_Ialltoall");
      r->reqs.push_back(q);
      break;
    }
    case OpKind::barrier: {
      MPI_Request q;
      add(MPI_Ibarrier(comm, &q), "MPI_Ibarrier");
      r->reqs.push_back(q);
      break;
    }
    default: STRATA_THROW(Error, "[mpi] no native ", op_kind_name(c.kind));
  }
  return r;
}

std::unique_ptr<Backend> MpiBackend::split(int color, int key, Deadline deadline) {
  // Meet with a deadline first (nonblocking), so the blocking MPI_Comm_split below only
  // runs once every rank has arrived.
  int mine[2] = {color, key};
  std::vector<int> all(size_t(2 * size_));
  {
    MpiRequest req(this, -1, -1);
    {
      std::lock_guard<std::mutex> lk(rt_->mu);
      MPI_Request q;
      mpi_check(MPI_Iallgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, comm_.get(), &q), "MPI_Iallgather(split)");
      req.reqs.push_back(q);
    }
    if (!req.wait_until(deadline)) throw detail::TimedOut(-1);
  }
  MPI_Comm out = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> lk(rt_->mu);
    mpi_check(MPI_Comm_split(comm_.get(), color < 0 ? MPI_UNDEFINED : color, key, &out), "MPI_Comm_split");
  }
  if (out == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiBackend>(rt_, out);
}

}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

namespace {

// The first of `vars` that holds a rank (a non-negative integer), else 0.
int rank_from_env(std::initializer_list<const char*> vars) {
  for (const char* var : vars) {
    const char* v = std::getenv(var);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end == '\0' && x >= 0 && x < 1 << 20) return int(x);
  }
  return 0;
}

}  // namespace

int launcher_rank() { return rank_from_env({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}); }

int local_rank() {
  return rank_from_env(
      {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"});
}

std::shared_ptr<ProcessGroup> init_mpi_world(const CommOptions& options, int* argc, char*** argv) {
  options.validate();
  auto rt = MpiRuntime::acquire(argc, argv);
  MPI_Comm world = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> lk(rt->mu);
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  }
  return std::make_shared<ProcessGroup>(std::make_unique<MpiBackend>(rt, world), options, "world");
}

}  // namespace strata::comm
