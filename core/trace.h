// The timeline recorder behind `run.trace`: complete events (name, category, start,
// duration, a few arguments) per thread, written as Chrome trace-event JSON that Perfetto
// and chrome://tracing open. Off by default; while off every hook is one relaxed load.
#pragma once
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace strata::trace {

/// What a slice is, for `strata trace summary` (docs/observe.md defines the measures):
/// compute (forward, backward, optimizer), comm (a collective running on a comm thread),
/// wait (a thread blocked in Work::wait), pipeline (a pipeline action: counts as compute),
/// step (one training step: the window the summary measures), hook (a DDP/ZeRO gradient hook
/// on the main thread: copying into buckets and launching collectives, communication work
/// that `strata bench ddp` counts as exposed), other (shown, not measured).
enum class Cat : uint8_t { compute, comm, wait, pipeline, step, hook, other };
/// "compute", "comm", ... (the "cat" field of the JSON).
const char* cat_name(Cat c);

namespace detail {
inline std::atomic<bool> g_on{false};
}  // namespace detail

/// True while recording (between start() and stop()). One relaxed atomic load: the only
/// cost a hook pays when tracing is off.
inline bool enabled() noexcept { return detail::g_on.load(std::memory_order_relaxed); }

/// One argument of a slice: a key (a string literal: it is not copied until recorded)
/// and an integer or string value. Strings are copied only when the slice is recorded.
struct Arg {
  Arg(const char* k, int64_t v) : key(k), num(v) {}
  Arg(const char* k, int v) : key(k), num(v) {}
  Arg(const char* k, uint64_t v) : key(k), num(int64_t(v)) {}  // sizes and indices
  Arg(const char* k, std::string_view v) : key(k), str(v), is_str(true) {}
  Arg(const char* k, const char* v) : key(k), str(v), is_str(true) {}
  Arg(const char* k, const std::string& v) : key(k), str(v), is_str(true) {}
  const char* key;
  int64_t num = 0;
  std::string_view str{};
  bool is_str = false;
};

/// A slice on the calling thread's track, from construction to destruction (RAII), e.g.
///   trace::Scope s("F", {{"mb", 3}, {"stage", 1}}, trace::Cat::pipeline);
/// When tracing is off the constructor only checks enabled(): nothing is allocated or
/// formatted. Slices on one thread must nest (they do when scopes are RAII locals).
/// Not copyable or movable; use on the thread that created it.
class Scope {
 public:
  /// An inactive scope; begin() may start it later.
  Scope() = default;
  explicit Scope(std::string_view name, std::initializer_list<Arg> args = {}, Cat cat = Cat::compute) {
    if (enabled()) begin(name, args, cat);
  }
  Scope(std::string_view name, Cat cat, std::initializer_list<Arg> args = {}) {
    if (enabled()) begin(name, args, cat);
  }
  ~Scope() {
    if (index_ >= 0) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  /// Starts recording this slice now (no-op when tracing is off or already begun).
  void begin(std::string_view name, std::initializer_list<Arg> args = {}, Cat cat = Cat::compute);
  /// Ends it now (the destructor does this otherwise). A slice begun before start()
  /// cleared the buffers, or after stop(), is dropped.
  void end();

 private:
  int64_t index_ = -1;  // into this thread's event buffer
  uint64_t generation_ = 0;
};

/// Names the calling thread's track ("main", "comm dp", ...). Cheap; call once per thread.
void set_thread_name(std::string name);

/// The module (or any labelled region) the calling thread is inside, for the backward
/// slices of autograd nodes created there: ids from intern(), 0 = none.
uint32_t intern(std::string_view label);
const std::string& label(uint32_t id);
uint32_t current_label();
/// Sets the current label for its lifetime (restores the previous one): nn::Module wraps
/// forward in one so the nodes it creates remember their module.
class LabelScope {
 public:
  explicit LabelScope(uint32_t id);
  ~LabelScope();
  LabelScope(const LabelScope&) = delete;
  LabelScope& operator=(const LabelScope&) = delete;

 private:
  uint32_t prev_;
};

/// A name for an object (a module's dotted path), looked up by modules when they record;
/// empty when none was given. Thread-safe.
void name_object(const void* obj, std::string name);
std::string object_name(const void* obj);

/// Tags the next collective this thread issues ({"bucket", 3}, {"unit", 0}): the comm
/// layer takes it (and clears it) when the op is queued and records it on the op's slice.
struct OpTag {
  const char* key = nullptr;
  int64_t value = 0;
};
namespace detail {
void set_op_tag(const char* key, int64_t value);
}  // namespace detail
/// No-op while tracing is off. `key` must outlive the recording (a string literal).
inline void tag_next_op(const char* key, int64_t value) {
  if (enabled()) detail::set_op_tag(key, value);
}
/// The pending tag of this thread, cleared. {nullptr, 0} when none. The comm layer calls
/// it (while tracing) for every op it queues.
OpTag take_op_tag();

/// Clears every buffer and starts recording. Thread-safe.
void start();
/// Stops recording; slices still open are dropped when written. Thread-safe.
void stop();
/// Writes every thread's slices as Chrome trace-event JSON: {"traceEvents": [...]} with
/// ts/dur in microseconds of the system clock (so several ranks' files line up on one
/// machine), pid = `rank`, one tid per thread, and process/thread name metadata. The file
/// appears whole (written to <path>.tmp, then renamed); DataError naming it on failure.
/// Call after stop().
void write_json(const std::string& path, int rank);
/// The same JSON as a string.
std::string to_json(int rank);
/// Number of slices recorded since start() (for tests).
int64_t event_count();

}  // namespace strata::trace
