// Multi-process tests of the nccl backend, run by ctest under `mpirun -np N` with one GPU
// per rank (the job reports itself SKIPPED when a node has fewer GPUs than ranks): every
// collective x dtype x size x reduce op against the same collective on the mpi backend,
// ordering after compute-stream kernels, sub-groups, non-contiguous tensors, the CPU
// staging path (debug mode) and byte counts. `strata_test_comm_nccl timeout` is the
// fault mode run_fault.cmake drives: the last rank skips a collective.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "../collective_checks.h"
#include <strata/comm/mpi.h>
#include <strata/comm/nccl.h>
#include <strata/core/threads.h>
#include "nccl_world.h"

using namespace strata;
using namespace strata::comm;
using namespace strata::comm::testing;

namespace {

std::shared_ptr<ProcessGroup> g_mpi;   // the reference: same ranks, CPU tensors
std::shared_ptr<ProcessGroup> g_nccl;  // under test: GPU tensors
Device g_gpu{DeviceType::CUDA, 0};

CommOptions test_options(double timeout_s = 60) {
  CommOptions o;
  o.timeout_s = timeout_s;
  return o;
}

Tensor gpu(const Tensor& cpu) { return ops::to_device(cpu, g_gpu); }
std::vector<double> host(const Tensor& t) { return read_tensor(ops::to_cpu(t)); }

// The same data on both backends: `cpu` for the mpi group, `dev` for the nccl group.
struct Twin {
  Tensor cpu, dev;
  Twin(DType dt, const std::vector<double>& v) : cpu(make_tensor(dt, v)), dev(gpu(cpu)) {}
  Twin(DType dt, int64_t n) : cpu(ops::zeros({n}, dt)), dev(ops::zeros({n}, dt, g_gpu)) {}
  Twin() = default;
  void expect_same(double tol, const std::string& what) const {
    expect_values(host(dev), read_tensor(cpu), tol, what);
  }
};

// ---------------------------------------------------------------- every collective

TEST(NcclCollectives, MatchTheMpiBackend) {
  ProcessGroup& m = *g_mpi;
  ProcessGroup& g = *g_nccl;
  const int n = g.size(), r = g.rank();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    const bool fl = is_floating(dt);
    for (int64_t count : {int64_t(0), int64_t(1), int64_t(5), int64_t(1003), int64_t(262147)}) {
      const std::string ctx = std::string(" [") + dtype_name(dt) + " count=" + std::to_string(count) + " rank " +
                              std::to_string(r) + "/" + std::to_string(n) + "]";
      const int root = int(count % n);
      std::vector<ReduceOp> ops{ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max};
      if (fl) ops.push_back(ReduceOp::avg);

      for (ReduceOp op : ops) {
        Twin t(dt, inputs(r, count, op));
        m.all_reduce(t.cpu, op).wait();
        g.all_reduce(t.dev, op).wait();
        t.expect_same(tolerance(dt, op), std::string("all_reduce ") + reduce_op_name(op) + ctx);
        Twin u(dt, inputs(r, count, op));
        m.reduce(u.cpu, root, op).wait();
        g.reduce(u.dev, root, op).wait();
        u.expect_same(tolerance(dt, op), std::string("reduce ") + reduce_op_name(op) + " root " +
                                             std::to_string(root) + ctx);
        Twin in(dt, inputs(r, n * count, op)), out(dt, count);
        m.reduce_scatter(in.cpu, out.cpu, op).wait();
        g.reduce_scatter(in.dev, out.dev, op).wait();
        out.expect_same(tolerance(dt, op), std::string("reduce_scatter ") + reduce_op_name(op) + ctx);
      }
      {
        Twin t(dt, moves(r, count));
        m.broadcast(t.cpu, root).wait();
        g.broadcast(t.dev, root).wait();
        t.expect_same(0, "broadcast root " + std::to_string(root) + ctx);
      }
      {
        Twin in(dt, moves(r, count)), out(dt, n * count);
        m.all_gather(in.cpu, out.cpu).wait();
        g.all_gather(in.dev, out.dev).wait();
        out.expect_same(0, "all_gather" + ctx);
        // In place: the input is this rank's block of the output.
        Twin buf(dt, n * count);
        Tensor mine_cpu = ops::narrow(buf.cpu, 0, r * count, count);
        Tensor mine_dev = ops::narrow(buf.dev, 0, r * count, count);
        ops::copy_(mine_cpu, in.cpu);
        ops::copy_(mine_dev, in.dev);
        m.all_gather(mine_cpu, buf.cpu).wait();
        g.all_gather(mine_dev, buf.dev).wait();
        buf.expect_same(0, "all_gather in place" + ctx);
      }
      {
        Twin in(dt, moves(r, count));
        Twin out = r == root ? Twin(dt, n * count) : Twin();
        m.gather(in.cpu, out.cpu, root).wait();
        g.gather(in.dev, out.dev, root).wait();
        if (r == root) out.expect_same(0, "gather root " + std::to_string(root) + ctx);
      }
      {
        Twin in = r == root ? Twin(dt, moves(r, n * count)) : Twin();
        Twin out(dt, count);
        m.scatter(in.cpu, out.cpu, root).wait();
        g.scatter(in.dev, out.dev, root).wait();
        out.expect_same(0, "scatter root " + std::to_string(root) + ctx);
      }
      {
        Twin in(dt, moves(r, n * count)), out(dt, n * count);
        m.all_to_all(in.cpu, out.cpu).wait();
        g.all_to_all(in.dev, out.dev).wait();
        out.expect_same(0, "all_to_all" + ctx);
      }
      if (n > 1) {
        // A ring exchange (send_recv: one NCCL group) and an ordered send/recv pair.
        Twin s(dt, moves(r, count)), got(dt, count);
        const int right = (r + 1) % n, left = (r + n - 1) % n;
        m.send_recv(s.cpu, right, got.cpu, left).wait();
        g.send_recv(s.dev, right, got.dev, left).wait();
        got.expect_same(0, "send_recv ring" + ctx);
        Twin p(dt, moves(r, count + 3));
        if (r == 0) {
          g.send(p.dev, 1).wait();
          m.send(p.cpu, 1).wait();
        } else if (r == 1) {
          g.recv(p.dev, 0).wait();
          m.recv(p.cpu, 0).wait();
        }
        p.expect_same(0, "send/recv 0 -> 1" + ctx);
      }
    }
  }
}

