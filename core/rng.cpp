// The process-wide default generator and the per-thread override of it
// (core/generator_override.h): default_generator() is the override while one is set.
#include <strata/core/generator_override.h>

namespace strata {
namespace {

thread_local Generator* t_override = nullptr;  // set by DefaultGeneratorOverride

Generator& process_generator() {
  static Generator g(0);
  return g;
}

}  // namespace

Generator& default_generator() { return t_override ? *t_override : process_generator(); }
void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

DefaultGeneratorOverride::DefaultGeneratorOverride(Generator& gen) : prev_(t_override) { t_override = &gen; }
DefaultGeneratorOverride::~DefaultGeneratorOverride() { t_override = prev_; }

}  // namespace strata
