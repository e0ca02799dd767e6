// The nccl backend (see comm/nccl.h): NcclBackend and its requests, collectives and
// grouped send/recv launched on the communicator's stream after the compute stream, the
// split into sub-groups, and world creation. The communicator is comm/nccl_comm.h, one
// launch comm/nccl_launch.h; a build without CUDA/NCCL compiles comm/nccl_unavailable.cpp.
#if defined(STRATA_WITH_NCCL)
#include <cstring>
#include <utility>
#include <vector>

#include <strata/comm/algorithms.h>
#include <strata/comm/mpi.h>
#include <strata/comm/nccl.h>
#include <strata/comm/nccl_launch.h>
#include <strata/tensor/ops.h>

namespace strata::comm {
namespace {

using strata::detail::str_cat;
using namespace detail;

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  STRATA_THROW(Error, "[nccl] no NCCL type for dtype ", dtype_name(d));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::prod: return ncclProd;
  }
  STRATA_THROW(Error, "[nccl] no NCCL op for ", reduce_op_name(op));
}

// ------------------------------------------------------------------ backend and requests

// Sends and receives posted since the last launch. NCCL needs a send and the receive it
// depends on in one group (two ranks exchanging would deadlock otherwise), so they are
// launched together when the first of them is waited on, or before the next collective.
struct PendingP2P {
  bool send;
  void* ptr;
  int64_t bytes;
  int peer;
};
struct P2PBatch {
  std::vector<PendingP2P> ops;
  std::shared_ptr<Launch> launch;  // set once launched
};

class NcclBackend;

class NcclRequest final : public Request {
 public:
  NcclRequest(std::shared_ptr<Launch> l, int peer) : launch_(std::move(l)), peer_(peer) {}
  NcclRequest(NcclBackend* b, std::shared_ptr<P2PBatch> batch, int peer)
      : backend_(b), batch_(std::move(batch)), peer_(peer) {}
  bool wait_until(Deadline deadline) override;
  int peer() const override { return peer_; }

 private:
  NcclBackend* backend_ = nullptr;
  std::shared_ptr<P2PBatch> batch_;
  std::shared_ptr<Launch> launch_;
  int peer_;
};

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(std::shared_ptr<CommState> st) : st_(std::move(st)) {}

  const char* kind() const override { return "nccl"; }
  int rank() const override { return st_->rank(); }
  int size() const override { return st_->size(); }
  Device device() const override { return Device{DeviceType::CUDA, st_->device()}; }

  // NCCL has no tags: messages between two ranks match in the order they were posted.
  std::unique_ptr<Request> isend(const void* data, int64_t bytes, int dst, int /*tag*/) override {
    return post(true, const_cast<void*>(data), bytes, dst);
  }
  std::unique_ptr<Request> irecv(void* data, int64_t bytes, int src, int /*tag*/) override {
    return post(false, data, bytes, src);
  }

  // Every collective, dtype and op is native (gather/scatter/all_to_all as grouped p2p).
  bool supports(const Collective&) const override { return true; }
  std::unique_ptr<Request> start(const Collective& c) override {
    return nccl_comm_errors([&] { return launch(c); });
  }
  std::unique_ptr<Backend> split(int color, int key, Deadline deadline) override {
    return nccl_comm_errors([&] { return split_comm(color, key, deadline); });
  }

  void check_peers() override { (void)st_->async_state("check_peers"); }
  void abort(const std::string& reason) override { st_->abort(reason); }

  /// Launches the pending sends/receives as one NCCL group (no-op when none).
  void flush_p2p();
  /// flush_p2p(), then waits until the communicator accepts the next call (a
  /// non-blocking communicator must leave ncclInProgress first). ProcessGroup waits
  /// every send/recv before its next op, so this is a safeguard.
  void settle(const char* op) {
    if (!pending_) return;
    flush_p2p();
    if (!st_->wait_ready(op, deadline_in(st_->timeout_s()))) throw detail::TimedOut(-1);
  }

 private:
  std::unique_ptr<Request> post(bool send, void* p, int64_t bytes, int peer) {
    STRATA_CHECK(peer >= 0 && peer < size() && peer != rank(), "[nccl] ", send ? "send" : "recv", ": peer rank ",
                 peer, " is not another rank of this group (rank ", rank(), " of ", size(), ")");
    if (!pending_) pending_ = std::make_shared<P2PBatch>();
    pending_->ops.push_back({send, p, bytes, peer});
    return std::make_unique<NcclRequest>(this, pending_, peer);
  }

  std::unique_ptr<Request> launch(const Collective& c);
  std::unique_ptr<Backend> split_comm(int color, int key, Deadline deadline);

  std::shared_ptr<CommState> st_;
  std::shared_ptr<P2PBatch> pending_;
};