TEST(NcclCollectives, BarrierAndByteCounts) {
  ProcessGroup& g = *g_nccl;
  const int n = g.size();
  g.reset_stats();
  g.barrier().wait();
  Tensor t = ops::ones({1 << 16}, DType::f32, g_gpu);
  g.all_reduce(t).wait();
  const CommStats st = g.stats();
  EXPECT_EQ(st[OpKind::barrier].calls, 1);
  EXPECT_EQ(st[OpKind::all_reduce].calls, 1);
  EXPECT_EQ(st[OpKind::all_reduce].payload_bytes, int64_t(4) << 16);
  EXPECT_EQ(st[OpKind::all_reduce].bytes_sent, 2 * (n - 1) * (int64_t(4) << 16) / n);  // nccl-tests bus model
  expect_values(host(t), std::vector<double>(1 << 16, double(n)), 0, "all_reduce of ones");
}

// batch_isend_irecv as one NCCL group: with every other rank, f32 and bf16 sends and
// receives of sizes that depend on both ranks (receives listed first on the lower rank),
// compared with the same batch on the mpi backend and with the values sent.
TEST(NcclCollectives, BatchIsendIrecvMatchesTheMpiBackend) {
  ProcessGroup& m = *g_mpi;
  ProcessGroup& g = *g_nccl;
  const int n = g.size(), r = g.rank();
  auto vals = [](int src, int dst, size_t len) {
    std::vector<double> v(len);
    for (size_t i = 0; i < len; ++i) v[i] = 100 * src + 10 * dst + double(i % 50);
    return v;
  };
  auto len = [](int src, int dst) { return size_t(1000 + 37 * src + 11 * dst); };
  std::vector<Twin> sends, recvs;
  std::vector<int> peers;
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    peers.push_back(j);
    sends.emplace_back(DType::f32, vals(r, j, len(r, j)));
    sends.emplace_back(DType::bf16, vals(r, j, 7));
    recvs.emplace_back(DType::f32, int64_t(len(j, r)));
    recvs.emplace_back(DType::bf16, int64_t(7));
  }
  auto batch = [&](bool dev) {
    std::vector<P2POp> ops;
    for (size_t k = 0; k < peers.size(); ++k) {
      const int j = peers[k];
      for (int half = 0; half < 2; ++half) {
        const bool recv_now = (half == 0) == (r < j);
        for (size_t e = 2 * k; e < 2 * k + 2; ++e) {
          const Twin& t = recv_now ? recvs[e] : sends[e];
          ops.push_back({recv_now ? P2POp::Kind::recv : P2POp::Kind::send, dev ? t.dev : t.cpu, j, 4});
        }
      }
    }
    return ops;
  };
  m.batch_isend_irecv(batch(false), "mpi reference").wait();
  g.batch_isend_irecv(batch(true), "nccl").wait();
  for (size_t k = 0; k < peers.size(); ++k) {
    const int j = peers[k];
    const std::string from = " from rank " + std::to_string(j) + " on rank " + std::to_string(r);
    recvs[2 * k].expect_same(0, "f32" + from);
    recvs[2 * k + 1].expect_same(0, "bf16" + from);
    expect_values(host(recvs[2 * k].dev), vals(j, r, len(j, r)), 0, "f32 values" + from);
  }
  if (peers.empty()) return;  // np 1: nothing to exchange
  // A CPU tensor is refused on the calling thread, naming the op of the batch.
  try {
    g.batch_isend_irecv({{P2POp::Kind::send, recvs[0].dev, peers[0]}, {P2POp::Kind::recv, recvs[0].cpu, peers[0]}},
                        "pp stage 0 mb 0");
    ADD_FAILURE() << "a CPU tensor was accepted by a batch on " << g.device().str();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[batch_isend_irecv op 1 (recv, pp stage 0 mb 0)] group 'world' (nccl"),
              std::string::npos)
        << e.what();
  }
}

