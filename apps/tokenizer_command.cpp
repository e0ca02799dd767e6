// strata tokenizer train|encode|decode and strata tokenize: the byte-level BPE tokenizer
// of data/tokenizer.h on the command line. Training writes a tokenizer.json that Hugging
// Face `tokenizers` loads; tokenize streams text files into the llm.c token files that
// data.dataset `tokens` reads.
#include <unistd.h>

#include <filesystem>
#include <optional>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/commands.h"
#include "apps/output_file.h"
#include "apps/progress.h"
#include <strata/comm/mpi.h>
#include <strata/core/error.h>
#include <strata/data/bpe_trainer.h>
#include <strata/data/text_chunks.h>
#include <strata/data/token_dataset.h>
#include <strata/data/tokenize_files.h>
#include <strata/data/tokenizer_json.h>

namespace strata::apps {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One progress line, redrawn in place on a terminal and printed every ~10% otherwise.
class ByteProgress {
 public:
  ByteProgress(const char* what, uint64_t total, bool quiet, const char* unit = "B")
      : what_(what), unit_(unit), total_(total), t0_(Clock::now()), last_(t0_) {
    bar_ = !quiet && choose_progress_style(::isatty(STDOUT_FILENO) != 0, comm::launched_by_mpi(),
                                           std::getenv("STRATA_PROGRESS")) == ProgressStyle::bar;
    lines_ = !quiet && !bar_;
  }
  void update(uint64_t done, const std::string& extra, bool final = false) {
    const auto now = Clock::now();
    const double frac = total_ ? double(done) / double(total_) : 1.0;
    if (bar_) {
      if (!final && std::chrono::duration<double>(now - last_).count() < 0.1) return;
    } else if (lines_) {
      if (final ? done == last_done_ : frac < next_line_) return;
      next_line_ = frac + 0.1;
    } else {
      return;
    }
    last_ = now;
    last_done_ = done;
    const double s = seconds_since(t0_);
    const double rate = s > 0 ? double(done) / s : 0.0;
    const double eta = rate > 0 ? double(total_ - std::min(done, total_)) / rate : 0.0;
    std::printf("%s%s: %3.0f%% %s%s of %s%s, %s%s/s, %s, eta %s%s", bar_ ? "\r" : "", what_, 100.0 * frac,
                format_count(double(done)).c_str(), unit_, format_count(double(total_)).c_str(), unit_,
                format_count(rate).c_str(), unit_, extra.c_str(), format_duration(eta).c_str(), bar_ ? "   " : "\n");
    if (bar_ && final) std::printf("\n");
    std::fflush(stdout);
  }