bool NcclRequest::wait_until(Deadline deadline) {
  return nccl_comm_errors([&] {
    if (!launch_ && batch_) {
      if (!batch_->launch) backend_->flush_p2p();
      if (!batch_->launch)
        STRATA_THROW(CommError, "[nccl] send/recv: the group of sends/receives failed to launch");
      launch_ = batch_->launch;
    }
    return launch_->wait_until(deadline);
  });
}

void NcclBackend::flush_p2p() {
  if (!pending_) return;
  std::shared_ptr<P2PBatch> batch = std::move(pending_);
  pending_.reset();
  const char* op = "send/recv";
  cuda::DeviceGuard g(st_->device());
  auto l = std::make_shared<Launch>(st_, op);
  st_->order_after_compute();
  std::vector<void*> ptrs;
  for (const auto& o : batch->ops) ptrs.push_back(l->device_ptr(o.ptr, o.bytes, o.send, !o.send));
  const cudaStream_t s = st_->stream();
  st_->with_comm(op, [&](ncclComm_t comm) {
    GroupScope group(op, comm);
    for (size_t i = 0; i < batch->ops.size(); ++i) {
      const PendingP2P& o = batch->ops[i];
      if (o.send)
        STRATA_NCCL_CHECK(op, comm, ncclSend(ptrs[i], size_t(o.bytes), ncclUint8, o.peer, comm, s));
      else
        STRATA_NCCL_CHECK(op, comm, ncclRecv(ptrs[i], size_t(o.bytes), ncclUint8, o.peer, comm, s));
    }
    group.end();
  });
  batch->launch = std::move(l);
}

