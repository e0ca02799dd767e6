// Pair counting with incremental updates: each merge revisits only the words that hold
// the pair (an index pair -> words), and a max-heap with lazy deletion finds the next
// most frequent pair.
#include <strata/data/bpe_trainer.h>

#include <algorithm>
#include <queue>
#include <unordered_map>

#include <strata/core/error.h>
#include <strata/data/byte_level.h>
#include <strata/data/utf8.h>

namespace strata::data {
namespace {

uint64_t pair_of(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

struct Word {
  std::vector<uint32_t> sym;
  int64_t count;
};

struct HeapEntry {
  int64_t count;
  uint64_t pair;
  bool operator<(const HeapEntry& o) const {  // std::priority_queue pops the largest
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

}  // namespace

std::vector<PreTokenizeStep> trainer_pre_tokenizer(const std::string& pattern) {
  PreTokenizeStep bl;
  bl.kind = PreTokenizeStep::Kind::byte_level;
  if (pattern == "gpt2") {
    bl.regex = std::make_shared<UnicodeRegex>(kGpt2Pattern, "gpt2 pattern");
    return {bl};
  }
  if (pattern == "llama3") {
    PreTokenizeStep split;
    split.regex = std::make_shared<UnicodeRegex>(kLlama3Pattern, "llama3 pattern");
    split.behavior = SplitBehavior::isolated;
    return {split, bl};
  }
  STRATA_THROW(ConfigError, "--pattern: '", pattern, "' is not gpt2 or llama3");
}

PreTokenCounter::PreTokenCounter(const BpeTrainerOptions& o) : pre_(trainer_pre_tokenizer(o.pattern)) {
  std::vector<AddedToken> specials;
  std::vector<size_t> which;
  for (size_t k = 0; k < o.special_tokens.size(); ++k) {
    specials.push_back({.id = uint32_t(k), .content = o.special_tokens[k], .special = true});
    which.push_back(k);
  }
  specials_ = AddedTokenMatcher(specials, which);
}

void PreTokenCounter::add(std::string_view text, bool continues) {
  const std::string replaced = utf8::is_valid(text) ? std::string() : utf8::replace_invalid(text);
  const std::string_view t = replaced.empty() ? text : std::string_view(replaced);
  segments_.clear();
  specials_.find(t, 0, t.size(), segments_);
  for (const Segment& s : segments_) {
    if (s.token >= 0) continue;
    pre_.run(t.substr(s.begin, s.end - s.begin), scratch_, continues && s.begin == 0);
    for (const Piece& p : scratch_.pieces) ++counts_[scratch_.text.substr(p.begin, p.end - p.begin)];
  }
}

TokenizerSpec train_bpe(PreTokenCounter& counter, const BpeTrainerOptions& o,
                        const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t k = int64_t(o.special_tokens.size());
  if (o.vocab_size < k + 256)
    STRATA_THROW(ConfigError, "--vocab-size: ", o.vocab_size, " is below the ", k, " special tokens + 256 bytes");
  if (!o.bos.empty() && std::find(o.special_tokens.begin(), o.special_tokens.end(), o.bos) == o.special_tokens.end())
    STRATA_THROW(ConfigError, "--bos: '", o.bos, "' is not one of the --special tokens");
  TokenizerSpec spec;
  spec.pre_tokenizer = counter.steps();
  std::unordered_map<std::string, uint32_t> id_of;  // ordinary tokens only
  auto add_token = [&](std::string bytes, std::string text) {
    const uint32_t id = uint32_t(spec.vocab.size());
    spec.vocab.push_back(std::move(bytes));
    spec.vocab_text.push_back(std::move(text));
    spec.matchable.push_back(true);
    return id;
  };
  for (int64_t i = 0; i < k; ++i) {
    const std::string& s = o.special_tokens[size_t(i)];
    std::string bytes;
    const bool ok = byte_level::decode(s, bytes);
    add_token(ok ? bytes : s, s);
    spec.matchable.back() = ok;
    spec.added_tokens.push_back({.id = uint32_t(i), .content = s, .normalized = false, .special = true});
    if (s == o.bos) spec.single_template = {{.is_sequence = false, .ids = {uint32_t(i)}}, {.is_sequence = true}};
  }
  // The 256 bytes in the order of the code points that stand for them, as `tokenizers`
  // orders the alphabet.
  std::vector<int> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[size_t(b)] = b;
  std::sort(bytes.begin(), bytes.end(),
            [](int a, int b) { return byte_level::byte_to_code_point(uint8_t(a)) < byte_level::byte_to_code_point(uint8_t(b)); });
  std::array<uint32_t, 256> byte_id{};
  for (int b : bytes) {
    byte_id[size_t(b)] = add_token(std::string(1, char(b)), byte_level::byte_to_text(uint8_t(b)));
    id_of.emplace(std::string(1, char(b)), byte_id[size_t(b)]);
  }

  // Words in a fixed order (by bytes), so ties and ids do not depend on hash order.
  std::vector<std::pair<std::string, int64_t>> sorted(counter.counts().begin(), counter.counts().end());
  counter.counts().clear();
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (auto& [w, c] : sorted) {
    Word word{{}, c};
    for (char ch : w) word.sym.push_back(byte_id[uint8_t(ch)]);
    words.push_back(std::move(word));
  }
  sorted.clear();
  sorted.shrink_to_fit();

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;
  for (uint32_t wi = 0; wi < words.size(); ++wi) {
    const Word& w = words[wi];
    for (size_t i = 0; i + 1 < w.sym.size(); ++i) {
      const uint64_t p = pair_of(w.sym[i], w.sym[i + 1]);
      pair_count[p] += w.count;
      auto& list = where[p];
      if (list.empty() || list.back() != wi) list.push_back(wi);
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [p, c] : pair_count) heap.push({c, p});

  const int64_t wanted = o.vocab_size - int64_t(spec.vocab.size());
  std::vector<uint32_t> visited(words.size(), UINT32_MAX);
  std::vector<uint64_t> touched;
  std::vector<uint32_t> merged;
  int64_t done = 0;
  while (int64_t(spec.vocab.size()) < o.vocab_size && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const auto it = pair_count.find(top.pair);
    const int64_t now = it == pair_count.end() ? 0 : it->second;
    if (now != top.count) {  // stale: requeue with the current count
      if (now > 0) heap.push({now, top.pair});
      continue;
    }
    if (now < o.min_frequency) break;
    const uint32_t a = uint32_t(top.pair >> 32), b = uint32_t(top.pair);
    std::string bytes = spec.vocab[a] + spec.vocab[b];
    uint32_t id;
    if (const auto found = id_of.find(bytes); found != id_of.end()) {
      id = found->second;
    } else {
      std::string text = spec.vocab_text[a] + spec.vocab_text[b];
      id = add_token(bytes, std::move(text));
      id_of.emplace(std::move(bytes), id);
    }
    spec.merges.push_back({a, b, id});
    const uint32_t merge_no = uint32_t(spec.merges.size());
    touched.clear();
    std::vector<uint32_t> list = std::move(where[top.pair]);
    where.erase(top.pair);
    for (uint32_t wi : list) {
      if (visited[wi] == merge_no) continue;
      visited[wi] = merge_no;
      Word& w = words[wi];
      bool has = false;
      for (size_t i = 0; i + 1 < w.sym.size() && !has; ++i) has = w.sym[i] == a && w.sym[i + 1] == b;
      if (!has) continue;  // a stale index entry
      for (size_t i = 0; i + 1 < w.sym.size(); ++i) {
        const uint64_t p = pair_of(w.sym[i], w.sym[i + 1]);
        pair_count[p] -= w.count;
        touched.push_back(p);
      }
      merged.clear();
      for (size_t i = 0; i < w.sym.size(); ++i) {
        if (i + 1 < w.sym.size() && w.sym[i] == a && w.sym[i + 1] == b) {
          merged.push_back(id);
          ++i;
        } else {
          merged.push_back(w.sym[i]);
        }
      }
      w.sym.assign(merged.begin(), merged.end());
      for (size_t i = 0; i + 1 < w.sym.size(); ++i) {
        const uint64_t p = pair_of(w.sym[i], w.sym[i + 1]);
        pair_count[p] += w.count;
        touched.push_back(p);
        if (w.sym[i] == id || w.sym[i + 1] == id) {
          auto& l = where[p];
          if (l.empty() || l.back() != wi) l.push_back(wi);
        }
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t p : touched) {
      const auto pc = pair_count.find(p);
      if (pc == pair_count.end()) continue;
      if (pc->second <= 0) {
        pair_count.erase(pc);
        continue;
      }
      heap.push({pc->second, p});
    }
    ++done;
    if (progress && (done % 64 == 0)) progress(done, wanted);
  }
  if (progress) progress(done, wanted);
  return spec;
}

}  // namespace strata::data
