// An outcome every rank agrees on: a step that can fail on some ranks only (reading this
// rank's part of a checkpoint, a data file, a disk) runs locally, then the ranks agree
// collectively whether it failed anywhere, so one rank's error ends every rank at once
// with its cause and exit code instead of leaving the others waiting in their next
// collective until the timeout.
#pragma once
#include <functional>

#include <strata/comm/process_group.h>

namespace strata::comm {

/// Runs `local` on this rank, then (collective over `group`, every rank must call it)
/// agrees on the outcome: when it threw on any rank, the lowest such rank's error is
/// rethrown there as it was, and every other rank throws the same kind (ConfigError,
/// DataError, CommError or Error) with "rank R: <its message>". Returns normally on every
/// rank only when `local` returned on every rank.
void run_agreed(ProcessGroup& group, const std::function<void()>& local);
/// The same over `*group`; with a null group `local` runs alone (nothing agreed, no collective).
void run_agreed(ProcessGroup* group, const std::function<void()>& local);

}  // namespace strata::comm
