// Paths of the small configs and corpus under tests/data_files that the trainer tests use.
#pragma once
#include <string>

namespace strata::apps {

inline const std::string kSrc = STRATA_SOURCE_DIR;
inline const std::string kTinyMlp = kSrc + "/tests/data_files/tiny_mlp.yaml";
inline const std::string kTinyGpt = kSrc + "/tests/data_files/tiny_gpt.yaml";
inline const std::string kCorpus = kSrc + "/tests/data_files/tiny_corpus.txt";

}  // namespace strata::apps
