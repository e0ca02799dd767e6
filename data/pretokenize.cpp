// Split semantics follow `tokenizers`' NormalizedString::split: the text is cut into
// alternating (gap, match) runs covering it, the behaviour decides what is kept and what
// is glued to what, and empty pieces are dropped.
#include <strata/data/pretokenize.h>

#include <algorithm>

namespace strata::data {
namespace {

using Flagged = PreTokenizeScratch::Flagged;

// Pieces of piece `p` under `behavior`, appended to s.next.
void split_piece(const UnicodeRegex& re, SplitBehavior behavior, bool invert, Piece p, PreTokenizeScratch& s) {
  const std::string_view text(s.text.data() + p.begin, p.end - p.begin);
  if (text.empty()) return;
  s.matches.clear();
  re.find_all(text, s.matches);
  auto& f = s.flagged;
  f.clear();
  uint32_t prev = 0;
  for (const auto& m : s.matches) {
    if (prev != m.begin) f.push_back({{p.begin + prev, p.begin + uint32_t(m.begin)}, invert});
    f.push_back({{p.begin + uint32_t(m.begin), p.begin + uint32_t(m.end)}, !invert});
    prev = uint32_t(m.end);
  }
  if (prev != text.size()) f.push_back({{p.begin + prev, p.end}, invert});

  auto& out = s.merged;
  out.clear();
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const auto& x : f) out.push_back({x.p, false});
      break;
    case SplitBehavior::removed:
      out = f;
      break;
    case SplitBehavior::contiguous: {
      bool previous = false;
      for (const auto& x : f) {
        if (x.is_match == previous && !out.empty())
          out.back().p.end = x.p.end;
        else
          out.push_back({x.p, false});
        previous = x.is_match;
      }
      break;
    }
    case SplitBehavior::merged_with_previous: {
      bool previous = false;
      for (const auto& x : f) {
        if (x.is_match && !previous && !out.empty())
          out.back().p.end = x.p.end;
        else
          out.push_back({x.p, false});
        previous = x.is_match;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      bool previous = false;
      for (size_t k = f.size(); k-- > 0;) {
        const auto& x = f[k];
        if (x.is_match && !previous && !out.empty())
          out.back().p.begin = x.p.begin;
        else
          out.push_back({x.p, false});
        previous = x.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  for (const auto& x : out)
    if (!x.is_match && x.p.end > x.p.begin) s.next.push_back(x.p);
}

}  // namespace

void PreTokenizer::run(std::string_view segment, PreTokenizeScratch& s, bool continues) const {
  s.text.assign(segment);
  s.pieces.clear();
  if (!segment.empty()) s.pieces.push_back({0, uint32_t(segment.size())});
  for (size_t k = 0; k < steps_.size(); ++k) {
    const PreTokenizeStep& step = steps_[k];
    s.next.clear();
    for (Piece p : s.pieces) {
      const bool skip_prefix = continues && k == 0 && p.begin == 0;
      if (step.kind == PreTokenizeStep::Kind::byte_level && step.add_prefix_space && s.text[p.begin] != ' ' &&
          !skip_prefix) {
        // `tokenizers` prepends the space to every non-empty piece that lacks one; the
        // prefixed copy goes behind the text so the offsets of other pieces stay valid.
        const uint32_t at = uint32_t(s.text.size());
        s.text.reserve(s.text.size() + 1 + (p.end - p.begin));  // the append below reads s.text itself
        s.text.push_back(' ');
        s.text.append(s.text, p.begin, p.end - p.begin);
        p = {at, uint32_t(s.text.size())};
      }
      if (step.regex)
        split_piece(*step.regex, step.behavior, step.invert, p, s);
      else
        s.next.push_back(p);
    }
    std::swap(s.pieces, s.next);
  }
}

}  // namespace strata::data
