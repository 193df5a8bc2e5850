//===- MemoryPlan.cpp - what a planned Program allocates ------------------===//

#include "gptc/Runtime/MemoryPlan.h"

#include "gptc/Support/Format.h"

#include <algorithm>

namespace gptc::rt {

namespace {

int64_t alignUp(int64_t n) { return (n + 255) / 256 * 256; }

std::string row(const std::string &name, int64_t bytes) {
  return "  " + name +
         std::string(name.size() < 32 ? 32 - name.size() : 1, ' ') +
         withThousands(bytes) + " bytes  " + mebibytes(bytes);
}

} // namespace

MemoryPlanSummary summarizePlan(const Program &p) {
  MemoryPlanSummary s;
  s.arena = p.arenaBytes;
  int64_t bound = 0;
  for (const Buffer &b : p.buffers)
    if (b.viewOf < 0 && b.role != Role::Temp) {
      s.bound[b.role] += alignUp(b.bytes());
      bound += alignUp(b.bytes());
    }
  s.temps = std::max<int64_t>(0, p.arenaBytes - bound);

  for (const Function &f : p.functions) {
    size_t n = f.launches.size();
    const std::vector<std::pair<int, int>> ranges = liveRanges(p, f);
    auto isTemp = [&](size_t b) {
      return ranges[b].first >= 0 && p.buffers[b].role == Role::Temp;
    };
    std::vector<int64_t> delta(n + 1, 0);
    for (size_t b = 0; b < p.buffers.size(); ++b)
      if (isTemp(b)) {
        delta[size_t(ranges[b].first)] += p.buffers[b].bytes();
        delta[std::min<size_t>(size_t(ranges[b].second) + 1, n)] -=
            p.buffers[b].bytes();
      }
    int64_t live = 0;
    int peak = -1;
    for (size_t l = 0; l < n; ++l)
      if ((live += delta[l]) > s.tempsLive) {
        s.tempsLive = live;
        peak = int(l);
      }
    if (peak < 0)
      continue; // no new peak in f
    s.peakFunction = f.name;
    s.peakLaunch = peak;
    s.peakLaunches = int(n);
    s.peakOp = opAt(f.launches[size_t(peak)]);
    std::vector<size_t> alive;
    for (size_t b = 0; b < p.buffers.size(); ++b)
      if (isTemp(b) && ranges[b].first <= peak && peak <= ranges[b].second)
        alive.push_back(b);
    s.peakTemps = int(alive.size());
    // Largest first; among equals, the one alive longest (the lower id).
    std::stable_sort(alive.begin(), alive.end(), [&](size_t x, size_t y) {
      return p.buffers[x].bytes() > p.buffers[y].bytes();
    });
    s.peakLargest.clear();
    for (size_t i = 0; i < alive.size() && i < kPeakLargest; ++i) {
      const Buffer &b = p.buffers[alive[i]];
      MemoryPlanSummary::LiveTemp t{bufferType(b), b.bytes(), ""};
      // Its first writer: the launch that starts its range writes it, or a
      // view of it (an output's root is the temp).
      t.writer = opAt(f.launches[size_t(ranges[alive[i]].first)]);
      s.peakLargest.push_back(std::move(t));
    }
  }
  return s;
}

std::string printMemoryPlan(const MemoryPlanSummary &s) {
  static const std::pair<Role, const char *> kRows[] = {
      {Role::Param, "params (fp32)"},   {Role::Grad, "gradients (fp32)"},
      {Role::AdamM, "AdamW m (fp32)"},  {Role::AdamV, "AdamW v (fp32)"},
      {Role::ParamCopy, "weight copies (bf16/fp16)"},
      {Role::Input, "inputs"},          {Role::Hyper, "hyper-parameters"},
      {Role::Output, "outputs"},        {Role::Constant, "constants"}};
  std::string out = "planned arena (what the runtime allocates):\n";
  for (const auto &[role, name] : kRows)
    if (auto it = s.bound.find(role); it != s.bound.end())
      out += row(name, it->second) + "\n";
  out += row("temps (planned, peak)", s.temps) + "  (alive at once " +
         withThousands(s.tempsLive) + ")\n";
  if (s.peakLaunch >= 0) {
    out += "    at " + s.peakFunction + " launch " +
           std::to_string(s.peakLaunch) + " of " +
           std::to_string(s.peakLaunches) + " (" + s.peakOp +
           "): " + std::to_string(s.peakTemps) + " temps, the largest:\n";
    for (const MemoryPlanSummary::LiveTemp &t : s.peakLargest) {
      std::string line = "      " + t.type;
      line += std::string(line.size() < 34 ? 34 - line.size() : 1, ' ');
      out += line + withThousands(t.bytes) + " bytes  from " + t.writer + "\n";
    }
  }
  out += row("arena total", s.arena) + "\n";
  return out;
}

} // namespace gptc::rt
