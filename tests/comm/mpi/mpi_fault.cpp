// Fault-injection program for the mpi backend, driven by run_fault.cmake:
//   timeout: rank 2 skips a collective; the others must fail after comm.timeout_s with a
//            message naming op, group, rank, sequence number and size, and exit non-zero.
//   kill:    rank 1 SIGKILLs itself in the middle of an all_reduce; the survivors must
//            say so themselves, naming rank 1, and exit 3, well within the timeout.
//   stop:    rank 1 SIGSTOPs itself before a collective; the others time out and name
//            it as the rank that never joined.
//   p2p:     rank 1 never posts its half of rank 0's batch_isend_irecv; rank 0 times out
//            naming the label, the pending op with its tag and rank 1.
//   p2p_kill: rank 1 SIGKILLs itself instead; rank 0 names it as a lost peer.
//   sigterm: rank 1 never joins a collective; 1 s into it ranks 0 and 2 get SIGTERM, as
//            from a launcher that lost rank 1's host: they end the wait at once, name
//            rank 1 and exit 3, long before comm.timeout_s (20 s).
//   sigterm_busy: rank 0 gets SIGTERM while computing (no comm wait): it dies of it, as
//            without strata's handler.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include <unistd.h>

#include <strata/comm/mpi.h>
#include <strata/core/threads.h>
#include <strata/tensor/ops.h>

using namespace strata;
using namespace strata::comm;

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  set_num_threads(1);
  CommOptions o;
  const bool times_out = std::strcmp(mode, "timeout") == 0 || std::strcmp(mode, "stop") == 0 ||
                         std::strcmp(mode, "p2p") == 0;
  // The launcher's SIGTERM, sent to this process from another thread after `s` seconds.
  auto sigterm_after = [](double s) {
    std::thread([s] {
      std::this_thread::sleep_for(std::chrono::duration<double>(s));
      kill(getpid(), SIGTERM);
    }).detach();
  };
  o.timeout_s = times_out ? 2.0 : 20.0;
  auto world = init_mpi_world(o, &argc, &argv);
  const int r = world->rank();
  try {
    Tensor warm = ops::ones({16}, DType::f32);
    world->all_reduce(warm).wait();  // seq 0: everyone is up
    if (std::strcmp(mode, "timeout") == 0) {
      if (r == 2) {
        std::this_thread::sleep_for(std::chrono::seconds(8));  // never joins seq 1 in time
        return 0;
      }
      Tensor t = ops::ones({1000}, DType::f32);
      world->all_reduce(t).wait();  // seq 1
    } else if (std::strcmp(mode, "kill") == 0) {
      world->set_algorithm(Algorithm::ring);
      Tensor t = ops::ones({int64_t(8) << 20}, DType::f32);  // 32 MiB: many ring steps
      Work w = world->all_reduce(t);
      // Right after posting: the comm thread has at most begun the ring's 2(N-1) steps (a
      // quiet host finishes all of them in well under 20 ms, so any wait could outlive it).
      if (r == 1) std::raise(SIGKILL);
      w.wait();
    } else if (std::strcmp(mode, "stop") == 0) {
      if (r == 1) std::raise(SIGSTOP);  // stays stopped until the launcher kills it
      Tensor t = ops::ones({1000}, DType::f32);
      world->all_reduce(t).wait();  // seq 1
    } else if (std::strcmp(mode, "sigterm") == 0) {
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(8));  // never joins seq 1 in time
        return 0;
      }
      sigterm_after(1.0);
      Tensor t = ops::ones({1000}, DType::f32);
      world->all_reduce(t).wait();  // seq 1
    } else if (std::strcmp(mode, "sigterm_busy") == 0) {
      if (r == 0) {
        sigterm_after(0.2);
        volatile double x = 0;
        for (int64_t i = 0; i < (int64_t(1) << 40); ++i) x = x + 1e-9;  // computing: no comm wait
      }
      Tensor t = ops::ones({1000}, DType::f32);
      world->all_reduce(t).wait();  // seq 1: rank 0 is gone
    } else if (std::strcmp(mode, "p2p") == 0 || std::strcmp(mode, "p2p_kill") == 0) {
      // Rank 0 receives from rank 1 and sends to rank 2 in one batch; rank 2 does its half.
      Tensor a = ops::zeros({1000}, DType::f32), b = ops::ones({500}, DType::i64);
      if (r == 0) {
        world->batch_isend_irecv({{P2POp::Kind::recv, a, 1, 5}, {P2POp::Kind::send, b, 2, 6}}, "pp stage 0 mb 2")
            .wait();
      } else if (r == 2) {
        world->batch_isend_irecv({{P2POp::Kind::recv, b, 0, 6}}, "pp stage 2 mb 2").wait();
        // Never finalise beside a dead or stuck rank (MPI_Finalize could wait for it):
        // this barrier fails too, and the failed group ends the process with status 3.
        world->barrier().wait();
      } else {
        if (std::strcmp(mode, "p2p_kill") == 0) std::raise(SIGKILL);
        std::this_thread::sleep_for(std::chrono::seconds(8));  // never posts its send
        return 0;
      }
    } else {
      std::fprintf(stderr, "usage: %s timeout|kill|stop|p2p|p2p_kill|sigterm|sigterm_busy\n", argv[0]);
      return 2;
    }
  } catch (const CommError& e) {
    // The world group is failed: destroying it ends the process with this status.
    std::fprintf(stderr, "rank %d exits with status %d after: %s\n", r, kCommFailureExitCode, e.what());
    return kCommFailureExitCode;
  }
  std::fprintf(stderr, "rank %d: the fault was not detected\n", r);
  return 3;
}
