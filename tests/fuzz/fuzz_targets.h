// The fuzz entry points, one per input format. Each takes untrusted bytes and returns 0;
// strata's typed errors (ConfigError, DataError) are the expected way to refuse an input,
// anything else (another exception, a crash, a sanitizer report) is a bug. The same
// functions back the libFuzzer binaries (tests/fuzz/libfuzzer/) and the corpus
// regression test that ./test.sh runs with any compiler (corpus_test.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::fuzz {

/// The bytes as YAML through ConfigNode: load_string, every key read as every type,
/// child(), require(), check_unknown_keys() and dump().
int config(const uint8_t* data, size_t size);
/// The bytes as a training config: TrainConfig::from_node (needs strata_apps).
int train_config(const uint8_t* data, size_t size);
/// The bytes as an IDX file (raw or gzip), read as images and as labels.
int idx(const uint8_t* data, size_t size);
/// The bytes as a safetensors file: header, load_safetensors, SafetensorsFile reads.
int safetensors(const uint8_t* data, size_t size);
/// The bytes as index.json of a checkpoint directory holding the two shard files of
/// tests/fuzz/index_shards/: CheckpointReader::open, then read_full of every tensor.
int checkpoint_index(const uint8_t* data, size_t size);

}  // namespace strata::fuzz
