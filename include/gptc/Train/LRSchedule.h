//===- LRSchedule.h - the learning rate at each step ------------*- C++ -*-===//
//
// llm.c's schedule, so other tools can reproduce it exactly. For the 0-based
// step s of a run of N steps, with peak rate lr, floor min_lr and W warm-up
// steps:
//
//   s < W:             lr_s = lr * (s + 1) / W
//   cosine, s >= W:    ratio = (s - W) / (N - W)
//                      lr_s = min_lr + (1 + cos(pi * ratio)) / 2 * (lr -
//                      min_lr)
//   constant, s >= W:  lr_s = lr
//
// computed in double precision. The cosine starts at lr right after the
// warm-up and would reach min_lr at s = N (the last step, N - 1, stays just
// above it).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_LRSCHEDULE_H
#define GPTC_TRAIN_LRSCHEDULE_H

#include <cstdint>
#include <optional>
#include <string>

namespace gptc::train {

struct LRSchedule {
  enum class Kind { Cosine, Constant };
  Kind kind = Kind::Cosine;
  double lr = 6e-4;
  double minLr = 6e-5;
  int64_t warmup = 0;
  int64_t steps = 1;

  /// The rate for 0-based step `step`.
  double at(int64_t step) const;
};

/// "cosine" or "constant"; nullopt for anything else.
std::optional<LRSchedule::Kind> parseScheduleKind(const std::string &name);
const char *scheduleKindName(LRSchedule::Kind kind);

} // namespace gptc::train

#endif // GPTC_TRAIN_LRSCHEDULE_H
