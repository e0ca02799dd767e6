// The local backend: N ranks as threads of one process. Collectives are real
// shared-memory kernels (each rank reduces its 1/N slice of every rank's buffer and
// writes the result back to all of them), point-to-point is a rendezvous copy.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include <strata/comm/process_group.h>

namespace strata::comm {

/// Makes the N world groups of a fresh local world, one per rank, to hand to N threads.
/// Group i has rank i. Each rank must use its group from its own thread(s); every rank
/// must call the same collectives in the same order (as with MPI).
std::vector<std::shared_ptr<ProcessGroup>> make_local_world(int n, const CommOptions& options = {});

/// Runs fn(group) on n threads, one per rank of a fresh local world, and joins them.
/// If a rank throws, the world (and every group split from it) is aborted at once, so
/// the other ranks' pending ops fail instead of waiting for their timeout; the first
/// exception thrown is rethrown here.
void run_local(int n, const std::function<void(ProcessGroup&)>& fn, const CommOptions& options = {});

namespace detail {
/// The Backend of one rank of a fresh local world of n ranks (what make_local_world wraps).
std::vector<std::unique_ptr<Backend>> make_local_backends(int n);
}  // namespace detail

}  // namespace strata::comm
