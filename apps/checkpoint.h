// The training-checkpoint API lives in the library (<strata/parallel/checkpoint/training.h>,
// installed, so programs that embed strata write checkpoints `strata eval/sample` read);
// the CLI uses it under its own namespace.
#pragma once
#include <strata/parallel/checkpoint/training.h>

namespace strata::apps {
using parallel::Checkpoint;
using parallel::TrainingState;
using parallel::kLatestFile;
using parallel::kMetaModelTensors;
using parallel::kMetaTrainingState;
using parallel::kModelFile;
using parallel::kOptimizerFile;
using parallel::kStateFile;
using parallel::check_tensors_match;
using parallel::load_into;
using parallel::open_checkpoint;
using parallel::parse_training_state;
using parallel::read_checkpoint;
using parallel::remove_stale_tmp;
using parallel::resolve_checkpoint_dir;
using parallel::save_checkpoint;
using parallel::save_sharded_checkpoint;
using parallel::training_meta;
using parallel::training_state_to_json;
}  // namespace strata::apps
