// Encode and decode of Tokenizer, and the per-thread scratch (pre-token cache and buffers).
#include <strata/data/tokenizer.h>

#include <atomic>
#include <functional>

#include <strata/data/byte_level.h>
#include <strata/data/utf8.h>

namespace strata::data {
namespace {

std::atomic<uint64_t> next_instance{1};

// Pre-token -> ids, open addressing over an arena of keys and ids. Like `tokenizers`'
// BPE cache it holds only short pre-tokens; when half full it is emptied, which keeps a
// long stream's memory bounded while the frequent pre-tokens come straight back.
class PieceCache {
 public:
  static constexpr size_t kMaxKey = 256;
  static constexpr size_t kSlots = size_t(1) << 18;  // 6 MiB of slots per thread; 128k pre-tokens

  PieceCache() : slots_(kSlots) {}

  // ids of `key` appended to out; false when absent.
  bool get(std::string_view key, uint64_t h, std::vector<uint32_t>& out) const {
    for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& s = slots_[i];
      if (s.key_len == 0) return false;
      if (s.hash == h && s.key_len == key.size() && keys_.compare(s.key_off, s.key_len, key) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
        return true;
      }
    }
  }
  void put(std::string_view key, uint64_t h, std::span<const uint32_t> ids) {
    if (used_ * 2 >= kSlots) clear();
    size_t i = h & (kSlots - 1);
    while (slots_[i].key_len != 0) i = (i + 1) & (kSlots - 1);
    slots_[i] = {h, uint32_t(keys_.size()), uint32_t(key.size()), uint32_t(ids_.size()), uint32_t(ids.size())};
    keys_.append(key);
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    ++used_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
  };
  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<uint32_t> ids_;
  size_t used_ = 0;
};

}  // namespace

struct Tokenizer::Scratch {
  PreTokenizeScratch pre;
  BpeScratch bpe;
  PieceCache cache;
  std::vector<Segment> raw, normalized;
  std::vector<uint32_t> piece_ids;
};

Tokenizer::Scratch& Tokenizer::scratch() const {
  // A few tokenizers per thread (a program may hold two); the oldest is dropped beyond that.
  struct Entry {
    uint64_t owner;
    std::unique_ptr<Scratch> s;
  };
  thread_local std::vector<Entry> entries;
  for (auto& e : entries)
    if (e.owner == instance_) return *e.s;
  if (entries.size() >= 4) entries.erase(entries.begin());
  entries.push_back({instance_, std::make_unique<Scratch>()});
  return *entries.back().s;
}

Tokenizer::Tokenizer(TokenizerSpec spec)
    : spec_(std::move(spec)),
      model_(spec_.vocab, spec_.matchable, spec_.merges, spec_.ignore_merges, spec_.unk_id),
      pre_(spec_.pre_tokenizer),
      instance_(next_instance.fetch_add(1)) {
  vocab_size_ = int64_t(model_.size());
  std::vector<AddedToken> raw, norm;
  std::vector<size_t> raw_which, norm_which;
  for (size_t k = 0; k < spec_.added_tokens.size(); ++k) {
    const AddedToken& t = spec_.added_tokens[k];
    vocab_size_ = std::max(vocab_size_, int64_t(t.id) + 1);
    (t.normalized ? norm : raw).push_back(t);
    (t.normalized ? norm_which : raw_which).push_back(k);
    std::string bytes;
    // The ByteLevel decoder maps a token's characters back to bytes when all of them are
    // in the alphabet, and otherwise keeps the token's UTF-8 as it is.
    if (!spec_.byte_level_decoder || !byte_level::decode(t.content, bytes)) bytes = t.content;
    added_bytes_.push_back(std::move(bytes));
  }
  raw_matcher_ = AddedTokenMatcher(raw, raw_which);
  normalized_matcher_ = AddedTokenMatcher(norm, norm_which);
  added_of_id_.assign(size_t(vocab_size_), -1);
  for (size_t k = 0; k < spec_.added_tokens.size(); ++k) added_of_id_[spec_.added_tokens[k].id] = int64_t(k);
}

Tokenizer::~Tokenizer() = default;

std::optional<uint32_t> Tokenizer::token_to_id(const std::string& text) const {
  for (const AddedToken& t : spec_.added_tokens)
    if (t.content == text) return t.id;
  for (uint32_t i = 0; i < spec_.vocab_text.size(); ++i)
    if (spec_.vocab_text[i] == text) return i;
  return std::nullopt;
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<uint32_t>& out, Scratch& s, bool continues) const {
  pre_.run(text, s.pre, continues);
  const std::hash<std::string_view> hasher;
  for (const Piece& p : s.pre.pieces) {
    const std::string_view bytes(s.pre.text.data() + p.begin, p.end - p.begin);
    if (bytes.size() > PieceCache::kMaxKey) {
      model_.tokenize(bytes, out, s.bpe);
      continue;
    }
    const uint64_t h = hasher(bytes) | 1;  // never 0, so hash 0 never matches a live slot by accident
    if (s.cache.get(bytes, h, out)) continue;
    s.piece_ids.clear();
    model_.tokenize(bytes, s.piece_ids, s.bpe);
    s.cache.put(bytes, h, s.piece_ids);
    out.insert(out.end(), s.piece_ids.begin(), s.piece_ids.end());
  }
}

void Tokenizer::encode_valid(std::string_view text, std::vector<uint32_t>& out, Scratch& s, bool continues) const {
  s.raw.clear();
  raw_matcher_.find(text, 0, text.size(), s.raw);
  for (const Segment& r : s.raw) {
    if (r.token >= 0) {
      out.push_back(spec_.added_tokens[size_t(r.token)].id);
      continue;
    }
    s.normalized.clear();
    normalized_matcher_.find(text, r.begin, r.end, s.normalized);
    for (const Segment& n : s.normalized) {
      if (n.token >= 0)
        out.push_back(spec_.added_tokens[size_t(n.token)].id);
      else
        encode_ordinary(text.substr(n.begin, n.end - n.begin), out, s, continues && n.begin == 0);
    }
  }
}

void Tokenizer::encode(std::string_view text, bool add_special_tokens, std::vector<uint32_t>& out,
                       bool continues) const {
  Scratch& s = scratch();
  const bool valid = utf8::is_valid(text);
  std::string replaced;
  if (!valid) replaced = utf8::replace_invalid(text);
  const std::string_view t = valid ? text : std::string_view(replaced);
  if (!add_special_tokens || spec_.single_template.empty()) {
    encode_valid(t, out, s, continues);
    return;
  }
  for (const TemplateItem& item : spec_.single_template) {
    if (item.is_sequence)
      encode_valid(t, out, s, continues);
    else
      out.insert(out.end(), item.ids.begin(), item.ids.end());
  }
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<uint32_t> out;
  encode(text, add_special_tokens, out);
  return out;
}

std::string Tokenizer::decode_bytes(std::span<const uint32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (uint32_t id : ids) {
    const int64_t added = id < added_of_id_.size() ? added_of_id_[id] : -1;
    if (added >= 0) {
      if (skip_special_tokens && spec_.added_tokens[size_t(added)].special) continue;
      bytes += added_bytes_[size_t(added)];
    } else if (id < model_.size()) {
      bytes += model_.token(id);
    }
  }
  return bytes;
}

std::string Tokenizer::decode(std::span<const uint32_t> ids, bool skip_special_tokens) const {
  return utf8::replace_invalid(decode_bytes(ids, skip_special_tokens));
}

}  // namespace strata::data