// The collective must read what the kernels queued before it wrote, and its result must
// be complete for the kernels queued after wait(), with no host synchronisation by the
// caller in between. 128 MiB fills take long enough to expose a missing event.
TEST(NcclCollectives, OrderedAfterComputeAndCompleteAfterWait) {
  ProcessGroup& g = *g_nccl;
  const int n = g.size(), r = g.rank();
  const int64_t count = int64_t(32) << 20;
  Tensor t = ops::empty({count}, DType::f32, g_gpu);
  for (int round = 0; round < 3; ++round) {
    ops::fill_(t, double(r + 1 + round));  // compute stream
    Work w = g.all_reduce(t);              // comm stream, after an event on the compute stream
    w.wait();
    ops::mul_(t, 2.0);  // compute stream, after the collective completed
    const double want = 2.0 * (n * (n + 1) / 2.0 + n * round);
    const double sum = host(ops::sum(t))[0];  // a stale or partial buffer shows in the sum...
    EXPECT_NEAR(sum, want * double(count), 1e-5 * want * double(count)) << "round " << round;
    const std::vector<double> head = host(ops::narrow(t, 0, 0, 4));
    const std::vector<double> tail = host(ops::narrow(t, 0, count - 4, 4));
    EXPECT_EQ(head, std::vector<double>(4, want)) << "round " << round;  // ...and both ends
    EXPECT_EQ(tail, std::vector<double>(4, want)) << "round " << round;
  }
}

