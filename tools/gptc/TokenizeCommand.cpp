//===- TokenizeCommand.cpp - gptc tokenize: text to token shards ----------===//
//
// Each input file is a document, and so is each piece of a file between
// literal "<|endoftext|>" markers (how scripts/fetch-data.sh joins the Brown
// corpus into brown.txt); empty pieces are dropped. Every document is
// preceded by EOT (50256), llm.c's layout. --val-fraction=F moves whole
// documents from the end into the validation shard until it holds at least
// F of the tokens (at least one document, and at least one stays behind).
// Its name is OUT's with "_train" replaced by "_val" (data_train.bin ->
// data_val.bin), or "_val" added before the extension (brown.bin ->
// brown_val.bin).
//
//===----------------------------------------------------------------------===//

#include "Command.h"

#include "gptc/Formats/Error.h"
#include "gptc/Formats/TokenFile.h"
#include "gptc/Tokenizer/Tokenizer.h"

#include "llvm/Support/FormatVariadic.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

using llvm::cl::cat;
using llvm::cl::desc;
using llvm::cl::init;

namespace gptc::cli {

namespace {
std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail(path + ": cannot open: " + std::strerror(errno));
  std::string text{std::istreambuf_iterator<char>(in), {}};
  if (in.bad())
    fail(path + ": cannot read: " + std::strerror(errno));
  return text;
}

std::string valPath(const std::string &out) {
  std::filesystem::path p(out);
  std::string stem = p.stem().string();
  if (stem.size() > 6 && stem.ends_with("_train"))
    stem.resize(stem.size() - 6);
  return (p.parent_path() / (stem + "_val" + p.extension().string())).string();
}
} // namespace

int runTokenize(int argc, char **argv) {
  llvm::cl::list<std::string> inputs(llvm::cl::Positional, desc("<text files>"),
                                     llvm::cl::OneOrMore, cat(gptcCategory));
  llvm::cl::opt<std::string> output("o", desc("Output token shard"),
                                    llvm::cl::value_desc("filename"),
                                    llvm::cl::Required, cat(gptcCategory));
  llvm::cl::opt<double> valFraction(
      "val-fraction",
      desc("Share of the tokens, in whole documents from the end, written "
           "to OUT_val.bin (OUT_train.bin -> OUT_val.bin)"),
      init(0.0), cat(gptcCategory));
  parseCommandLine(argc, argv,
                   "gptc tokenize: GPT-2 BPE of text files into llm.c token "
                   "shards\n",
                   /*withMLIROptions=*/false);
  if (!(valFraction >= 0.0 && valFraction < 1.0))
    fail(llvm::formatv("--val-fraction must be in [0, 1), got {0}",
                       double(valFraction)));

  try {
    Tokenizer tokenizer(tokenizerDir());
    std::vector<std::vector<uint16_t>> docs;
    size_t total = 0, bytes = 0;
    double seconds = 0;
    for (const std::string &path : inputs) {
      std::string text = readText(path);
      bytes += text.size();
      std::string_view rest = text;
      while (!rest.empty()) {
        size_t cut = rest.find(Tokenizer::kEndOfTextText);
        std::string_view doc = rest.substr(0, cut);
        rest = cut == rest.npos
                   ? std::string_view()
                   : rest.substr(cut + Tokenizer::kEndOfTextText.size());
        if (doc.empty())
          continue;
        auto start = std::chrono::steady_clock::now();
        std::vector<int> ids = tokenizer.encode(doc);
        seconds += std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
        std::vector<uint16_t> tokens{uint16_t(Tokenizer::kEndOfText)};
        tokens.insert(tokens.end(), ids.begin(), ids.end());
        total += tokens.size();
        docs.push_back(std::move(tokens));
      }
    }
    if (docs.empty())
      fail("no text in the input files");

    size_t firstVal = docs.size(), valTokens = 0;
    if (valFraction > 0) {
      if (docs.size() < 2)
        fail("--val-fraction needs at least two documents, the input holds "
             "one");
      while (firstVal > 1 && double(valTokens) < valFraction * double(total))
        valTokens += docs[--firstVal].size();
    }
    auto join = [&](size_t begin, size_t end) {
      std::vector<uint16_t> out;
      for (size_t i = begin; i < end; ++i)
        out.insert(out.end(), docs[i].begin(), docs[i].end());
      return out;
    };
    std::string val = valPath(output);
    writeTokenShard(output, join(0, firstVal));
    if (valFraction > 0)
      writeTokenShard(val, join(firstVal, docs.size()));
    std::printf("%zu documents, %zu bytes -> %zu tokens in %.2f s (%.0f "
                "tokens/s)\n",
                docs.size(), bytes, total, seconds, double(total) / seconds);
    std::printf("wrote %s: %zu documents, %zu tokens\n", output.c_str(),
                firstVal, total - valTokens);
    if (valFraction > 0)
      std::printf("wrote %s: %zu documents, %zu tokens\n", val.c_str(),
                  docs.size() - firstVal, valTokens);
  } catch (const FormatError &e) {
    fail(e.what());
  } catch (const TokenizerError &e) {
    fail(e.what());
  }
  return 0;
}

} // namespace gptc::cli
