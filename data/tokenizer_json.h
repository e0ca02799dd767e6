// tokenizer.json of Hugging Face `tokenizers`, read into a Tokenizer and written from
// one. What is supported: a BPE model over the byte-level alphabet, the ByteLevel
// pre-tokenizer or a Sequence of Split and ByteLevel steps, no normalizer, the ByteLevel
// decoder, and the ByteLevel / TemplateProcessing post-processors (or a Sequence of
// them). Anything else is refused with a DataError naming the file and the field, so a
// tokenizer strata cannot reproduce exactly never loads.
#pragma once
#include <memory>
#include <string>

#include <strata/data/tokenizer.h>

namespace strata::data {

/// Reads and checks `path`. Throws strata::DataError "[tokenizer] <path>: <field>: ...".
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path);
/// The same from text already read; `where` names the source in errors.
std::shared_ptr<const Tokenizer> parse_tokenizer_json(const std::string& text, const std::string& where);

/// `spec` as tokenizer.json text that `tokenizers.Tokenizer.from_file` loads (format
/// version 1.0, merges as [left, right] pairs). Vocabulary entries keep vocab_text.
std::string tokenizer_json_text(const TokenizerSpec& spec);

}  // namespace strata::data
