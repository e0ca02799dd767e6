// ConfigNode: typed reads from a YAML tree with key-path errors, --set overrides and
// the unknown-key check.
#include <strata/core/config.h>

#include <filesystem>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace strata {

struct ConfigNode::Shared {
  std::set<std::string> asked;                   // full key paths ever asked for
  std::map<std::string, std::string> overrides;  // key path -> "--set" text
  std::string source;                            // file name, for messages
  YAML::Node root;                               // the whole tree, for misspelling hints
  std::vector<ConfigKeyRead> reads;              // keys_read(), first-read order
  std::map<std::string, size_t> read_index;      // key path -> index in reads
};

namespace {

std::string join_path(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}

std::string parent_of(const std::string& path) {
  const auto p = path.rfind('.');
  return p == std::string::npos ? std::string() : path.substr(0, p);
}

int mark_line(const YAML::Node& n) {
  if (!n.IsDefined()) return 0;
  const int l = n.Mark().line;
  return l >= 0 ? l + 1 : 0;
}

std::string describe(const YAML::Node& v) {
  switch (v.Type()) {
    case YAML::NodeType::Scalar: return "'" + v.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Null: return "null";
    default: return "nothing";
  }
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Bounds on what a config may be; beyond them the input is hostile or broken, not a config.
constexpr int kMaxDepth = 32;             // mappings/lists nested in each other
constexpr int64_t kMaxNodes = 100000;     // nodes after alias expansion (alias bombs)
constexpr int64_t kMaxFileBytes = 16 << 20;

// True when a name at edit distance `d` from `key` is close enough to suggest for it.
bool close_enough(const std::string& key, size_t d) { return d <= std::max<size_t>(2, key.size() / 3); }

// Walks the parsed tree once before anything reads it: mapping keys must be distinct
// scalars, nesting is capped, and the node count after alias expansion is bounded so a
// "billion laughs" file fails here instead of in an exponential walk later.
void check_tree(const YAML::Node& n, const std::string& path, int depth, int64_t& visited,
                const std::string& source) {
  if (++visited > kMaxNodes)
    STRATA_THROW(ConfigError, source, ": the config expands to more than ", kMaxNodes,
                 " values through anchors and aliases (an alias bomb?); stopped at ", path.empty() ? "the root" : path);
  if (depth > kMaxDepth)
    config_fail(path, "nested more than " + std::to_string(kMaxDepth) + " levels deep", mark_line(n));
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      check_tree(n[i], path + "[" + std::to_string(i) + "]", depth + 1, visited, source);
    return;
  }
  if (!n.IsMap()) return;
  std::map<std::string, int> lines;  // key -> line of its first occurrence
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar())
      config_fail(path.empty() ? source : path, "mapping keys must be plain names, got " + describe(it->first),
                  mark_line(it->first));
    const std::string key = it->first.Scalar();
    const std::string full = join_path(path, key);
    const auto [first, fresh] = lines.emplace(key, mark_line(it->first));
    if (!fresh)
      config_fail(full, "duplicate key (first at line " + std::to_string(first->second) + "); each key may appear once",
                  mark_line(it->first));
    check_tree(it->second, full, depth + 1, visited, source);
  }
}

// Counts document starts through the event API. (YAML::LoadAll cannot be used to find a
// second document: on some malformed input yaml-cpp 0.7 returns empty documents forever.)
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<int> lines;  // 1-based
  void OnDocumentStart(const YAML::Mark& m) override { lines.push_back(m.line + 1); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Line of the second YAML document in `text`, or 0 when there is at most one.
int second_document_line(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  if (!parser.HandleNextDocument(starts) || !parser.HandleNextDocument(starts)) return 0;
  return starts.lines.empty() ? 1 : starts.lines.back();
}

// "expected <what>, got '<scalar>'" with " (out of range)" when the scalar is a number
// of the right kind that does not fit T (2^70 for an int, 1e400 for a double).
template <class T>
std::string out_of_range_note(const YAML::Node& v) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (!v.IsScalar()) return "";
    const std::string& s = v.Scalar();
    if constexpr (std::is_integral_v<T>) {
      const size_t b = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
      const bool digits = s.size() > b && s.find_first_not_of("0123456789", b) == std::string::npos;
      if (digits && !(std::is_unsigned_v<T> && s[0] == '-'))
        return " (out of range [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
               std::to_string(std::numeric_limits<T>::max()) + "])";
    } else {
      char* end = nullptr;
      errno = 0;
      if constexpr (sizeof(T) == sizeof(float)) std::strtof(s.c_str(), &end);
      else std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0' && errno == ERANGE)
        return sizeof(T) == sizeof(float) ? " (out of range for a float)" : " (out of range for a double)";
    }
  }
  return "";
}