TEST(NcclCollectives, SubGroupsMatchTheMpiBackend) {
  const int n = g_nccl->size(), r = g_nccl->rank();
  // Even and odd ranks, each ordered by descending rank.
  auto gs = g_nccl->split(r % 2, -r);
  auto ms = g_mpi->split(r % 2, -r);
  ASSERT_TRUE(gs && ms);
  EXPECT_EQ(gs->rank(), ms->rank());
  EXPECT_EQ(gs->size(), ms->size());
  EXPECT_STREQ(gs->backend_kind(), "nccl");
  Twin t(DType::f32, inputs(r, 777, ReduceOp::sum));
  ms->all_reduce(t.cpu).wait();
  gs->all_reduce(t.dev).wait();
  t.expect_same(0, "split all_reduce");
  Twin in(DType::f64, moves(r, 9)), out(DType::f64, 9 * gs->size());
  ms->all_gather(in.cpu, out.cpu).wait();
  gs->all_gather(in.dev, out.dev).wait();
  out.expect_same(0, "split all_gather");
  // new_group: rank 0 is not a member when n > 1.
  std::vector<int> members;
  for (int j = n - 1; j >= (n > 1 ? 1 : 0); --j) members.push_back(j);
  auto gn = g_nccl->new_group(members);
  auto mn = g_mpi->new_group(members);
  EXPECT_EQ(gn == nullptr, mn == nullptr);
  if (gn) {
    Twin b(DType::i64, moves(r, 33));
    mn->broadcast(b.cpu, 0).wait();
    gn->broadcast(b.dev, 0).wait();
    b.expect_same(0, "new_group broadcast");
  }
}

TEST(NcclCollectives, NonContiguousTensors) {
  ProcessGroup& g = *g_nccl;
  const int r = g.rank();
  Tensor base = make_tensor(DType::f32, inputs(r, 24, ReduceOp::sum));
  Tensor cpu_t = ops::transpose(ops::view(base, {4, 6}), 0, 1);  // (6, 4), strided
  Tensor dev_t = ops::transpose(ops::view(gpu(base), {4, 6}), 0, 1);
  ASSERT_FALSE(dev_t.is_contiguous());
  g_mpi->all_reduce(cpu_t).wait();
  g.all_reduce(dev_t).wait();
  expect_values(host(dev_t), read_tensor(cpu_t), 0, "transposed all_reduce");
}