 private:
  const char* what_;
  const char* unit_;
  uint64_t total_;
  Clock::time_point t0_, last_;
  bool bar_ = false, lines_ = false;
  double next_line_ = 0.1;
  uint64_t last_done_ = UINT64_MAX;
};

uint64_t total_bytes(const std::vector<std::string>& files) {
  uint64_t n = 0;
  for (const auto& f : files) n += std::filesystem::file_size(f);
  return n;
}

int run_train(const std::vector<std::string>& inputs, const data::BpeTrainerOptions& opts, const std::string& out,
              bool quiet) {
  check_output_path(out, "--output");
  const std::vector<std::string> files = data::list_text_files(inputs);
  data::PreTokenCounter counter(opts);
  ByteProgress read_bar("count", total_bytes(files), quiet);
  uint64_t done = 0;
  std::string chunk;
  for (const auto& f : files) {
    data::TextChunker chunker(f);
    bool continues = false;
    while (chunker.next(chunk, continues)) {
      counter.add(chunk, continues);
      done += chunk.size();
      read_bar.update(done, std::to_string(counter.counts().size()) + " distinct pre-tokens");
    }
  }
  read_bar.update(done, std::to_string(counter.counts().size()) + " distinct pre-tokens", true);
  const auto t0 = Clock::now();
  ByteProgress merge_bar("vocab", uint64_t(std::max<int64_t>(1, opts.vocab_size)), quiet, " tokens");
  data::TokenizerSpec spec = data::train_bpe(counter, opts, [&](int64_t d, int64_t want) {
    (void)want;
    merge_bar.update(uint64_t(d) + 256 + opts.special_tokens.size(), std::to_string(d) + " merges", false);
  });
  const std::string text = data::tokenizer_json_text(spec);
  // Load what is written before publishing it: the file must read back as a tokenizer.
  data::parse_tokenizer_json(text, out + " (as written)");
  write_output_file(out, "--output", text);
  std::printf("wrote %s: vocab %zu (%zu special, 256 bytes, %zu merges) from %s in %.1f s of merging\n", out.c_str(),
              spec.vocab.size(), opts.special_tokens.size(), spec.merges.size(),
              (format_count(double(done)) + "B").c_str(), seconds_since(t0));
  return 0;
}

struct TokenizeOptions {
  std::string tokenizer, output, separator;
  std::vector<std::string> inputs;
  int threads = 0;
  bool quiet = false;
  size_t chunk_bytes = size_t(1) << 20;
};

// The ids go to the file as they come (data/tokenize_files.h bounds what is held), behind
// a header whose count is filled in at the end.
int run_tokenize(const TokenizeOptions& o) {
  check_output_path(o.output, "--output");
  const auto tok = data::load_tokenizer(o.tokenizer);
  const std::vector<std::string> files = data::list_text_files(o.inputs);
  std::optional<uint32_t> sep;
  if (!o.separator.empty()) {
    sep = tok->token_to_id(o.separator);
    if (!sep) STRATA_THROW(ConfigError, "--separator: '", o.separator, "' is not a token of ", o.tokenizer);
  }
  const bool wide = tok->vocab_size() > 65536;
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  auto writer = open_output_file(o.output, "--output");
  std::vector<uint8_t> header(size_t(data::TokenFile::kLlmcHeaderBytes), 0);
  writer->write(header.data(), header.size());
  std::vector<uint16_t> narrow;
  int64_t count = 0;
  uint64_t done = 0;
  ByteProgress bar("tokenize", total_bytes(files), o.quiet);
  const auto t0 = Clock::now();
  data::tokenize_files(files, *tok, {.threads = threads, .chunk_bytes = o.chunk_bytes, .separator = sep},
                       [&](std::span<const uint32_t> ids, uint64_t bytes_done) {
                         count += int64_t(ids.size());
                         if (count > INT32_MAX)
                           STRATA_THROW(DataError, "[tokenize] ", o.output,
                                        ": more than 2^31-1 tokens, the most one llm.c token file counts; tokenize "
                                        "the inputs into several files");
                         if (wide) {
                           writer->write(ids.data(), ids.size() * 4);
                         } else {
                           narrow.assign(ids.begin(), ids.end());
                           writer->write(narrow.data(), narrow.size() * 2);
                         }
                         done = bytes_done;
                         bar.update(done, format_count(double(count)) + " tokens");
                       });
  bar.update(done, format_count(double(count)) + " tokens", true);
  if (count < 2) STRATA_THROW(DataError, "[tokenize] the inputs gave ", count, " tokens; a token file needs at least 2");
  const int32_t h[3] = {wide ? data::TokenFile::kLlmcMagicU32 : data::TokenFile::kLlmcMagic, wide ? 7 : 1,
                        int32_t(count)};
  writer->write_at(0, h, sizeof h);
  writer->commit();
  const double s = seconds_since(t0);
  std::printf("wrote %s: %lld tokens (%s) from %zu file(s), %sB in %.2f s (%sB/s, %d threads)\n", o.output.c_str(),
              (long long)count, wide ? "uint32" : "uint16", files.size(), format_count(double(done)).c_str(), s,
              format_count(s > 0 ? double(done) / s : 0).c_str(), threads);
  return 0;
}

}  // namespace

