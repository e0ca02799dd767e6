// A byte-level BPE tokenizer as Hugging Face `tokenizers` runs one from tokenizer.json
// (GPT-2, Llama 3 and tokenizers trained like them): added tokens cut out first, then
// the pre-tokenizer, then BPE per pre-token (cached), then the template post-processor;
// decoding maps tokens back to bytes and replaces ill-formed UTF-8 with U+FFFD.
// Loading and saving tokenizer.json lives in tokenizer_json.h.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <strata/data/added_tokens.h>
#include <strata/data/bpe_model.h>
#include <strata/data/pretokenize.h>

namespace strata::data {

/// One item of a TemplateProcessing "single" template.
struct TemplateItem {
  bool is_sequence = false;     // $A
  std::vector<uint32_t> ids{};  // a special token's ids
};

/// Everything a tokenizer is made of; tokenizer_json.h fills it from a file, the trainer
/// from a corpus.
struct TokenizerSpec {
  std::vector<std::string> vocab;  // model.vocab as bytes, by id
  std::vector<bool> matchable;     // false: the text was outside the byte-level alphabet
  std::vector<std::string> vocab_text;  // model.vocab as written in the file, by id
  std::vector<BpeModel::Merge> merges;
  bool ignore_merges = false;
  std::optional<uint32_t> unk_id;
  std::vector<PreTokenizeStep> pre_tokenizer;
  std::vector<AddedToken> added_tokens;
  std::vector<TemplateItem> single_template;  // empty: add_special_tokens adds nothing
  bool byte_level_decoder = true;
};

/// Immutable after construction: encode() and decode() may run concurrently from any
/// number of threads. Each thread keeps its own pre-token cache and buffers, so a warm
/// thread encodes without allocating beyond the output.
class Tokenizer {
 public:
  explicit Tokenizer(TokenizerSpec spec);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Appends the ids of `text` to `out`. Bytes that are not UTF-8 are first replaced by
  /// U+FFFD as Python's bytes.decode(errors="replace") does; the ids are then those of
  /// `tokenizers`' Tokenizer.encode(replaced_text, add_special_tokens=...).ids.
  /// `continues`: `text` continues text encoded before it (the next chunk of a file cut
  /// where a pre-token ends), so no prefix space is added at its start.
  void encode(std::string_view text, bool add_special_tokens, std::vector<uint32_t>& out,
              bool continues = false) const;
  std::vector<uint32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  /// The text of `ids` as `tokenizers`' Tokenizer.decode(ids, skip_special_tokens=...):
  /// unknown ids are skipped; bytes that do not form UTF-8 become U+FFFD.
  std::string decode(std::span<const uint32_t> ids, bool skip_special_tokens = true) const;
  /// The bytes of `ids` before the UTF-8 repair (streaming decoders join these).
  std::string decode_bytes(std::span<const uint32_t> ids, bool skip_special_tokens = true) const;

  /// 1 + the largest id of the model and the added tokens: the rows an embedding needs.
  int64_t vocab_size() const { return vocab_size_; }
  const BpeModel& model() const { return model_; }
  const TokenizerSpec& spec() const { return spec_; }
  /// Id of a token given as tokenizer.json text (added tokens first), if any.
  std::optional<uint32_t> token_to_id(const std::string& text) const;

 private:
  struct Scratch;
  Scratch& scratch() const;
  void encode_valid(std::string_view text, std::vector<uint32_t>& out, Scratch& s, bool continues) const;
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out, Scratch& s, bool continues) const;

  TokenizerSpec spec_;
  BpeModel model_;
  PreTokenizer pre_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  std::vector<std::string> added_bytes_;  // decoded content of each added token
  std::vector<int64_t> added_of_id_;      // id -> index into added_tokens, -1
  int64_t vocab_size_ = 0;
  uint64_t instance_;  // keys the per-thread scratch (an address could be reused)
};

}  // namespace strata::data
