// Text files -> token ids on several threads, in order, in bounded memory: the engine of
// `strata tokenize` (ids streamed to a file) and of the text dataset with data.tokenizer
// (ids kept in memory).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/data/tokenizer.h>

namespace strata::data {

struct TokenizeFilesOptions {
  int threads = 1;
  size_t chunk_bytes = size_t(1) << 20;   // chunks cut by TextChunker; about 2 x threads held at once
  std::optional<uint32_t> separator{};    // put before each file's ids
};

/// Encodes each file (without the post-processor's specials) chunk by chunk; `sink(ids,
/// bytes_done)` receives the ids in file order, from the calling thread, with the bytes
/// read so far. The ids equal encoding each file whole wherever chunks are cut at
/// last_chunk_cut places (text_chunks.h).
void tokenize_files(const std::vector<std::string>& files, const Tokenizer& tok, const TokenizeFilesOptions& options,
                    const std::function<void(std::span<const uint32_t>, uint64_t)>& sink);

}  // namespace strata::data