// Scalar conversions: false when the value does not have the type.
template <class T>
bool scalar_as(const YAML::Node& v, T* out) {
  if (!v.IsScalar()) return false;
  try {
    *out = v.as<T>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

template <class T> struct TypeName;
template <> struct TypeName<bool> { static constexpr const char* value = "a boolean (true/false)"; };
template <> struct TypeName<int> { static constexpr const char* value = "an integer"; };
template <> struct TypeName<int64_t> { static constexpr const char* value = "an integer"; };
template <> struct TypeName<uint64_t> { static constexpr const char* value = "a non-negative integer"; };
template <> struct TypeName<float> { static constexpr const char* value = "a number"; };
template <> struct TypeName<double> { static constexpr const char* value = "a number"; };
template <> struct TypeName<std::string> { static constexpr const char* value = "a string"; };

template <class T> struct IsVector : std::false_type {};
template <class T> struct IsVector<std::vector<T>> : std::true_type { using Elem = T; };

// The short type names of ConfigKeyRead::type (and of docs/config.md).
template <class T>
std::string short_type_name() {
  if constexpr (IsVector<T>::value) {
    return "list of " + short_type_name<typename IsVector<T>::Elem>() + "s";
  } else if constexpr (std::is_same_v<T, bool>) {
    return "boolean";
  } else if constexpr (std::is_integral_v<T>) {
    return "integer";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "number";
  } else {
    return "string";
  }
}

// A value as a YAML node: numbers in their shortest round-trip form (0.1, not
// 0.10000000000000001), lists in flow style.
template <class T>
YAML::Node value_node(const T& v) {
  if constexpr (IsVector<T>::value) {
    YAML::Node seq(YAML::NodeType::Sequence);
    for (const auto& e : v) seq.push_back(value_node(e));
    seq.SetStyle(YAML::EmitterStyle::Flow);
    return seq;
  } else if constexpr (std::is_same_v<T, bool>) {
    return YAML::Node(v ? "true" : "false");
  } else if constexpr (std::is_arithmetic_v<T>) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return YAML::Node(std::string(buf, r.ptr));
  } else {
    return YAML::Node(v);
  }
}

std::string flow_text(const YAML::Node& n) {
  YAML::Emitter out;
  out << YAML::Flow << n;
  return out.c_str();
}

}  // namespace

void config_fail(const std::string& path, const std::string& msg, int line) {
  if (line > 0) STRATA_THROW(ConfigError, path, ": ", msg, " (line ", line, ")");
  STRATA_THROW(ConfigError, path, ": ", msg);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

void apply_config_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    STRATA_THROW(ConfigError, "--set '", assignment, "': expected key.path=value");
  const std::string key = trim(assignment.substr(0, eq));
  const std::string text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  for (size_t b = 0;;) {
    const auto e = key.find('.', b);
    parts.push_back(key.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (parts.back().empty()) STRATA_THROW(ConfigError, "--set '", assignment, "': empty component in key path");
    if (e == std::string::npos) break;
    b = e + 1;
  }
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::DeepRecursion&) {
    STRATA_THROW(ConfigError, key, ": --set value nests deeper than the YAML parser allows");
  } catch (const YAML::Exception& e) {
    STRATA_THROW(ConfigError, key, ": cannot parse --set value '", text, "': ", e.msg);
  }
  int64_t visited = 0;  // the value's own anchors and aliases: an alias bomb is the --set's, not the file's
  check_tree(value, key, int(std::count(key.begin(), key.end(), '.')) + 1, visited, "--set " + key);
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) STRATA_THROW(ConfigError, "--set ", key, ": the config root is not a mapping");
  YAML::Node cur;
  cur.reset(root);  // rebinding (Node::operator= would assign values)
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path = join_path(path, parts[i]);
    YAML::Node next = cur[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next.reset(cur[parts[i]]);
    } else if (!next.IsMap()) {
      STRATA_THROW(ConfigError, "--set ", key, ": ", path, " is ", describe(next), ", not a mapping");
    }
    cur.reset(next);
  }
  cur[parts.back()] = value;
}

ConfigNode::ConfigNode(YAML::Node node, std::string path, std::shared_ptr<Shared> shared)
    : node_(std::move(node)), path_(std::move(path)), shared_(std::move(shared)) {}

