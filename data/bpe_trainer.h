// Learning a byte-level BPE from text: pre-tokens are counted once (GPT-2's ByteLevel
// regex, or Llama 3's Split pattern), then the most frequent adjacent pair is merged
// until the vocabulary is full. The result is a TokenizerSpec that tokenizer_json.h
// writes as a tokenizer.json `tokenizers` loads.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <strata/data/tokenizer.h>

namespace strata::data {

struct BpeTrainerOptions {
  int64_t vocab_size = 2048;  // special tokens + 256 bytes + merges
  std::string pattern = "gpt2";  // gpt2 (ByteLevel with its regex) | llama3 (Split + ByteLevel)
  std::vector<std::string> special_tokens{};  // ids 0..k-1, cut out of the training text
  std::string bos{};  // a special token the post-processor puts first (add_special_tokens)
  int64_t min_frequency = 2;  // pairs seen fewer times are never merged
};

/// Pre-token counts of a corpus, fed chunk by chunk.
class PreTokenCounter {
 public:
  explicit PreTokenCounter(const BpeTrainerOptions& options);
  void add(std::string_view text, bool continues);
  const std::vector<PreTokenizeStep>& steps() const { return pre_.steps(); }
  /// pre-token bytes -> occurrences.
  std::unordered_map<std::string, int64_t>& counts() { return counts_; }

 private:
  PreTokenizer pre_;
  AddedTokenMatcher specials_;
  PreTokenizeScratch scratch_;
  std::vector<Segment> segments_;
  std::unordered_map<std::string, int64_t> counts_;
};

/// The trained tokenizer. Deterministic for given counts and options: the pair merged
/// next is the most frequent one, ties going to the pair whose left token has the lower
/// id, then whose right token has the lower id. A merge whose bytes already exist as a
/// token (two pairs spelling one string) reuses that token's id. `progress(merges_done,
/// merges_wanted)` is called now and then. Throws strata::ConfigError for a vocab_size
/// below special tokens + 256 or an unknown pattern.
TokenizerSpec train_bpe(PreTokenCounter& counter, const BpeTrainerOptions& options,
                        const std::function<void(int64_t, int64_t)>& progress = {});

/// The pre-tokenizer steps of a pattern name ("gpt2", "llama3"); ConfigError otherwise.
std::vector<PreTokenizeStep> trainer_pre_tokenizer(const std::string& pattern);

}  // namespace strata::data
