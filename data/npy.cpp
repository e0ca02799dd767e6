// The .npy header grammar (numpy/lib/format.py): "\x93NUMPY", major, minor, a
// little-endian header length (u16 for 1.0, u32 for 2.0/3.0), then the repr of a dict
// {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with spaces and ending in '\n'.
#include <strata/data/npy.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include <strata/core/error.h>
#include <strata/data/regular_file.h>
#include <strata/tensor/tensor.h>

namespace strata::data {
namespace {

constexpr int64_t kMaxHeaderBytes = int64_t(1) << 20;  // numpy itself refuses headers past 10 KB by default

/// A cursor over the dict literal; every failure names the file.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  [[noreturn]] void fail(const std::string& why) const {
    STRATA_THROW(DataError, "[npy] ", name_, ": bad header (", why, ") in \"", std::string(s_), "\"");
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "' at offset " + std::to_string(pos_));
  }
  std::string string_lit() {
    skip_ws();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) fail("expected a quoted string");
    const char q = s_[pos_++];
    const size_t end = s_.find(q, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(pos_, end - pos_));
    if (out.find('\\') != std::string::npos) fail("escapes in strings are not supported");
    pos_ = end + 1;
    return out;
  }
  bool bool_lit() {
    skip_ws();
    for (const auto& [word, v] : {std::pair<std::string_view, bool>{"True", true}, {"False", false}}) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return v;
      }
    }
    fail("fortran_order must be True or False");
  }
  int64_t int_lit() {
    skip_ws();
    int64_t v = 0;
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const int d = s_[pos_++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10) fail("shape dimension overflows int64");
      v = v * 10 + d;
    }
    if (pos_ == start) fail("expected a non-negative integer in shape");
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 longs
    return v;
  }
  std::vector<int64_t> tuple_lit() {
    expect('(');
    std::vector<int64_t> dims;
    if (eat(')')) return dims;
    while (true) {
      dims.push_back(int_lit());
      if (eat(')')) return dims;
      expect(',');
      if (eat(')')) return dims;
    }
  }
  bool at_end() {
    skip_ws();
    return pos_ == s_.size();
  }

 private:
  std::string_view s_;
  const std::string& name_;
  size_t pos_ = 0;
};

bool parse_descr(const std::string& d, NpyDType& out) {
  static const std::pair<const char*, NpyDType> table[] = {{"|u1", NpyDType::u8},  {"<u1", NpyDType::u8},
                                                           {"<i4", NpyDType::i32}, {"<i8", NpyDType::i64},
                                                           {"<f4", NpyDType::f32}, {"<f8", NpyDType::f64}};
  for (const auto& [name, t] : table)
    if (d == name) {
      out = t;
      return true;
    }
  return false;
}

}  // namespace

const char* npy_dtype_name(NpyDType t) {
  switch (t) {
    case NpyDType::u8: return "uint8";
    case NpyDType::i32: return "int32";
    case NpyDType::i64: return "int64";
    case NpyDType::f32: return "float32";
    case NpyDType::f64: return "float64";
  }
  return "?";
}

int npy_itemsize(NpyDType t) {
  switch (t) {
    case NpyDType::u8: return 1;
    case NpyDType::i32:
    case NpyDType::f32: return 4;
    case NpyDType::i64:
    case NpyDType::f64: return 8;
  }
  return 1;
}

int64_t NpyHeader::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // bounded at parse time
  return n;
}

