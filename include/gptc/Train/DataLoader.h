//===- DataLoader.h - training batches from a token file --------*- C++ -*-===//
//
// A shard of N tokens is cut into W = (N - 1) / (B*T) windows: window w holds
// the B*T+1 tokens starting at w*B*T (inputs are its first B*T tokens,
// targets its last B*T), so consecutive windows overlap by one token. An
// epoch visits every window once: in order, or with shuffling in the order of
// a Fisher-Yates permutation drawn from Rng(seed, epoch). After the last
// window the next epoch starts at the beginning of the shard; the tail of
// fewer than B*T tokens is never used. This is llm.c's loader, so any tool
// can reproduce the batches of a run from (file, B, T, seed, position).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_DATALOADER_H
#define GPTC_TRAIN_DATALOADER_H

#include "gptc/Executor/Arguments.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gptc::train {

/// Where the next batch comes from; saved in checkpoints.
struct DataPosition {
  int64_t epoch = 0;
  int64_t window = 0; ///< index into the epoch's order
};

class DataLoader {
public:
  /// Reads `path` (an llm.c shard or nanoGPT .bin). Throws FormatError if it
  /// cannot be read, holds fewer than B*T+1 tokens, or holds an id outside
  /// [0, vocab) anywhere (checked up front, not when the batch comes up).
  DataLoader(const std::string &path, int64_t batch, int64_t seq, int64_t vocab,
             bool shuffle, uint64_t seed);

  /// The batch at the current position; advances to the next window.
  exec::Batch next();

  int64_t numWindows() const { return windows_; }
  size_t numTokens() const { return tokens_.size(); }
  DataPosition position() const { return pos_; }
  /// Throws FormatError if the window is outside this shard's epoch.
  void seek(DataPosition pos);

private:
  void startEpoch(int64_t epoch);

  std::string path_;
  std::vector<uint16_t> tokens_;
  int64_t batch_, seq_, vocab_, windows_;
  bool shuffle_;
  uint64_t seed_;
  DataPosition pos_;
  std::vector<int64_t> order_; ///< this epoch's windows, when shuffling
};

} // namespace gptc::train

#endif // GPTC_TRAIN_DATALOADER_H