ConfigNode ConfigNode::load_string(const std::string& text, const std::vector<std::string>& overrides,
                                   const std::string& source) {
  YAML::Node root;
  int second_doc_line = 0;
  try {
    root = YAML::Load(text);
    second_doc_line = second_document_line(text);
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's own depth guard says only "bad file"
    STRATA_THROW(ConfigError, source, ":", e.mark.line + 1, ":", e.mark.column + 1,
                 ": invalid YAML: nested deeper than the parser allows (a config is a few levels deep)");
  } catch (const YAML::ParserException& e) {
    STRATA_THROW(ConfigError, source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": invalid YAML: ", e.msg);
  } catch (const YAML::Exception& e) {
    STRATA_THROW(ConfigError, source, ": invalid YAML: ", e.msg);
  }
  if (second_doc_line > 0)
    STRATA_THROW(ConfigError, source, ":", second_doc_line,
                 ": a second YAML document ('---'); a config is one document");
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) STRATA_THROW(ConfigError, source, ": the config must be a YAML mapping, got ", describe(root));
  auto shared = std::make_shared<Shared>();
  shared->source = source;
  for (const auto& o : overrides) {
    apply_config_override(root, o);
    const auto eq = o.find('=');
    shared->overrides[trim(o.substr(0, eq))] = o;
  }
  int64_t visited = 0;
  check_tree(root, "", 0, visited, source);
  shared->root = root;
  return ConfigNode(root, "", shared);
}

