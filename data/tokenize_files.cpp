// Rounds of 2 chunks per thread: read in order, encoded in parallel by a fixed set of
// threads, handed on in order.
#include <strata/data/tokenize_files.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <mutex>
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
  size_t n = 0;
  std::atomic<size_t> next{0};
  std::exception_ptr failed;
  std::mutex failed_mu;
  auto work = [&] {
    try {
      for (size_t k; (k = next.fetch_add(1)) < n;) {
        Job& j = jobs[k];
        j.ids.clear();
        if (!j.continues && o.separator) j.ids.push_back(*o.separator);
        tok.encode(j.text, false, j.ids, j.continues);
      }
    } catch (...) {
      std::lock_guard lock(failed_mu);
      if (!failed) failed = std::current_exception();
    }
  };
  // The workers live for the whole run: each keeps its warm pre-token cache (a thread's
  // cache is its own, so threads started per round would start cold every round).
  std::barrier sync(threads);
  bool stop = false;
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back([&] {
      while (true) {
        sync.arrive_and_wait();  // a round is ready (or the run is over)
        if (stop) return;
        work();
        sync.arrive_and_wait();  // the round is encoded
      }
    });
  // Main throws only between rounds, while the workers wait at the round's start.
  struct Joiner {
    std::barrier<>& sync;
    bool& stop;
    std::vector<std::thread>& pool;
    ~Joiner() {
      stop = true;
      if (!pool.empty()) sync.arrive_and_wait();
      for (auto& t : pool) t.join();
    }
  } joiner{sync, stop, pool};

  uint64_t done = 0;
  size_t file_index = 0;
  std::unique_ptr<TextChunker> chunker;
  bool more = true;
  while (more) {
    n = 0;
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
    if (n == 0) break;
    next = 0;
    if (!pool.empty()) sync.arrive_and_wait();
    work();
    if (!pool.empty()) sync.arrive_and_wait();
    if (failed) std::rethrow_exception(failed);
    for (size_t k = 0; k < n; ++k) {
      done += jobs[k].text.size();
      sink(jobs[k].ids, done);
    }
  }
}

}  // namespace strata::data
