// Field-by-field reading of tokenizer.json with an error that names the field for every
// value strata would otherwise have to guess about, and the writer for trained tokenizers.
#include <strata/data/tokenizer_json.h>

#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <strata/core/error.h>
#include <strata/core/json_limits.h>
#include <strata/data/byte_level.h>
#include <strata/data/regular_file.h>

namespace strata::data {
namespace {

using json = nlohmann::json;

struct Reader {
  std::string where;
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    STRATA_THROW(DataError, "[tokenizer] ", where, ": ", field, ": ", what);
  }
  const json& need(const json& obj, const std::string& field, const char* key) const {
    if (!obj.is_object() || !obj.contains(key)) fail(field + "." + key, "missing");
    return obj.at(key);
  }
  std::string str(const json& v, const std::string& field) const {
    if (!v.is_string()) fail(field, "expected a string, got " + json_brief(v));
    return v.get<std::string>();
  }
  bool flag(const json& obj, const std::string& field, const char* key, bool def) const {
    if (!obj.contains(key) || obj.at(key).is_null()) return def;
    if (!obj.at(key).is_boolean()) fail(field + "." + key, "expected true or false, got " + json_brief(obj.at(key)));
    return obj.at(key).get<bool>();
  }
  uint32_t id(const json& v, const std::string& field) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > 0x7FFFFFFF)
      fail(field, "expected a token id (an integer from 0 to 2^31-1), got " + json_brief(v));
    return uint32_t(v.get<uint64_t>());
  }
  std::string type(const json& obj, const std::string& field) const {
    if (!obj.is_object()) fail(field, "expected an object, got " + json_brief(obj));
    return str(need(obj, field, "type"), field + ".type");
  }
};

PreTokenizeStep byte_level_step(const Reader& r, const json& p, const std::string& field) {
  PreTokenizeStep s;
  s.kind = PreTokenizeStep::Kind::byte_level;
  s.add_prefix_space = r.flag(p, field, "add_prefix_space", true);
  if (r.flag(p, field, "use_regex", true)) s.regex = std::make_shared<UnicodeRegex>(kGpt2Pattern, field);
  return s;
}

PreTokenizeStep split_step(const Reader& r, const json& p, const std::string& field) {
  PreTokenizeStep s;
  const json& pat = r.need(p, field, "pattern");
  if (pat.is_object() && pat.contains("Regex")) {
    s.regex = std::make_shared<UnicodeRegex>(r.str(pat["Regex"], field + ".pattern.Regex"),
                                             "[tokenizer] " + r.where + ": " + field + ".pattern.Regex");
  } else if (pat.is_object() && pat.contains("String")) {
    const std::string lit = r.str(pat["String"], field + ".pattern.String");
    if (lit.empty()) r.fail(field + ".pattern.String", "is empty");
    s.regex = std::make_shared<UnicodeRegex>(lit, "[tokenizer] " + r.where + ": " + field + ".pattern.String", true);
  } else {
    r.fail(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}, got " + json_brief(pat));
  }
  const std::string b = r.str(r.need(p, field, "behavior"), field + ".behavior");
  static const std::map<std::string, SplitBehavior> kBehaviors = {
      {"Removed", SplitBehavior::removed},
      {"Isolated", SplitBehavior::isolated},
      {"MergedWithPrevious", SplitBehavior::merged_with_previous},
      {"MergedWithNext", SplitBehavior::merged_with_next},
      {"Contiguous", SplitBehavior::contiguous}};
  const auto it = kBehaviors.find(b);
  if (it == kBehaviors.end())
    r.fail(field + ".behavior", "'" + b + "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
  s.behavior = it->second;
  s.invert = r.flag(p, field, "invert", false);
  return s;
}

std::vector<PreTokenizeStep> read_pre_tokenizer(const Reader& r, const json& p) {
  const std::string field = "pre_tokenizer";
  if (p.is_null()) r.fail(field, "is null; a byte-level BPE needs the ByteLevel pre-tokenizer");
  std::vector<PreTokenizeStep> steps;
  const std::string t = r.type(p, field);
  if (t == "ByteLevel") {
    steps.push_back(byte_level_step(r, p, field));
  } else if (t == "Sequence") {
    const json& list = r.need(p, field, "pretokenizers");
    if (!list.is_array()) r.fail(field + ".pretokenizers", "expected a list, got " + json_brief(list));
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string f = field + ".pretokenizers[" + std::to_string(i) + "]";
      const std::string ti = r.type(list[i], f);
      if (ti == "Split")
        steps.push_back(split_step(r, list[i], f));
      else if (ti == "ByteLevel")
        steps.push_back(byte_level_step(r, list[i], f));
      else
        r.fail(f + ".type", "'" + ti + "' is not supported (Split and ByteLevel are)");
    }
  } else {
    r.fail(field + ".type", "'" + t + "' is not supported (ByteLevel, or a Sequence of Split and ByteLevel)");
  }
  if (steps.empty() || steps.back().kind != PreTokenizeStep::Kind::byte_level)
    r.fail(field, "the last step must be ByteLevel: strata's BPE runs over the byte-level alphabet");
  for (size_t i = 0; i + 1 < steps.size(); ++i)
    if (steps[i].kind == PreTokenizeStep::Kind::byte_level)
      r.fail(field, "ByteLevel must be the last step (it maps the text to its alphabet)");
  return steps;
}

