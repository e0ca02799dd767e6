// Test program for the comparisons against `tokenizers` (tests/data/tokenizer_compare.py):
//   strata_tokenize_ids encode TOKENIZER.json [--add-special] FILE...
//     one line per FILE: the ids of its bytes, space-separated
//   strata_tokenize_ids decode TOKENIZER.json FILE...
//     one line per FILE (which holds ids, space-separated): the decoded text as hex
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <strata/data/tokenizer_json.h>

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s encode|decode TOKENIZER.json [--add-special] FILE...\n", argv[0]);
    return 2;
  }
  try {
    const std::string mode = argv[1];
    const auto tok = strata::data::load_tokenizer(argv[2]);
    bool add_special = false;
    int first = 3;
    if (argc > 3 && std::string(argv[3]) == "--add-special") add_special = true, first = 4;
    std::string line;
    for (int i = first; i < argc; ++i) {
      const std::string data = read_all(argv[i]);
      line.clear();
      if (mode == "encode") {
        for (uint32_t id : tok->encode(data, add_special)) {
          line += std::to_string(id);
          line += ' ';
        }
      } else if (mode == "decode") {
        std::vector<uint32_t> ids;
        std::istringstream ss(data);
        for (uint64_t v; ss >> v;) ids.push_back(uint32_t(v));
        static const char* kHex = "0123456789abcdef";
        for (unsigned char c : tok->decode(ids)) {
          line += kHex[c >> 4];
          line += kHex[c & 15];
        }
      } else {
        std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
      }
      line += '\n';
      std::fwrite(line.data(), 1, line.size(), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