std::unique_ptr<Request> NcclBackend::launch(const Collective& c) {
  const char* op = op_kind_name(c.kind);
  settle(op);
  cuda::DeviceGuard g(st_->device());
  auto l = std::make_shared<Launch>(st_, op);
  st_->order_after_compute();

  const int n = size(), r = rank();
  const bool root = r == c.root;
  const Tensor& data = c.output.defined() ? c.output : c.input;
  const DType dt = data.defined() ? data.dtype() : DType::f32;
  const ncclDataType_t type = nccl_dtype(dt);
  const int64_t es = int64_t(element_size(dt));
  void* in = nullptr;
  void* out = nullptr;
  int64_t count = 0;  // elements per rank (per block for the block-wise ops)
  switch (c.kind) {
    case OpKind::broadcast:
    case OpKind::all_reduce:
      out = in = l->device_ptr(c.output, true, true);
      count = c.output.numel();
      break;
    case OpKind::reduce:
      out = in = l->device_ptr(c.output, true, root);
      count = c.output.numel();
      break;
    case OpKind::all_gather:  // input first: it may be exactly output's own block
    case OpKind::gather:
      in = l->device_ptr(c.input, true, false);
      if (c.kind == OpKind::all_gather || root) out = l->device_ptr(c.output, false, true);
      count = c.input.numel();
      break;
    case OpKind::reduce_scatter:
    case OpKind::scatter:
      if (c.kind == OpKind::reduce_scatter || root) in = l->device_ptr(c.input, true, false);
      out = l->device_ptr(c.output, false, true);
      count = c.output.numel();
      break;
    case OpKind::all_to_all:
      in = l->device_ptr(c.input, true, false);
      out = l->device_ptr(c.output, false, true);
      count = c.input.numel() / n;
      break;
    case OpKind::barrier:
      out = in = st_->one();
      count = 1;
      break;
    default: STRATA_THROW(Error, "[nccl] no native ", op, " in the nccl backend");
  }
  if (!in) in = st_->one();  // empty tensors: NCCL wants valid addresses even for 0 elements
  if (!out) out = st_->one();
  const size_t block = size_t(count * es);
  auto at = [block](void* base, int j) { return static_cast<char*>(base) + size_t(j) * block; };
  const cudaStream_t s = st_->stream();

  // This rank's own block of the p2p-based collectives is a device copy, queued first.
  auto local_copy = [&](void* dst, const void* src) {
    if (block > 0 && dst != src)
      STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, block, cudaMemcpyDeviceToDevice, s), op);
  };
  if (c.kind == OpKind::gather && root) local_copy(at(out, r), in);
  if (c.kind == OpKind::scatter && root) local_copy(out, at(in, r));
  if (c.kind == OpKind::all_to_all) local_copy(at(out, r), at(in, r));
  // A group of one: every collective is the identity (the sum, min, max, product or
  // average of one value is that value), so only all_gather and reduce_scatter have a
  // copy left to make, and NCCL is not called. This also sidesteps NCCL's one-rank path
  // for ncclAvg (2.28.9, H100, 2026-11-27): a 262147-element ReduceScatter left elements
  // 262144.. (32 x 8192: its PreMulSum kernel's last block stops at a rounded-down
  // boundary, as far as the symptom shows) unwritten, in f32, f64, f16 and bf16, where
  // ncclSum (a plain copy there) was right. tests/comm/mpi/nccl_collectives_test.cpp.
  if (n == 1 && c.kind != OpKind::barrier) {
    if (c.kind == OpKind::all_gather || c.kind == OpKind::reduce_scatter) local_copy(out, in);
    return std::make_unique<NcclRequest>(std::move(l), -1);
  }

  const size_t cnt = size_t(count);
  st_->with_comm(op, [&](ncclComm_t comm) {
    GroupScope group(op, comm);
    switch (c.kind) {
      case OpKind::all_reduce:
        STRATA_NCCL_CHECK(op, comm, ncclAllReduce(in, out, cnt, type, nccl_op(c.op), comm, s));
        break;
      case OpKind::broadcast: STRATA_NCCL_CHECK(op, comm, ncclBroadcast(in, out, cnt, type, c.root, comm, s)); break;
      case OpKind::reduce:
        STRATA_NCCL_CHECK(op, comm, ncclReduce(in, out, cnt, type, nccl_op(c.op), c.root, comm, s));
        break;
      case OpKind::all_gather: STRATA_NCCL_CHECK(op, comm, ncclAllGather(in, out, cnt, type, comm, s)); break;
      case OpKind::reduce_scatter:
        STRATA_NCCL_CHECK(op, comm, ncclReduceScatter(in, out, cnt, type, nccl_op(c.op), comm, s));
        break;
      case OpKind::gather:
        if (root) {
          for (int j = 0; j < n; ++j)
            if (j != r) STRATA_NCCL_CHECK(op, comm, ncclRecv(at(out, j), cnt, type, j, comm, s));
        } else {
          STRATA_NCCL_CHECK(op, comm, ncclSend(in, cnt, type, c.root, comm, s));
        }
        break;
      case OpKind::scatter:
        if (root) {
          for (int j = 0; j < n; ++j)
            if (j != r) STRATA_NCCL_CHECK(op, comm, ncclSend(at(in, j), cnt, type, j, comm, s));
        } else {
          STRATA_NCCL_CHECK(op, comm, ncclRecv(out, cnt, type, c.root, comm, s));
        }
        break;
      case OpKind::all_to_all:
        for (int j = 0; j < n; ++j) {
          if (j == r) continue;
          STRATA_NCCL_CHECK(op, comm, ncclSend(at(in, j), cnt, type, j, comm, s));
          STRATA_NCCL_CHECK(op, comm, ncclRecv(at(out, j), cnt, type, j, comm, s));
        }
        break;
      case OpKind::barrier:
        STRATA_NCCL_CHECK(op, comm, ncclAllReduce(in, out, 1, ncclFloat32, ncclSum, comm, s));
        break;
      default: break;
    }
    group.end();
  });
  return std::make_unique<NcclRequest>(std::move(l), -1);
}

std::unique_ptr<Backend> NcclBackend::split_comm(int color, int key, Deadline deadline) {
  const char* op = "split";
  settle(op);
  cuda::DeviceGuard g(st_->device());
  PendingComm child;
  st_->with_comm(op, [&](ncclComm_t comm) {
    STRATA_NCCL_CHECK(op, comm, ncclCommSplit(comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child.comm, nullptr));
  });
  // Non-blocking: the parent runs the split and the child initialises in the background.
  if (!st_->wait_ready(op, deadline)) throw detail::TimedOut(-1);
  if (child.comm && !poll_ready(child.comm, deadline, op)) throw detail::TimedOut(-1);
  if (!child.comm) return nullptr;  // NCCL_SPLIT_NOCOLOR
  int n = 0, r = 0;
  STRATA_NCCL_CHECK(op, child.comm, ncclCommCount(child.comm, &n));
  STRATA_NCCL_CHECK(op, child.comm, ncclCommUserRank(child.comm, &r));
  auto st = std::make_shared<CommState>(child, st_->device(), r, n, st_->timeout_s(), st_->bootstrap());
  return std::make_unique<NcclBackend>(std::move(st));
}

