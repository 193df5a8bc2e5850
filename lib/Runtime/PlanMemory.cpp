//===- PlanMemory.cpp - gpt-plan-memory: one arena for a Program ----------===//
//
// Bound buffers (parameters, gradients, moments, inputs, hypers, outputs,
// constants) live for the whole run and are laid out first, in id order.
// Temps are placed above them by liveness: within one function a temp lives
// from the first launch that touches it (or a view of it) to the last one,
// or to the join of a side-stream launch that touches it (liveRanges);
// functions never run at once, so temps of different functions may share
// bytes. Placement is greedy best-fit, largest temp first: each temp takes
// the smallest gap between the temps it conflicts with that holds it, or
// goes above them all. A view gets its base's offset. Every offset is
// 256-byte aligned (what cudaMalloc guarantees and vector loads want).
//
//===----------------------------------------------------------------------===//

#include "gptc/Runtime/Program.h"

#include <algorithm>
#include <limits>

namespace gptc::rt {

namespace {

constexpr int64_t kAlign = 256;

int64_t alignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Interval {
  int function = -1; ///< -1: never touched; -2: touched by several
  int first = std::numeric_limits<int>::max(), last = -1;
};

} // namespace

void planMemory(Program &p) {
  size_t n = p.buffers.size();
  std::vector<Interval> live(n);
  for (size_t f = 0; f < p.functions.size(); ++f) {
    const std::vector<std::pair<int, int>> ranges =
        liveRanges(p, p.functions[f]);
    for (size_t id = 0; id < n; ++id) {
      auto [first, last] = ranges[id];
      if (first < 0)
        continue;
      Interval &iv = live[id];
      if (iv.function == -1)
        iv.function = int(f);
      else if (iv.function != int(f))
        iv.function = -2;
      iv.first = std::min(iv.first, first);
      iv.last = std::max(iv.last, last);
    }
  }

  // Persistent buffers, and any temp that several functions touch (the
  // lowering never makes one, but the plan must stay correct if it did).
  int64_t top = 0;
  std::vector<int> temps;
  for (size_t i = 0; i < n; ++i) {
    Buffer &b = p.buffers[i];
    if (b.viewOf >= 0)
      continue;
    if (b.role == Role::Temp && live[i].function >= 0) {
      temps.push_back(int(i));
      continue;
    }
    b.offset = top;
    top += alignUp(b.bytes());
  }

  int64_t tempBase = top;
  std::stable_sort(temps.begin(), temps.end(), [&](int a, int b) {
    return p.buffers[a].bytes() > p.buffers[b].bytes();
  });
  std::vector<int> placed;
  std::vector<std::pair<int64_t, int64_t>> busy; // [begin, end) of conflicts
  for (int t : temps) {
    int64_t size = alignUp(p.buffers[t].bytes());
    const Interval &it = live[t];
    busy.clear();
    for (int o : placed) {
      const Interval &io = live[o];
      if (io.function == it.function && io.first <= it.last &&
          it.first <= io.last)
        busy.push_back({p.buffers[o].offset,
                        p.buffers[o].offset + alignUp(p.buffers[o].bytes())});
    }
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, bestGap = std::numeric_limits<int64_t>::max();
    int64_t cursor = tempBase;
    for (auto [begin, end] : busy) {
      if (begin > cursor && begin - cursor >= size &&
          begin - cursor < bestGap) {
        best = cursor;
        bestGap = begin - cursor;
      }
      cursor = std::max(cursor, end);
    }
    p.buffers[t].offset = best >= 0 ? best : cursor;
    top = std::max(top, p.buffers[t].offset + size);
    placed.push_back(t);
  }

  for (size_t i = 0; i < n; ++i)
    if (p.buffers[i].viewOf >= 0)
      p.buffers[i].offset = p.buffers[p.root(int(i))].offset;
  p.arenaBytes = alignUp(top);
}

} // namespace gptc::rt
