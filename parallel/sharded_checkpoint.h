// Checkpoints of any layout (format v2): the writer (ShardPiece, BoxPiece, save_sharded,
// save_single) and the reader (CheckpointReader, consolidate), for includers of the
// pre-v2 header name.
#pragma once
#include "parallel/checkpoint_reader.h"
#include "parallel/checkpoint_writer.h"
