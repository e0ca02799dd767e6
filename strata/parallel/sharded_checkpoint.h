// Checkpoints of any layout (format v2): the writer (ShardPiece, BoxPiece, save_sharded,
// save_single) and the reader (CheckpointReader, consolidate), for includers of the
// pre-v2 header name.
#pragma once
#include <strata/parallel/checkpoint_reader.h>
#include <strata/parallel/checkpoint_writer.h>
