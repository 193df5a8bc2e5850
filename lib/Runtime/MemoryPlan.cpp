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
    std::vector<int64_t> delta(n + 1, 0);
    for (size_t b = 0; b < p.buffers.size(); ++b)
      if (auto [first, last] = ranges[b];
          first >= 0 && p.buffers[b].role == Role::Temp) {
        delta[first] += p.buffers[b].bytes();
        delta[std::min<size_t>(size_t(last) + 1, n)] -= p.buffers[b].bytes();
      }
    int64_t live = 0;
    for (size_t l = 0; l < n; ++l)
      s.tempsLive = std::max(s.tempsLive, live += delta[l]);
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
  out += row("arena total", s.arena) + "\n";
  return out;
}

} // namespace gptc::rt