// ------------------------------------------------------------------ world creation

// Picks this rank's device (*device, or its local rank when -1). Empty when usable,
// else why not.
std::string choose_device(int* device) {
  const int count = cuda::device_count();
  if (count == 0) return str_cat("no CUDA device is visible (", cuda::unavailable_reason(), ")");
  if (*device < 0) {
    const int lr = local_rank();
    if (lr >= count)
      return str_cat("it is local rank ", lr, " on its node but only ", count,
                     " CUDA device(s) are visible; the nccl backend needs one GPU per rank (start at most ", count,
                     " ranks per node)");
    *device = lr;
  } else if (*device >= count) {
    return str_cat("CUDA device ", *device, " was requested but only ", count, " are visible");
  }
  return "";
}

}  // namespace

bool nccl_available() { return true; }

int nccl_device_count() { return cuda::device_count(); }

std::shared_ptr<ProcessGroup> init_nccl_world(const CommOptions& options, int device, int* argc, char*** argv) {
  options.validate();
  CommOptions opts = options;
  opts.algorithm = Algorithm::native;  // algorithms on send/recv would reduce on the host
  std::string problem = choose_device(&device);
  if (!problem.empty() && !launched_by_mpi())
    STRATA_THROW(Error, "[nccl] ", problem, "; the nccl backend runs collectives on GPUs (use the mpi backend for CPU tensors)");

  std::shared_ptr<ProcessGroup> mpi = init_mpi_world(opts, argc, argv);
  const int rank = mpi->rank(), n = mpi->size();
  // Every rank learns whether all of them have a GPU, so none waits in NCCL for one that has none.
  Tensor bad = ops::full({1}, problem.empty() ? -1.0 : double(rank), DType::i32);
  mpi->all_reduce(bad, ReduceOp::max).wait();
  if (!problem.empty())
    STRATA_THROW(Error, "[nccl] rank ", rank, ": ", problem, "; the nccl backend runs collectives on GPUs");
  if (const int bad_rank = int(bad.item<double>()); bad_rank >= 0)
    STRATA_THROW(Error, "[nccl] rank ", rank, ": rank ", bad_rank,
                 " has no usable CUDA device (its own error says why); the nccl world was not created");

  // Rank 0 makes the unique id; byte 0 tells the others whether it could.
  Tensor idbuf = ops::zeros({int64_t(sizeof(ncclUniqueId)) + 1}, DType::u8);
  std::string id_error;
  if (rank == 0) {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) {
      idbuf.data<uint8_t>()[0] = 1;
      std::memcpy(idbuf.data<uint8_t>() + 1, &id, sizeof id);
    } else {
      id_error = nccl_error(r, "ncclGetUniqueId", "init", nullptr);
    }
  }
  mpi->broadcast(idbuf, 0).wait();
  if (!id_error.empty()) throw CommError(id_error);
  if (idbuf.data<uint8_t>()[0] != 1)
    STRATA_THROW(CommError, "[nccl] init: rank ", rank, ": rank 0 could not create the NCCL unique id (see its error)");
  ncclUniqueId id;
  std::memcpy(&id, idbuf.data<uint8_t>() + 1, sizeof id);

  cuda::DeviceGuard g(device);
  PendingComm comm;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // every wait below and in later ops is a poll with a deadline
  try {
    STRATA_NCCL_CHECK("init", nullptr, ncclCommInitRankConfig(&comm.comm, n, id, rank, &cfg));
    if (!poll_ready(comm.comm, deadline_in(opts.timeout_s), "init"))
      STRATA_THROW(CommError, "[nccl] init: could not create the NCCL communicator within ", opts.timeout_s,
                   " s (comm.timeout_s): a rank did not call init_nccl_world, or the ranks cannot reach each other "
                   "(NCCL_DEBUG=INFO shows how far it got)");
  } catch (const CommError& e) {
    mpi->abort(e.what());  // peers may be waiting for us: tear the job down at exit
    STRATA_THROW(CommError, e.what(), " [rank ", rank, " of ", n, ", cuda:", device, "]");
  }
  auto st = nccl_comm_errors([&] { return std::make_shared<CommState>(comm, device, rank, n, opts.timeout_s, mpi); });
  return std::make_shared<ProcessGroup>(std::make_unique<NcclBackend>(std::move(st)), opts, "world");
}

}  // namespace strata::comm
#endif  // STRATA_WITH_NCCL
