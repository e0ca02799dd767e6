// Merge table and the priority-queue merge loop of BpeModel.
#include <strata/data/bpe_model.h>

#include <algorithm>
#include <bit>

namespace strata::data {
namespace {

uint64_t pair_key(uint32_t l, uint32_t r) { return ((uint64_t(l) << 32) | r) + 1; }

// splitmix64's finaliser: pair keys are two small ids, which identity hashing would
// pile into a few buckets.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Min-heap order of `tokenizers`' Merge: lower rank first, then the leftmost position.
struct Later {
  bool operator()(const BpeScratch::QueueEntry& a, const BpeScratch::QueueEntry& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

BpeModel::BpeModel(std::vector<std::string> vocab, const std::vector<bool>& matchable, std::vector<Merge> merges,
                   bool ignore_merges, std::optional<uint32_t> unk_id)
    : vocab_(std::move(vocab)), merge_list_(std::move(merges)), ignore_merges_(ignore_merges), unk_id_(unk_id) {
  ids_.reserve(vocab_.size());
  byte_id_.fill(-1);
  for (uint32_t i = 0; i < vocab_.size(); ++i) {
    if (!matchable[i]) continue;
    ids_.emplace(std::string_view(vocab_[i]), i);
    if (vocab_[i].size() == 1) byte_id_[uint8_t(vocab_[i][0])] = i;
  }
  const size_t cap = std::bit_ceil(std::max<size_t>(16, merge_list_.size() * 2));
  table_.assign(cap, MergeSlot{0, 0, 0});
  mask_ = cap - 1;
  for (uint32_t rank = 0; rank < merge_list_.size(); ++rank) {
    const Merge& m = merge_list_[rank];
    const uint64_t key = pair_key(m.left, m.right);
    uint64_t h = mix(key) & mask_;
    while (table_[h].key != 0 && table_[h].key != key) h = (h + 1) & mask_;
    table_[h] = {key, rank, m.result};  // a later duplicate overwrites: the later rank wins
  }
}

std::optional<uint32_t> BpeModel::id_of(std::string_view bytes) const {
  const auto it = ids_.find(bytes);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const BpeModel::MergeSlot* BpeModel::find_merge(uint32_t left, uint32_t right) const {
  const uint64_t key = pair_key(left, right);
  uint64_t h = mix(key) & mask_;
  while (true) {
    const MergeSlot& s = table_[h];
    if (s.key == key) return &s;
    if (s.key == 0) return nullptr;
    h = (h + 1) & mask_;
  }
}

void BpeModel::tokenize(std::string_view bytes, std::vector<uint32_t>& out, BpeScratch& s) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    if (const auto id = id_of(bytes)) {
      out.push_back(*id);
      return;
    }
  }
  // Symbols: one per byte found in the vocabulary; a missing byte becomes unk_token
  // (consecutive ones stay separate: fuse_unk is refused at load) or, without one, is
  // dropped, as `tokenizers` does.
  auto& sym = s.symbols;
  sym.clear();
  for (char c : bytes) {
    const int64_t id = byte_id_[uint8_t(c)];
    if (id < 0 && !unk_id_) continue;
    const int32_t k = int32_t(sym.size());
    sym.push_back({id >= 0 ? uint32_t(id) : *unk_id_, k - 1, k + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  if (sym.size() == 1) {
    out.push_back(sym[0].id);
    return;
  }
  auto& q = s.queue;
  q.clear();
  for (uint32_t i = 0; i + 1 < sym.size(); ++i)
    if (const MergeSlot* m = find_merge(sym[i].id, sym[i + 1].id)) q.push_back({m->rank, i, m->new_id});
  std::make_heap(q.begin(), q.end(), Later{});
  while (!q.empty()) {
    std::pop_heap(q.begin(), q.end(), Later{});
    const BpeScratch::QueueEntry top = q.back();
    q.pop_back();
    BpeScratch::Symbol& cur = sym[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const BpeScratch::Symbol right = sym[size_t(cur.next)];
    // A stale entry: one of the two symbols changed since it was queued.
    const MergeSlot* now = find_merge(cur.id, right.id);
    if (!now || now->new_id != top.new_id) continue;
    cur.id = top.new_id;
    sym[size_t(cur.next)].alive = false;
    cur.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = int32_t(top.pos);
    if (cur.prev >= 0)
      if (const MergeSlot* m = find_merge(sym[size_t(cur.prev)].id, cur.id)) {
        q.push_back({m->rank, uint32_t(cur.prev), m->new_id});
        std::push_heap(q.begin(), q.end(), Later{});
      }
    if (cur.next >= 0)
      if (const MergeSlot* m = find_merge(cur.id, sym[size_t(cur.next)].id)) {
        q.push_back({m->rank, top.pos, m->new_id});
        std::push_heap(q.begin(), q.end(), Later{});
      }
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

}  // namespace strata::data