NpyHeader parse_npy_header(std::span<const uint8_t> bytes, const std::string& name) {
  static constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    STRATA_THROW(DataError, "[npy] ", name, ": not a .npy file (it does not start with \\x93NUMPY)");
  const int major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0)
    STRATA_THROW(DataError, "[npy] ", name, ": format version ", major, ".", minor,
                 " is not supported (1.0, 2.0 and 3.0 are)");
  int64_t len = 0, pre = 0;
  if (major == 1) {
    len = int64_t(bytes[8]) | int64_t(bytes[9]) << 8;
    pre = 10;
  } else {
    if (bytes.size() < 12) STRATA_THROW(DataError, "[npy] ", name, ": truncated header length");
    len = int64_t(bytes[8]) | int64_t(bytes[9]) << 8 | int64_t(bytes[10]) << 16 | int64_t(bytes[11]) << 24;
    pre = 12;
  }
  if (len > kMaxHeaderBytes)
    STRATA_THROW(DataError, "[npy] ", name, ": header length ", len, " bytes is over the limit of ", kMaxHeaderBytes);
  if (pre + len > int64_t(bytes.size()))
    STRATA_THROW(DataError, "[npy] ", name, ": header of ", len, " bytes runs past the end of the file (",
                 bytes.size(), " bytes)");
  std::string_view text(reinterpret_cast<const char*>(bytes.data() + pre), size_t(len));
  for (char c : text)
    if (major < 3 && static_cast<unsigned char>(c) > 0x7F)
      STRATA_THROW(DataError, "[npy] ", name, ": header of a version ", major, ".0 file must be ASCII");
  if (text.empty() || text.back() != '\n') STRATA_THROW(DataError, "[npy] ", name, ": header does not end in '\\n'");
  text.remove_suffix(1);
  HeaderParser p(text, name);
  NpyHeader h;
  h.data_offset = pre + len;
  bool seen_descr = false, seen_order = false, seen_shape = false;
  p.expect('{');
  while (!p.eat('}')) {
    const std::string key = p.string_lit();
    p.expect(':');
    if (key == "descr" && !seen_descr) {
      const std::string d = p.string_lit();
      if (!parse_descr(d, h.dtype))
        STRATA_THROW(DataError, "[npy] ", name, ": dtype '", d,
                     "' is not supported (uint8 |u1, int32 <i4, int64 <i8, float32 <f4, float64 <f8, "
                     "little-endian; convert with arr.astype(...))");
      seen_descr = true;
    } else if (key == "fortran_order" && !seen_order) {
      if (p.bool_lit())
        STRATA_THROW(DataError, "[npy] ", name,
                     ": fortran_order is True; save a C-ordered array (np.save(f, np.ascontiguousarray(a)))");
      seen_order = true;
    } else if (key == "shape" && !seen_shape) {
      h.shape = p.tuple_lit();
      seen_shape = true;
    } else {
      p.fail("unexpected or repeated key '" + key + "'");
    }
    if (!p.eat(',')) {
      p.expect('}');
      break;
    }
  }
  if (!p.at_end()) p.fail("text after the dict");
  if (!seen_descr || !seen_order || !seen_shape) p.fail("needs the keys 'descr', 'fortran_order' and 'shape'");
  // numel * itemsize must fit an int64 (the file size check then bounds it by the disk).
  int64_t bytes_total = npy_itemsize(h.dtype);
  for (int64_t d : h.shape) {
    if (d != 0 && bytes_total > std::numeric_limits<int64_t>::max() / d)
      STRATA_THROW(DataError, "[npy] ", name, ": shape overflows int64 bytes");
    bytes_total *= d;
  }
  return h;
}

NpyHeader read_npy_header(const std::string& path) {
  const uint64_t n = regular_file_size(path, "npy");
  std::ifstream in(path, std::ios::binary);
  if (!in) STRATA_THROW(DataError, "[npy] cannot open ", path, ": ", std::strerror(errno));
  std::vector<uint8_t> head(size_t(std::min<uint64_t>(n, uint64_t(kMaxHeaderBytes + 12))));
  in.read(reinterpret_cast<char*>(head.data()), std::streamsize(head.size()));
  head.resize(size_t(in.gcount()));
  return parse_npy_header(head, path);
}

NpyArray read_npy(const std::string& path) {
  const uint64_t n = regular_file_size(path, "npy");
  NpyArray a;
  a.header = read_npy_header(path);
  const int64_t want = a.header.numel() * npy_itemsize(a.header.dtype);
  const int64_t have = int64_t(n) - a.header.data_offset;
  if (have != want)
    STRATA_THROW(DataError, "[npy] ", path, ": shape ", shape_str(a.header.shape), " x ", npy_itemsize(a.header.dtype), " bytes (", npy_dtype_name(a.header.dtype),
                 ") needs ", want, " data bytes, the file holds ", have, have < want ? " (truncated)" : " (trailing bytes)");
  if (const uint64_t mem = physical_memory_bytes(); uint64_t(want) > mem)
    STRATA_THROW(DataError, "[npy] ", path, ": ", human_bytes(uint64_t(want)), " of data is more than this machine's ",
                 human_bytes(mem));
  std::ifstream in(path, std::ios::binary);
  if (!in) STRATA_THROW(DataError, "[npy] cannot open ", path, ": ", std::strerror(errno));
  in.seekg(a.header.data_offset);
  a.bytes.resize(size_t(want));
  in.read(reinterpret_cast<char*>(a.bytes.data()), std::streamsize(want));
  if (in.gcount() != std::streamsize(want))
    STRATA_THROW(DataError, "[npy] ", path, ": read ", in.gcount(), " of ", want, " data bytes");
  return a;
}

}  // namespace strata::data
