// The mpi backend's entry point: jobs start with `mpirun -np N strata ...`, and apps/
// calls init_mpi_world() once to get the world group.
//
// Threading: MPI is initialised with MPI_THREAD_SERIALIZED. Each group has its own comm
// thread, so several threads call MPI, but every MPI call is made under one
// process-wide lock and every wait is a nonblocking request polled with MPI_Test (lock
// released between polls), so calls never overlap and ops of different groups still
// progress concurrently. MPI_THREAD_MULTIPLE is not needed.
//
// Failures: communicators use MPI_ERRORS_RETURN and every return code becomes a
// CommError. While waiting, ranks on the same host check each other's pids, so a rank
// killed by a signal is reported by name ("peer rank 1 (pid 4242 on node-a) died")
// rather than after the timeout; remote deaths are caught by the timeout. After a
// failure, destroying the last group made by init_mpi_world ends the process with
// kCommFailureExitCode instead of calling MPI_Finalize (which would wait for the dead
// peer); mpirun then stops the other ranks, and any rank left running fails its next op
// within comm.timeout_s, so no rank waits forever. docs/reliability.md records what
// OpenMPI 4 does (and why not MPI_Abort).
#pragma once
#include <memory>

#include <strata/comm/process_group.h>

namespace strata::comm {

/// Exit status of a process that a communication failure ends: the CLI's exit code for
/// a CommError, and the status a failed MPI runtime exits with (see above).
inline constexpr int kCommFailureExitCode = 3;

/// Initialises MPI (unless the program already did, with at least MPI_THREAD_SERIALIZED)
/// and returns this rank's world group, over a duplicate of MPI_COMM_WORLD. MPI is
/// finalised when the last group made from it is destroyed. argc/argv may be null.
/// Throws CommError if MPI cannot be initialised or was already finalised.
std::shared_ptr<ProcessGroup> init_mpi_world(const CommOptions& options = {}, int* argc = nullptr,
                                             char*** argv = nullptr);

/// True when this process was started by an MPI launcher (mpirun / srun with PMI).
bool launched_by_mpi();

/// This process's rank in the job, from the launcher's environment (OMPI_COMM_WORLD_RANK,
/// PMI_RANK or PMIX_RANK), before any group exists: 0 when none is set (one process).
int launcher_rank();

/// This process's rank among the ranks on its node, from the launcher's environment
/// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, MV2_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID
/// or LOCAL_RANK); 0 when none is set. Picks a rank's GPU (one GPU per rank).
int local_rank();

}  // namespace strata::comm
