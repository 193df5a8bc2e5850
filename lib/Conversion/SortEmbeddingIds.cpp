//===- SortEmbeddingIds.cpp - embedding gradients from ids sorted once ----===//
//
// An embedding_grad launch (the table gradient's scatter-add) whose ids
// fit sort_ids' keys (exec::idsSortable: GPT-2's 16,384 positions of
// 50,257 rows) reads them sorted: a sort_ids launch, placed where its ids
// are last written (the top of the function for the step's input ids),
// writes the keys id · 2^bits + position into a temp of its own, and the
// embedding_grad reads those in the ids' place, `position_bits` saying so.
// Its kernel then reads dy's rows of the hits alone, where the unsorted
// one's blocks each scan every id (kernels/embedding.cuh). Placed at the
// top, the sort has nothing to wait for, and gpt-plan-streams runs it on
// the side stream beside the forward.
//
// One sort for each ids buffer and table height in a function (each of
// grads and grads_accumulate has its own: temps are one function's).
//
//===----------------------------------------------------------------------===//

#include "gptc/Conversion/LowerToKernels.h"

#include "gptc/Executor/Kernels.h"

#include <algorithm>
#include <cstddef>
#include <map>

namespace gptc {

int sortEmbeddingIds(rt::Program &p) {
  int sorted = 0;
  for (rt::Function &f : p.functions) {
    // (ids buffer, rows) -> the keys buffer, and where each sort goes.
    std::map<std::pair<int, int64_t>, int> keysOf;
    std::vector<std::pair<size_t, rt::Launch>> sorts;
    for (size_t i = 0; i < f.launches.size(); ++i) {
      rt::Launch &l = f.launches[i];
      if (l.kernel != "embedding_grad" || l.ints.count("position_bits") ||
          l.inputs.size() < 2 || l.outputs.size() != 1)
        continue;
      const rt::Buffer &ids = p.buffers[l.inputs[1]];
      const rt::Buffer &table = p.buffers[l.outputs[0]];
      if (ids.dtype != rt::DType::I32 || table.shape.size() != 2 ||
          !exec::idsSortable(ids.numel(), table.shape[0]))
        continue;
      const int64_t rows = table.shape[0];
      const int bits = exec::sortedIdPositionBits(ids.numel());
      auto [it, fresh] = keysOf.try_emplace({l.inputs[1], rows}, -1);
      if (fresh) {
        rt::Buffer keys;
        keys.name = ids.name + ".sorted";
        keys.dtype = rt::DType::I32;
        keys.shape = {ids.numel()};
        p.buffers.push_back(std::move(keys));
        it->second = int(p.buffers.size() - 1);
        rt::Launch sort;
        sort.kernel = "sort_ids";
        sort.inputs = {l.inputs[1]};
        sort.outputs = {it->second};
        sort.ints["rows"] = rows;
        sort.ints["position_bits"] = bits;
        sort.loc = l.loc;
        // After the last launch before this one that writes the ids.
        size_t at = 0;
        const int root = p.root(l.inputs[1]);
        for (size_t j = 0; j < i; ++j)
          for (int out : f.launches[j].outputs)
            if (p.root(out) == root)
              at = j + 1;
        sorts.emplace_back(at, std::move(sort));
      }
      l.inputs[1] = it->second;
      l.ints["position_bits"] = bits;
      ++sorted;
    }
    // Last first, so that the earlier places stand.
    std::stable_sort(
        sorts.begin(), sorts.end(),
        [](const auto &a, const auto &b) { return a.first < b.first; });
    for (auto s = sorts.rbegin(); s != sorts.rend(); ++s)
      f.launches.insert(f.launches.begin() + std::ptrdiff_t(s->first),
                        std::move(s->second));
  }
  return sorted;
}

} // namespace gptc
