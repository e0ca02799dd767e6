// The launcher's SIGTERM while a rank waits on its peers. When mpirun loses a host it
// stops the surviving ranks (SIGCONT, then SIGTERM and SIGKILL `odls_base_sigkill_timeout`
// apart, 1 s by default): a rank killed by the SIGTERM would end without saying which peer
// it was waiting for. With the handler installed, a SIGTERM that arrives while some thread
// waits in a communication op ends that wait at once, as if its deadline had passed: the
// group names the op and the peer that does not answer (a short status exchange) within
// the second before SIGKILL, and the rank exits 3. A SIGTERM at any other time keeps its
// default action, so a rank busy computing or writing a checkpoint ends as before.
#pragma once
#include <optional>

namespace strata::comm::detail {

/// Installs the handler, once per process, unless the program set its own SIGTERM
/// disposition (then that one is left alone). Thread-safe.
void install_launcher_signal_handler();

/// Marks the calling thread as waiting in a communication op for its lifetime.
class WaitingScope {
 public:
  WaitingScope();
  ~WaitingScope();
  WaitingScope(const WaitingScope&) = delete;
  WaitingScope& operator=(const WaitingScope&) = delete;
};

/// True for the first wait to ask after a SIGTERM arrived while a thread was waiting: that
/// wait ends (false from Request::wait_until). Later waits (the status exchange) run to
/// their own deadlines.
bool take_termination_request();

/// Seconds since the launcher's SIGTERM arrived during a wait, or nullopt if none did.
std::optional<double> seconds_since_termination();

}  // namespace strata::comm::detail