ConfigNode ConfigNode::load_file(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  // stat before open: fopen on a directory "succeeds" (and reads nothing), on a FIFO it blocks.
  struct stat st {};
  if (::stat(yaml_path.c_str(), &st) != 0)
    STRATA_THROW(ConfigError, "cannot open config file '", yaml_path, "': ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) STRATA_THROW(ConfigError, "config file '", yaml_path, "' is a directory, not a YAML file");
  if (!S_ISREG(st.st_mode))
    STRATA_THROW(ConfigError, "config file '", yaml_path, "' is not a regular file (a FIFO, socket or device)");
  if (st.st_size > kMaxFileBytes)
    STRATA_THROW(ConfigError, "config file '", yaml_path, "' is ", st.st_size, " bytes; a config is at most ",
                 kMaxFileBytes, " bytes");
  std::string text;
  {
    FILE* f = std::fopen(yaml_path.c_str(), "rb");
    if (!f) STRATA_THROW(ConfigError, "cannot open config file '", yaml_path, "': ", std::strerror(errno));
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  return load_string(text, overrides, yaml_path);
}

std::string ConfigNode::key_path(const std::string& key) const { return join_path(path_, key); }

std::string ConfigNode::resolve_path(const std::string& key, const std::string& value) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (value.empty() || fs::path(value).is_absolute() || fs::exists(value, ec) || shared_->overrides.count(key_path(key)))
    return value;
  if (!fs::is_regular_file(shared_->source, ec)) return value;  // loaded from a string
  const fs::path beside = fs::path(shared_->source).parent_path() / value;
  return fs::exists(beside, ec) ? beside.lexically_normal().string() : value;
}

int ConfigNode::line() const { return mark_line(node_); }

YAML::Node ConfigNode::lookup(const std::string& key) const {
  shared_->asked.insert(key_path(key));
  if (!node_.IsMap()) return YAML::Node();
  const YAML::Node& cn = node_;
  return cn[key];
}

int ConfigNode::line_of(const std::string& key) const {
  if (!node_.IsMap()) return 0;
  const YAML::Node& cn = node_;
  return mark_line(cn[key]);
}

void ConfigNode::fail_path(const std::string& full, const std::string& msg, int line) const {
  const auto ov = shared_->overrides.find(full);
  if (ov != shared_->overrides.end()) STRATA_THROW(ConfigError, full, ": ", msg, " (from --set ", ov->second, ")");
  config_fail(full, msg, line);
}

void ConfigNode::fail(const std::string& key, const std::string& msg) const {
  fail_path(key_path(key), msg, line_of(key));
}

void ConfigNode::fail_if_misspelt(const std::string& key) const {
  // Follow key_path(key) down from the root; at the first level where it is absent, a key
  // in the file that nobody asked for and that is close to the wanted name is the cause.
  const std::string want = key_path(key);
  YAML::Node cur;
  cur.reset(shared_->root);
  std::string prefix;
  for (size_t b = 0; b <= want.size();) {
    const size_t e = std::min(want.find('.', b), want.size());
    const std::string comp = want.substr(b, e - b);
    b = e + 1;
    if (!cur.IsMap()) return;
    const YAML::Node& ccur = cur;
    if (ccur[comp].IsDefined() && !ccur[comp].IsNull()) {
      cur.reset(ccur[comp]);
      prefix = join_path(prefix, comp);
      continue;
    }
    std::string best;
    size_t best_d = SIZE_MAX;
    int best_line = 0;
    for (auto it = ccur.begin(); it != ccur.end(); ++it) {
      const std::string k = it->first.Scalar();
      if (shared_->asked.count(join_path(prefix, k))) continue;
      const size_t d = edit_distance(k, comp);
      if (d < best_d && close_enough(k, d)) {
        best_d = d;
        best = k;
        best_line = mark_line(it->first);
      }
    }
    if (!best.empty())
      fail_path(join_path(prefix, best), "unknown key; did you mean '" + join_path(prefix, comp) + "'?", best_line);
    return;
  }
}

void ConfigNode::type_fail(const std::string& key, const YAML::Node& v, const char* expected) const {
  fail(key, std::string("expected ") + expected + ", got " + describe(v));
}

void ConfigNode::record(const std::string& key, const char* type, std::optional<std::string> def, YAML::Node value,
                        bool given) const {
  const std::string full = key_path(key);
  const auto [it, fresh] = shared_->read_index.emplace(full, shared_->reads.size());
  if (fresh) shared_->reads.emplace_back();
  ConfigKeyRead& r = shared_->reads[it->second];
  if (!fresh && !r.type.empty()) return;  // the first typed read wins
  std::vector<std::string> choices = std::move(r.choices);
  r = {full, type, std::move(def), std::move(value), given, std::move(choices)};
}

void ConfigNode::note_read(const std::string& key, const std::string& type, const std::string& default_text,
                           const YAML::Node& value) const {
  const YAML::Node v = lookup(key);
  record(key, "", std::nullopt, YAML::Node(), false);  // make sure the entry exists (keeps its position)
  ConfigKeyRead& r = shared_->reads[shared_->read_index.at(key_path(key))];
  r.type = type;
  r.default_text = default_text;
  r.value = YAML::Clone(value);
  r.given = v.IsDefined() && !v.IsNull();
}

bool ConfigNode::has(const std::string& key) const {
  const YAML::Node v = lookup(key);
  const bool present = v.IsDefined() && !v.IsNull();
  if (present) record(key, "", std::nullopt, YAML::Clone(v), true);  // untyped until get/require reads it
  return present;
}

template <class T>
T ConfigNode::get(const std::string& key, const T& def) const {
  const T out = get_unrecorded(key, def);
  const YAML::Node v = lookup(key);
  record(key, short_type_name<T>().c_str(), flow_text(value_node(def)), value_node(out), v.IsDefined() && !v.IsNull());
  return out;
}

template <class T>
T ConfigNode::get_unrecorded(const std::string& key, const T& def) const {
  const YAML::Node v = lookup(key);
  if (!v.IsDefined() || v.IsNull()) return def;
  if constexpr (IsVector<T>::value) {
    using E = typename IsVector<T>::Elem;
    if (!v.IsSequence()) type_fail(key, v, (std::string("a list of ") + TypeName<E>::value + "s").c_str());
    T out;
    for (size_t i = 0; i < v.size(); ++i) {
      E e{};
      if (!scalar_as<E>(v[i], &e)) {
        const std::string p = key_path(key + "[" + std::to_string(i) + "]");
        fail_path(
            p, std::string("expected ") + TypeName<E>::value + ", got " + describe(v[i]) + out_of_range_note<E>(v[i]),
            mark_line(v[i]));
      }
      out.push_back(e);
    }
    return out;
  } else {
    T out{};
    if (!scalar_as<T>(v, &out))
      fail(key, std::string("expected ") + TypeName<T>::value + ", got " + describe(v) + out_of_range_note<T>(v));
    return out;
  }
}

template <class T>
T ConfigNode::require(const std::string& key) const {
  if (!has(key)) {
    fail_if_misspelt(key);
    const std::string where = path_.empty() ? std::string("the config") : path_;
    const int l = line();
    config_fail(key_path(key), "required key is missing from " + where, l);
  }
  const T out = get_unrecorded<T>(key, T{});
  record(key, short_type_name<T>().c_str(), std::nullopt, value_node(out), true);
  return out;
}

#define STRATA_CONFIG_INSTANTIATE(T)                                 \
  template T ConfigNode::get<T>(const std::string&, const T&) const; \
  template T ConfigNode::require<T>(const std::string&) const;
STRATA_CONFIG_INSTANTIATE(bool)
STRATA_CONFIG_INSTANTIATE(int)
STRATA_CONFIG_INSTANTIATE(int64_t)
STRATA_CONFIG_INSTANTIATE(uint64_t)
STRATA_CONFIG_INSTANTIATE(float)
STRATA_CONFIG_INSTANTIATE(double)
STRATA_CONFIG_INSTANTIATE(std::string)
STRATA_CONFIG_INSTANTIATE(std::vector<int>)
STRATA_CONFIG_INSTANTIATE(std::vector<int64_t>)
STRATA_CONFIG_INSTANTIATE(std::vector<double>)
STRATA_CONFIG_INSTANTIATE(std::vector<std::string>)
#undef STRATA_CONFIG_INSTANTIATE

ConfigNode ConfigNode::child(const std::string& key) const {
  const YAML::Node v = lookup(key);
  if (!v.IsDefined() || v.IsNull()) return ConfigNode(YAML::Node(), key_path(key), shared_);
  if (!v.IsMap()) type_fail(key, v, "a mapping");
  return ConfigNode(v, key_path(key), shared_);
}

void ConfigNode::check_range(const std::string& key, double value, double lo, double hi, bool lo_open,
                             bool hi_open) const {
  const bool ok = (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
  if (ok) return;
  std::ostringstream os;
  os << "expected a value in " << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]") << ", got "
     << value;
  fail(key, os.str());
}

void ConfigNode::one_of(const std::string& key, const std::string& value,
                        std::initializer_list<const char*> allowed) const {
  record(key, "", std::nullopt, YAML::Node(value), true);  // no-op when get() recorded it
  std::vector<std::string>& choices = shared_->reads[shared_->read_index.at(key_path(key))].choices;
  choices.assign(allowed.begin(), allowed.end());
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return;
    if (!list.empty()) list += '|';
    list += a;
  }
  fail(key, "expected one of " + list + ", got '" + value + "'");
}