// Debug mode's cross-rank check runs through the backend on CPU tensors: the nccl
// backend stages them through the device.
TEST(NcclCollectives, DebugModeStagesCpuBuffers) {
  const int n = g_nccl->size(), r = g_nccl->rank();
  setenv("STRATA_COMM_DEBUG", "1", 1);
  auto dbg = g_nccl->split(0, r);
  unsetenv("STRATA_COMM_DEBUG");
  Tensor ok = ops::ones({10}, DType::f32, g_gpu);
  dbg->all_reduce(ok).wait();
  expect_values(host(ok), std::vector<double>(10, double(n)), 0, "debug all_reduce");
  if (n < 2) return;
  Tensor t = ops::ones({r == 1 ? 999 : 1000}, DType::f32, g_gpu);
  std::string msg;
  try {
    dbg->all_reduce(t).wait();
  } catch (const CommError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("issued different collectives"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1: all_reduce seq 1, f32 x 999"), std::string::npos) << msg;
  dbg->all_reduce(ok).wait();  // still usable
  expect_values(host(ok), std::vector<double>(10, double(n * n)), 0, "after mismatch");
}

// A tensor on the wrong device is refused on the caller's thread before anything is
// queued (no op counted, no sequence number used), so the group stays usable.
void expect_refused(const Tensor& t, const std::string& want) {
  ProcessGroup& g = *g_nccl;
  const int64_t calls = g.stats()[OpKind::all_reduce].calls;
  try {
    g.all_reduce(t).wait();
    ADD_FAILURE() << "a tensor on " << t.device().str() << " was accepted by a group on " << g.device().str();
  } catch (const CommError& e) {
    ADD_FAILURE() << "refused on the comm thread (the group failed): " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  EXPECT_EQ(g.stats()[OpKind::all_reduce].calls, calls);
  Tensor ok = ops::ones({4}, DType::f32, g_gpu);
  g.all_reduce(ok).wait();
  expect_values(host(ok), std::vector<double>(4, double(g.size())), 0, "after the refused call");
}

TEST(NcclCollectives, CpuTensorIsAClearError) {
  EXPECT_EQ(g_nccl->device(), g_gpu);
  expect_refused(ops::ones({4}, DType::f32), "[all_reduce] group 'world' (nccl, rank " +
                                                 std::to_string(g_nccl->rank()) + ") runs on " + g_gpu.str() +
                                                 " but the tensor is on cpu");
}

TEST(NcclCollectives, TensorOnAnotherGpuIsAClearError) {
  const int count = nccl_device_count();
  Tensor fewest = ops::full({1}, double(count), DType::i32);
  g_mpi->all_reduce(fewest, ReduceOp::min).wait();  // every rank takes the same branch
  if (fewest.item<double>() < 2) GTEST_SKIP() << "needs a second GPU on every node";
  const Device other{DeviceType::CUDA, (g_gpu.index + 1) % count};
  expect_refused(ops::ones({4}, DType::f32, other), "[all_reduce] group 'world' (nccl, rank " +
                                                        std::to_string(g_nccl->rank()) + ") runs on " + g_gpu.str() +
                                                        " but the tensor is on " + other.str());
}

// ---------------------------------------------------------------- fault mode

// The last rank never joins all_reduce seq 1; the others must fail after comm.timeout_s
// with the op named, their kernels aborted, and exit non-zero (MPI_Abort at exit).
int run_timeout_fault() {
  const int r = g_nccl->rank(), n = g_nccl->size();
  try {
    Tensor warm = ops::ones({16}, DType::f32, g_gpu);
    g_nccl->all_reduce(warm).wait();  // seq 0: everyone is up
    if (r == n - 1) {
      std::this_thread::sleep_for(std::chrono::seconds(40));
      return 0;
    }
    Tensor t = ops::ones({1000}, DType::f32, g_gpu);
    g_nccl->all_reduce(t).wait();  // seq 1
  } catch (const CommError& e) {
    std::fprintf(stderr, "rank %d exits with status 1 after: %s\n", r, e.what());
    return 1;
  }
  std::fprintf(stderr, "rank %d: the fault was not detected\n", r);
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  const bool timeout_mode = argc > 1 && std::strcmp(argv[1], "timeout") == 0;
  if (!timeout_mode) ::testing::InitGoogleTest(&argc, argv);
  set_num_threads(1);
  g_mpi = init_mpi_world(test_options(), &argc, &argv);
  if (const std::string why = gpu_shortage(*g_mpi); !why.empty()) {
    if (g_mpi->rank() == 0) std::printf("SKIPPED: needs one GPU per rank: %s\n", why.c_str());
    g_mpi.reset();
    return timeout_mode ? 4 : 0;  // run_fault.cmake wants a failing exit either way
  }
  g_gpu = Device{DeviceType::CUDA, local_rank()};
  // The fault mode's limit also bounds NCCL's own start-up, so it is not tiny.
  g_nccl = init_nccl_world(test_options(timeout_mode ? 10.0 : 60.0), g_gpu.index);
  if (timeout_mode) return run_timeout_fault();

  if (g_mpi->rank() != 0) {  // one rank prints progress; failures print everywhere
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS() != 0;
  Tensor f = ops::full({1}, double(failed), DType::i32);
  g_mpi->all_reduce(f, ReduceOp::max).wait();
  const int any = int(f.item<double>());
  if (g_mpi->rank() == 0 && any) std::fprintf(stderr, "some rank failed\n");
  g_nccl.reset();
  g_mpi.reset();
  return any;
}
