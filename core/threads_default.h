// The default of strata's intra-op thread count (core/threads.h), separate from threads.h
// so that the kernels including that header do not depend on it.
#pragma once

namespace strata {

/// What get_num_threads() returns until the first set_num_threads(): OMP_NUM_THREADS's
/// first entry when it is a positive integer ("4" or "4,2"), as libgomp and PyTorch's
/// intra-op default read it, else all hardware threads. Reads the environment at each call.
int default_num_threads();

}  // namespace strata