// The ids `tokenizers` gives added tokens on loading: a token of the model's vocabulary
// keeps its id; any other takes the next id after the model's vocabulary and the added
// tokens before it. A file whose ids disagree would encode differently in `tokenizers`.
void read_added_tokens(const Reader& r, const json& list, TokenizerSpec& spec) {
  if (list.is_null()) return;
  if (!list.is_array()) r.fail("added_tokens", "expected a list, got " + json_brief(list));
  const uint32_t model_size = uint32_t(spec.vocab.size());
  std::optional<uint32_t> max_added;
  std::unordered_map<std::string, uint32_t> seen, by_text;
  by_text.reserve(spec.vocab_text.size());
  for (uint32_t i = 0; i < spec.vocab_text.size(); ++i) by_text.emplace(spec.vocab_text[i], i);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string f = "added_tokens[" + std::to_string(i) + "]";
    const json& t = list[i];
    if (!t.is_object()) r.fail(f, "expected an object, got " + json_brief(t));
    AddedToken a;
    a.id = r.id(r.need(t, f, "id"), f + ".id");
    a.content = r.str(r.need(t, f, "content"), f + ".content");
    if (a.content.empty()) r.fail(f + ".content", "is empty");
    a.single_word = r.flag(t, f, "single_word", false);
    a.lstrip = r.flag(t, f, "lstrip", false);
    a.rstrip = r.flag(t, f, "rstrip", false);
    a.special = r.flag(t, f, "special", false);
    a.normalized = r.flag(t, f, "normalized", !a.special);
    if (seen.count(a.content)) r.fail(f + ".content", "'" + a.content + "' is listed twice");
    seen[a.content] = a.id;
    std::optional<uint32_t> in_model;
    if (const auto it = by_text.find(a.content); it != by_text.end()) in_model = it->second;
    const uint32_t expect = in_model                                                 ? *in_model
                            : !max_added                                             ? model_size
                            : (*max_added >= model_size || model_size == 0) ? *max_added + 1
                                                                                     : model_size;
    max_added = std::max(max_added.value_or(0), expect);
    if (a.id != expect)
      r.fail(f + ".id", "'" + a.content + "' has id " + std::to_string(a.id) + " but `tokenizers` gives it " +
                            std::to_string(expect) +
                            (in_model ? " (its id in model.vocab)" : " (the next id after model.vocab and the added tokens before it)"));
    for (size_t k = 0; k < spec.added_tokens.size(); ++k)
      if (spec.added_tokens[k].id == a.id) r.fail(f + ".id", "duplicate id " + std::to_string(a.id));
    spec.added_tokens.push_back(std::move(a));
  }
}