void ConfigNode::check_unknown(const YAML::Node& node, const std::string& path) const {
  if (!node.IsMap()) return;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.Scalar();
    const std::string full = join_path(path, key);
    if (!shared_->asked.count(full)) {
      std::string best;
      size_t best_d = SIZE_MAX;
      for (const auto& a : shared_->asked) {
        if (parent_of(a) != path) continue;
        const std::string cand = path.empty() ? a : a.substr(path.size() + 1);
        const size_t d = edit_distance(key, cand);
        if (d < best_d) {
          best_d = d;
          best = cand;
        }
      }
      std::string msg = "unknown key";
      if (!best.empty() && close_enough(key, best_d))
        msg += "; did you mean '" + join_path(path, best) + "'?";
      else if (!best.empty()) {
        std::string known;
        for (const auto& a : shared_->asked)
          if (parent_of(a) == path) {
            if (!known.empty()) known += ", ";
            known += path.empty() ? a : a.substr(path.size() + 1);
          }
        msg += " (known keys here: " + known + ")";
      }
      fail_path(full, msg, mark_line(it->first));
    }
    check_unknown(it->second, full);
  }
}

void ConfigNode::check_unknown_keys() const { check_unknown(node_, path_); }

std::string ConfigNode::dump() const {
  YAML::Emitter out;
  out << node_;
  return out.c_str();
}

std::vector<ConfigKeyRead> ConfigNode::keys_read() const {
  std::vector<ConfigKeyRead> typed;
  for (const ConfigKeyRead& r : shared_->reads)
    if (!r.type.empty()) typed.push_back(r);
  return typed;
}

std::string ConfigNode::dump_resolved() const {
  YAML::Node root(YAML::NodeType::Map);
  for (const ConfigKeyRead& r : shared_->reads) {
    YAML::Node cur;
    cur.reset(root);
    for (size_t b = 0;;) {
      const size_t e = r.path.find('.', b);
      const std::string comp = r.path.substr(b, e == std::string::npos ? std::string::npos : e - b);
      if (e == std::string::npos) {
        cur[comp] = r.value;
        break;
      }
      if (!cur[comp].IsMap()) cur[comp] = YAML::Node(YAML::NodeType::Map);
      YAML::Node next = cur[comp];
      cur.reset(next);
      b = e + 1;
    }
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace strata
