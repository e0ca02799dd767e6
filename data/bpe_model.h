// The BPE model of byte-level tokenizers: a vocabulary of byte strings and ranked merges,
// applied to one pre-token at a time the way `tokenizers` applies them
// (tokenizers/src/models/bpe/word.rs): the lowest-ranked adjacent pair is merged first,
// the leftmost one among equal ranks, through a priority queue, so a pre-token of n bytes
// costs O(n log n) even when it is a megabyte of spaces.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::data {

/// Reusable buffers of one BPE application (no allocation once warm).
struct BpeScratch {
  struct Symbol {
    uint32_t id;
    int32_t prev, next;
    bool alive;
  };
  struct QueueEntry {
    uint32_t rank, pos, new_id;
  };
  std::vector<Symbol> symbols;
  std::vector<QueueEntry> queue;
};

/// Vocabulary and merges. Tokens are held as raw bytes (the byte-level alphabet decoded),
/// so model-side strings are what the tokenizer emits. Immutable after construction;
/// const methods may run concurrently.
class BpeModel {
 public:
  struct Merge {
    uint32_t left, right, result;
  };
  /// `vocab[i]` is token i's bytes (ids are dense: 0..n-1); tokens whose `matchable[i]`
  /// is false (text outside the byte-level alphabet) decode to their bytes but are never
  /// looked up by bytes. `merges` are in rank order; a later duplicate pair takes the
  /// later rank, as in `tokenizers`. The caller has checked every id.
  BpeModel(std::vector<std::string> vocab, const std::vector<bool>& matchable, std::vector<Merge> merges,
           bool ignore_merges, std::optional<uint32_t> unk_id);

  size_t size() const { return vocab_.size(); }
  const std::string& token(uint32_t id) const { return vocab_[id]; }
  std::optional<uint32_t> id_of(std::string_view bytes) const;
  bool ignore_merges() const { return ignore_merges_; }
  std::optional<uint32_t> unk_id() const { return unk_id_; }
  /// Merges in rank order (as given, duplicates kept).
  const std::vector<Merge>& merges() const { return merge_list_; }

  /// Appends the ids of pre-token `bytes` to `out`.
  void tokenize(std::string_view bytes, std::vector<uint32_t>& out, BpeScratch& s) const;

 private:
  struct MergeSlot {
    uint64_t key;  // (left << 32 | right) + 1; 0 = empty
    uint32_t rank, new_id;
  };
  const MergeSlot* find_merge(uint32_t left, uint32_t right) const;

  std::vector<std::string> vocab_;
  std::unordered_map<std::string_view, uint32_t> ids_;  // views into vocab_
  std::vector<Merge> merge_list_;
  std::vector<MergeSlot> table_;  // open addressing, power-of-two size, linear probing
  uint64_t mask_ = 0;
  std::array<int64_t, 256> byte_id_{};  // id of each single byte, -1 if not in the vocabulary
  bool ignore_merges_ = false;
  std::optional<uint32_t> unk_id_;
};

}  // namespace strata::data
