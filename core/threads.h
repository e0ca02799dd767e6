// Intra-op thread count for strata's kernels and for OpenBLAS. Default: OMP_NUM_THREADS when it
// holds a positive count (as libgomp and PyTorch), otherwise all cores (threads_default.h).
// Multi-rank runs on one host set 1 per rank.
#pragma once
#include <cstdint>

namespace strata {

/// Sets the threads used by strata kernels (OpenMP) and, through the hook the tensor
/// layer installs, OpenBLAS. n <= 0 means "all hardware threads".
void set_num_threads(int n);
int get_num_threads();
/// Installed by tensor/ so that set_num_threads also reaches the BLAS library.
void set_blas_threads_hook(void (*hook)(int));

/// For executables, first thing in main(): picks OpenBLAS's kernel family from the CPU
/// when the user has not (Debian's OpenBLAS 0.3.21 falls back to slow generic kernels
/// on recent Xeons) and shortens libgomp's idle spinning, which otherwise steals the
/// cores OpenBLAS's threads need. Both are read by the libraries' load-time
/// constructors, so this re-executes the program once with the variables set.
/// Variables the user set are kept; STRATA_NO_REEXEC=1 disables it. Returns only when
/// no re-exec happened.
bool tune_environment_and_reexec(char** argv);

}  // namespace strata
