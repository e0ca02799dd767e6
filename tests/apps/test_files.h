// Paths of the small configs and corpus under tests/data_files that the trainer tests use.
#pragma once
#include <string>
#include <vector>

namespace strata::apps {

inline const std::string kSrc = STRATA_SOURCE_DIR;
inline const std::string kTinyMlp = kSrc + "/tests/data_files/tiny_mlp.yaml";
inline const std::string kTinyGpt = kSrc + "/tests/data_files/tiny_gpt.yaml";
inline const std::string kTinyLlama = kSrc + "/tests/data_files/tiny_llama.yaml";
inline const std::string kCorpus = kSrc + "/tests/data_files/tiny_corpus.txt";

// Overrides for loading a shipped config written for a GPU (run.device: cuda) in a build
// without CUDA, which refuses that device: the tests that only read or plan such a config
// run it on the CPU there (a count or a plan does not depend on the device).
#ifdef STRATA_WITH_CUDA
inline const std::vector<std::string> kNoCudaSets;
#else
inline const std::vector<std::string> kNoCudaSets = {"run.device=cpu"};
#endif

}  // namespace strata::apps
