// The "module." prefix rule for checkpoints of wrapped models. DataParallel is a Module
// whose child "module" is the real model, so its state_dict() keys read
// "module.<name>" (PyTorch's convention); apply_ddp leaves the tree alone and adds none.
// Checkpoints should be saved from the unwrapped model (unwrap()), and the loader below
// accepts either form for either target, so a checkpoint moves freely between wrapped
// and unwrapped models.
#pragma once
#include <string>

#include <strata/nn/module.h>

namespace strata::parallel {

inline constexpr const char* kWrapPrefix = "module.";

/// Every key gets `prefix` in front.
nn::NamedTensors add_prefix(const nn::NamedTensors& sd, const std::string& prefix = kWrapPrefix);
/// Every key loses its leading `prefix`; throws DataError naming the first key without it.
nn::NamedTensors strip_prefix(const nn::NamedTensors& sd, const std::string& prefix = kWrapPrefix);

/// The innermost model: follows DataParallel's "module" child (nested wrappers too).
nn::Module& unwrap(nn::Module& m);

/// Loads `sd` into `target`, reconciling "module." prefixes: the keys are used as they
/// are when they match target's; otherwise, when removing (or adding) whole "module."
/// prefixes on every key makes them match, that form is loaded. Anything else goes to
/// target.load_state_dict() unchanged, whose error lists the missing/unexpected keys.
/// Returns the number of prefixes removed (> 0) or added (< 0).
int load_state_dict_any(nn::Module& target, const nn::NamedTensors& sd);

}  // namespace strata::parallel
