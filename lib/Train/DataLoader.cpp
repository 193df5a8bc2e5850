//===- DataLoader.cpp - training batches from a token file ----------------===//

#include "gptc/Train/DataLoader.h"

#include "gptc/Formats/Error.h"
#include "gptc/Formats/TokenFile.h"
#include "gptc/Train/Random.h"

#include <numeric>

namespace gptc::train {

DataLoader::DataLoader(const std::string &path, int64_t batch, int64_t seq,
                       int64_t vocab, bool shuffle, uint64_t seed)
    : path_(path), tokens_(readTokenFile(path).tokens), batch_(batch),
      seq_(seq), vocab_(vocab), shuffle_(shuffle), seed_(seed) {
  size_t need = size_t(batch * seq + 1);
  if (tokens_.size() < need)
    throw FormatError(path + ": holds " + std::to_string(tokens_.size()) +
                      " tokens, fewer than one batch of B*T+1 = " +
                      std::to_string(need) + " needs");
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i] >= vocab)
      throw FormatError(path + ": token id " + std::to_string(tokens_[i]) +
                        " at index " + std::to_string(i) +
                        " is outside the vocabulary of " +
                        std::to_string(vocab));
  windows_ = int64_t(tokens_.size() - 1) / (batch * seq);
  startEpoch(0);
}

void DataLoader::startEpoch(int64_t epoch) {
  pos_ = {epoch, 0};
  if (!shuffle_)
    return;
  order_.resize(windows_);
  std::iota(order_.begin(), order_.end(), int64_t(0));
  Rng rng(seed_, uint64_t(epoch));
  for (int64_t i = windows_ - 1; i > 0; --i)
    std::swap(order_[i], order_[rng.below(uint64_t(i) + 1)]);
}

exec::Batch DataLoader::next() {
  int64_t window = shuffle_ ? order_[pos_.window] : pos_.window;
  exec::Batch batch = exec::batchAt(tokens_, size_t(window * batch_ * seq_),
                                    batch_, seq_, vocab_, path_);
  if (++pos_.window == windows_)
    startEpoch(pos_.epoch + 1);
  return batch;
}

void DataLoader::seek(DataPosition pos) {
  if (pos.epoch < 0 || pos.window < 0 || pos.window >= windows_)
    throw FormatError(path_ + ": data position (epoch " +
                      std::to_string(pos.epoch) + ", window " +
                      std::to_string(pos.window) + ") is outside its " +
                      std::to_string(windows_) + " windows");
  startEpoch(pos.epoch);
  pos_.window = pos.window;
}

} // namespace gptc::train
