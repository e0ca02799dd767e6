// Rounds of 2 chunks per thread: read in order, encoded in parallel, handed on in order.
#include <strata/data/tokenize_files.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include <strata/data/text_chunks.h>

namespace strata::data {

void tokenize_files(const std::vector<std::string>& files, const Tokenizer& tok, const TokenizeFilesOptions& o,
                    const std::function<void(std::span<const uint32_t>, uint64_t)>& sink) {
  const int threads = std::max(1, o.threads);
  struct Job {
    std::string text;
    bool continues = false;
    std::vector<uint32_t> ids;
  };
  std::vector<Job> jobs(size_t(2 * threads));
  uint64_t done = 0;
  size_t file_index = 0;
  std::unique_ptr<TextChunker> chunker;
  bool more = true;
  while (more) {
    size_t n = 0;
    while (n < jobs.size()) {
      if (!chunker) {
        if (file_index == files.size()) {
          more = false;
          break;
        }
        chunker = std::make_unique<TextChunker>(files[file_index++], o.chunk_bytes);
      }
      if (!chunker->next(jobs[n].text, jobs[n].continues)) {
        chunker.reset();
        continue;
      }
      ++n;
    }
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k; (k = next.fetch_add(1)) < n;) {
        Job& j = jobs[k];
        j.ids.clear();
        if (!j.continues && o.separator) j.ids.push_back(*o.separator);
        tok.encode(j.text, false, j.ids, j.continues);
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < std::min<int>(threads, int(n)); ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    for (size_t k = 0; k < n; ++k) {
      done += jobs[k].text.size();
      sink(jobs[k].ids, done);
    }
  }
}

}  // namespace strata::data