void read_model(const Reader& r, const json& m, TokenizerSpec& spec) {
  if (m.is_null()) r.fail("model", "missing");
  const std::string t = r.type(m, "model");
  if (t != "BPE") r.fail("model.type", "'" + t + "' is not supported (only BPE)");
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
    r.fail("model.dropout", "BPE dropout makes encoding random; only null is supported");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
      r.fail(std::string("model.") + k, "is set; byte-level BPE tokenizers do not use it");
  if (r.flag(m, "model", "byte_fallback", false)) r.fail("model.byte_fallback", "true is not supported");
  if (r.flag(m, "model", "fuse_unk", false)) r.fail("model.fuse_unk", "true is not supported");
  spec.ignore_merges = r.flag(m, "model", "ignore_merges", false);

  const json& vocab = r.need(m, "model", "vocab");
  if (!vocab.is_object()) r.fail("model.vocab", "expected an object {token: id}, got " + json_brief(vocab));
  const size_t n = vocab.size();
  spec.vocab.assign(n, {});
  spec.vocab_text.assign(n, {});
  spec.matchable.assign(n, false);
  std::vector<bool> have(n, false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const uint32_t id = r.id(it.value(), "model.vocab[\"" + it.key() + "\"]");
    if (id >= n)
      r.fail("model.vocab", "token '" + it.key() + "' has id " + std::to_string(id) + " but the vocabulary holds " +
                                std::to_string(n) + " tokens; strata needs ids 0.." + std::to_string(n - 1));
    if (have[id])
      r.fail("model.vocab", "duplicate id " + std::to_string(id) + " ('" + spec.vocab_text[id] + "' and '" + it.key() + "')");
    have[id] = true;
    spec.vocab_text[id] = it.key();
    std::string bytes;
    spec.matchable[id] = byte_level::decode(it.key(), bytes);
    spec.vocab[id] = spec.matchable[id] ? std::move(bytes) : it.key();
  }
  std::unordered_map<std::string, uint32_t> by_text;
  by_text.reserve(n);
  for (uint32_t i = 0; i < n; ++i) by_text.emplace(spec.vocab_text[i], i);

  if (m.contains("unk_token") && !m["unk_token"].is_null()) {
    const std::string u = r.str(m["unk_token"], "model.unk_token");
    const auto it = by_text.find(u);
    if (it == by_text.end()) r.fail("model.unk_token", "'" + u + "' is not in model.vocab");
    spec.unk_id = it->second;
  }

  const json& merges = r.need(m, "model", "merges");
  if (!merges.is_array()) r.fail("model.merges", "expected a list, got " + json_brief(merges));
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string f = "model.merges[" + std::to_string(i) + "]";
    const json& e = merges[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.fail(f, "'" + s + "' is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      r.fail(f, "expected \"left right\" or [\"left\", \"right\"], got " + json_brief(e));
    }
    const auto ia = by_text.find(a), ib = by_text.find(b), iab = by_text.find(a + b);
    if (ia == by_text.end()) r.fail(f, "token '" + a + "' is not in model.vocab");
    if (ib == by_text.end()) r.fail(f, "token '" + b + "' is not in model.vocab");
    if (iab == by_text.end()) r.fail(f, "the merged token '" + a + b + "' is not in model.vocab");
    spec.merges.push_back({ia->second, ib->second, iab->second});
  }
}

std::vector<TemplateItem> read_template(const Reader& r, const json& p, const std::string& field) {
  const json& single = r.need(p, field, "single");
  if (!single.is_array()) r.fail(field + ".single", "expected a list, got " + json_brief(single));
  const json& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
  std::vector<TemplateItem> items;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string f = field + ".single[" + std::to_string(i) + "]";
    const json& e = single[i];
    TemplateItem item;
    if (e.is_object() && e.contains("Sequence")) {
      const std::string which = r.str(r.need(e["Sequence"], f + ".Sequence", "id"), f + ".Sequence.id");
      if (which != "A") r.fail(f + ".Sequence.id", "a single template holds sequence A, got '" + which + "'");
      item.is_sequence = true;
    } else if (e.is_object() && e.contains("SpecialToken")) {
      const std::string name = r.str(r.need(e["SpecialToken"], f + ".SpecialToken", "id"), f + ".SpecialToken.id");
      if (!specials.is_object() || !specials.contains(name))
        r.fail(f + ".SpecialToken.id", "'" + name + "' is not in " + field + ".special_tokens");
      const json& ids = r.need(specials[name], field + ".special_tokens." + name, "ids");
      if (!ids.is_array()) r.fail(field + ".special_tokens." + name + ".ids", "expected a list");
      for (size_t k = 0; k < ids.size(); ++k)
        item.ids.push_back(r.id(ids[k], field + ".special_tokens." + name + ".ids[" + std::to_string(k) + "]"));
    } else {
      r.fail(f, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + json_brief(e));
    }
    items.push_back(std::move(item));
  }
  return items;
}

void read_post_processor(const Reader& r, const json& p, TokenizerSpec& spec) {
  if (p.is_null()) return;
  const std::string t = r.type(p, "post_processor");
  if (t == "ByteLevel") return;  // offsets only
  if (t == "TemplateProcessing") {
    spec.single_template = read_template(r, p, "post_processor");
    return;
  }
  if (t == "Sequence") {
    const json& list = r.need(p, "post_processor", "processors");
    if (!list.is_array()) r.fail("post_processor.processors", "expected a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string f = "post_processor.processors[" + std::to_string(i) + "]";
      const std::string ti = r.type(list[i], f);
      if (ti == "TemplateProcessing")
        spec.single_template = read_template(r, list[i], f);
      else if (ti != "ByteLevel")
        r.fail(f + ".type", "'" + ti + "' is not supported (ByteLevel and TemplateProcessing are)");
    }
    return;
  }
  r.fail("post_processor.type", "'" + t + "' is not supported (ByteLevel, TemplateProcessing, or a Sequence of them)");
}

}  // namespace