Command add_tokenizer_command(CLI::App& parent) {
  CLI::App* cmd = parent.add_subcommand("tokenizer", "Train or run a byte-level BPE tokenizer (tokenizer.json)");
  cmd->require_subcommand(1);

  struct TrainOpts {
    std::vector<std::string> inputs;
    std::string output;
    data::BpeTrainerOptions opts;
    bool quiet = false;
  };
  auto t = std::make_shared<TrainOpts>();
  CLI::App* train = cmd->add_subcommand("train", "Learn a byte-level BPE from text files; write tokenizer.json");
  train->add_option("inputs", t->inputs, "Text files or directories (a directory: its files but *.dat, by name)")
      ->required();
  train->add_option("-o,--output", t->output, "tokenizer.json to write")->required();
  train->add_option("--vocab-size", t->opts.vocab_size, "Vocabulary size: special tokens + 256 bytes + merges")
      ->check(CLI::Range(int64_t(256), int64_t(1) << 31));
  train->add_option("--pattern", t->opts.pattern, "Pre-tokenization: gpt2 (ByteLevel regex) or llama3 (Split)")
      ->check(CLI::IsMember({"gpt2", "llama3"}));
  train->add_option("--special", t->opts.special_tokens, "A special token (repeatable), ids 0.. in order given");
  train->add_option("--bos", t->opts.bos, "A --special token put first by encode(add_special_tokens=True)");
  train->add_option("--min-frequency", t->opts.min_frequency, "Pairs seen fewer times are not merged")
      ->check(CLI::PositiveNumber);
  train->add_flag("-q,--quiet", t->quiet, "No progress");

  struct CodecOpts {
    std::string tokenizer, text, file, ids;
    bool add_special = false, keep_special = false;
  };
  auto c = std::make_shared<CodecOpts>();
  CLI::App* encode = cmd->add_subcommand("encode", "Print the ids of a text");
  encode->add_option("-t,--tokenizer", c->tokenizer, "tokenizer.json")->required();
  encode->add_option("--text", c->text, "The text");
  encode->add_option("--file", c->file, "Or a file holding it");
  encode->add_flag("--add-special", c->add_special, "Apply the post-processor's template (e.g. BOS)");
  CLI::App* decode = cmd->add_subcommand("decode", "Print the text of ids");
  decode->add_option("-t,--tokenizer", c->tokenizer, "tokenizer.json")->required();
  decode->add_option("ids", c->ids, "Ids, separated by spaces or commas")->required();
  decode->add_flag("--keep-special", c->keep_special, "Print special tokens too");

  return {cmd, [t, c, train, encode, decode]() -> int {
            if (train->parsed()) return run_train(t->inputs, t->opts, t->output, t->quiet);
            const auto tok = data::load_tokenizer(c->tokenizer);
            if (encode->parsed()) {
              if (!c->text.empty() && !c->file.empty())
                STRATA_THROW(ConfigError, "strata tokenizer encode: give --text or --file, not both");
              std::string text = c->text;
              if (!c->file.empty()) {
                const auto bytes = read_file_bytes(c->file);
                text.assign(bytes.begin(), bytes.end());
              }
              std::string line;
              for (uint32_t id : tok->encode(text, c->add_special)) line += std::to_string(id) + " ";
              if (!line.empty()) line.pop_back();
              std::printf("%s\n", line.c_str());
              return 0;
            }
            (void)decode;
            std::vector<uint32_t> ids;
            std::string cur;
            for (char ch : c->ids + " ") {
              if (ch == ',' || ch == ' ' || ch == '\n' || ch == '\t') {
                if (cur.empty()) continue;
                size_t used = 0;
                unsigned long long v = 0;
                try {
                  v = std::stoull(cur, &used);
                } catch (const std::exception&) {
                  used = 0;
                }
                if (used != cur.size() || v > UINT32_MAX) STRATA_THROW(ConfigError, "ids: '", cur, "' is not a token id");
                ids.push_back(uint32_t(v));
                cur.clear();
              } else {
                cur += ch;
              }
            }
            const std::string text = tok->decode(ids, !c->keep_special);
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::printf("\n");
            return 0;
          }};
}

Command add_tokenize_command(CLI::App& parent) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = parent.add_subcommand("tokenize", "Tokenize text files into an llm.c token file (data.dataset tokens)");
  cmd->add_option("inputs", o->inputs, "Text files or directories (a directory: its files but *.dat, by name)")
      ->required();
  cmd->add_option("-t,--tokenizer", o->tokenizer, "tokenizer.json")->required();
  cmd->add_option("-o,--output", o->output, "Token file to write (.bin: uint16 ids, uint32 above 65536 tokens)")
      ->required();
  cmd->add_option("--threads", o->threads, "Encoding threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--separator", o->separator,
                  "A token put before each file's tokens, as llm.c's scripts put <|endoftext|> before each document");
  cmd->add_option("--chunk-bytes", o->chunk_bytes, "Bytes per encoding chunk (memory: about 2 x threads chunks)")
      ->check(CLI::Range(size_t(4096), size_t(1) << 30));
  cmd->add_flag("-q,--quiet", o->quiet, "No progress");
  return {cmd, [o] { return run_tokenize(*o); }};
}

}  // namespace strata::apps
