//===- LRSchedule.cpp - the learning rate at each step --------------------===//

#include "gptc/Train/LRSchedule.h"

#include <cmath>
#include <numbers>

namespace gptc::train {

double LRSchedule::at(int64_t step) const {
  if (step < warmup)
    return lr * double(step + 1) / double(warmup);
  if (kind == Kind::Constant)
    return lr;
  if (step >= steps) // past the run; also keeps the ratio's denominator > 0
    return minLr;
  double ratio = double(step - warmup) / double(steps - warmup);
  double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return minLr + coeff * (lr - minLr);
}

std::optional<LRSchedule::Kind> parseScheduleKind(const std::string &name) {
  if (name == "cosine")
    return LRSchedule::Kind::Cosine;
  if (name == "constant")
    return LRSchedule::Kind::Constant;
  return std::nullopt;
}

const char *scheduleKindName(LRSchedule::Kind kind) {
  return kind == LRSchedule::Kind::Cosine ? "cosine" : "constant";
}

} // namespace gptc::train