std::shared_ptr<const Tokenizer> parse_tokenizer_json(const std::string& text, const std::string& where) {
  const Reader r{where};
  const json j = parse_json_file_text(text, "[tokenizer] " + where);
  if (!j.is_object()) r.fail("(top level)", "expected an object, got " + json_brief(j));
  TokenizerSpec spec;
  if (!j.contains("model")) r.fail("model", "missing");
  read_model(r, j["model"], spec);
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    r.fail("normalizer", "'" + (j["normalizer"].is_object() && j["normalizer"].contains("type")
                                     ? json_brief(j["normalizer"]["type"])
                                     : json_brief(j["normalizer"])) +
                             "' is not supported (byte-level BPE tokenizers have none)");
  spec.pre_tokenizer = read_pre_tokenizer(r, j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json());
  const json dec = j.contains("decoder") ? j["decoder"] : json();
  if (dec.is_null() || r.type(dec, "decoder") != "ByteLevel")
    r.fail("decoder", "expected the ByteLevel decoder, got " + (dec.is_null() ? std::string("null") : json_brief(dec["type"])));
  if (j.contains("added_tokens")) read_added_tokens(r, j["added_tokens"], spec);
  read_post_processor(r, j.contains("post_processor") ? j["post_processor"] : json(), spec);
  for (const char* k : {"truncation", "padding"})
    if (j.contains(k) && !j[k].is_null()) r.fail(k, "is set; strata encodes without truncation or padding");
  return std::make_shared<const Tokenizer>(std::move(spec));
}

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path) {
  const uint64_t size = regular_file_size(path, "tokenizer");  // before open(): a FIFO would block
  std::ifstream in(path, std::ios::binary);
  if (!in) STRATA_THROW(DataError, "[tokenizer] cannot open ", path);
  std::string text(size_t(size), '\0');
  in.read(text.data(), std::streamsize(size));
  if (size_t(in.gcount()) != size) STRATA_THROW(DataError, "[tokenizer] ", path, ": read ", in.gcount(), " of ", size, " bytes");
  return parse_tokenizer_json(text, path);
}

std::string tokenizer_json_text(const TokenizerSpec& spec) {
  using ojson = nlohmann::ordered_json;
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  ojson added = ojson::array();
  for (const AddedToken& a : spec.added_tokens)
    added.push_back({{"id", a.id}, {"content", a.content}, {"single_word", a.single_word}, {"lstrip", a.lstrip},
                     {"rstrip", a.rstrip}, {"normalized", a.normalized}, {"special", a.special}});
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  auto byte_level = [](bool use_regex, bool add_prefix_space) {
    return ojson{{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true},
                 {"use_regex", use_regex}};
  };
  const auto& steps = spec.pre_tokenizer;
  if (steps.size() == 1) {
    j["pre_tokenizer"] = byte_level(bool(steps[0].regex), steps[0].add_prefix_space);
  } else {
    ojson list = ojson::array();
    for (const PreTokenizeStep& s : steps) {
      if (s.kind == PreTokenizeStep::Kind::byte_level) {
        list.push_back(byte_level(bool(s.regex), s.add_prefix_space));
        continue;
      }
      static const char* kNames[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
      list.push_back({{"type", "Split"},
                      {"pattern", {{"Regex", s.regex->pattern()}}},
                      {"behavior", kNames[int(s.behavior)]},
                      {"invert", s.invert}});
    }
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", list}};
  }
  if (spec.single_template.empty()) {
    j["post_processor"] = byte_level(true, true);
    j["post_processor"]["trim_offsets"] = false;
  } else {
    ojson single = ojson::array(), pair = ojson::array(), specials = ojson::object();
    for (const TemplateItem& t : spec.single_template) {
      if (t.is_sequence) {
        single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
        continue;
      }
      // Template tokens are written by name, and each is one added token.
      const AddedToken* a = nullptr;
      for (const AddedToken& x : spec.added_tokens)
        if (t.ids.size() == 1 && x.id == t.ids[0]) a = &x;
      STRATA_CHECK(a, "[tokenizer] a template token must be one added token");
      single.push_back({{"SpecialToken", {{"id", a->content}, {"type_id", 0}}}});
      specials[a->content] = {{"id", a->content}, {"ids", {a->id}}, {"tokens", {a->content}}};
    }
    pair = single;
    for (const TemplateItem& t : spec.single_template)
      if (t.is_sequence) pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
    j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
  }
  j["decoder"] = byte_level(true, true);
  ojson vocab = ojson::object();
  for (size_t i = 0; i < spec.vocab_text.size(); ++i) vocab[spec.vocab_text[i]] = i;
  ojson merges = ojson::array();
  for (const BpeModel::Merge& m : spec.merges) merges.push_back({spec.vocab_text[m.left], spec.vocab_text[m.right]});
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", spec.ignore_merges},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(2, ' ', false) + "\n";
}

}  // namespace strata::data
