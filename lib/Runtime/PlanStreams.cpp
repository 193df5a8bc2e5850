//===- PlanStreams.cpp - gpt-plan-streams: weight gradients beside the rest ===//
//
// In the backward, each linear layer's weight gradient (xᵀ·dy, with its
// bias gradient) is a GEMM whose results only update reads: nothing later
// in grads waits for it. Such a GEMM goes on the side stream, so that it
// runs beside the next launches of the main stream (the input gradient's
// GEMM, a layernorm gradient, the attention backward) and fills the SMs
// they leave idle; a weight gradient's GEMM has few output tiles (768 x
// 2304 for c_attn) over a long K, and on its own leaves SMs idle.
//
// A side launch joins the main stream again before the next launch this
// pass moves (the side stream is in order anyway, and the join bounds how
// long its buffers are held), or before an earlier launch that writes what
// it reads or touches what it writes (by the buffers' roots: views share
// bytes), or at the function's end. A launch whose join would be the very
// next launch stays where it was: nothing would run beside it.
//
// The sorting of an embedding gradient's ids (sort_ids, which
// sortEmbeddingIds puts at the top of the function) goes there too: one
// block whose result only the table gradient at the backward's end reads,
// so it runs beside the forward; it joins before its reader at the latest.
//
// Everything stays in program order: the order is a valid schedule (the CPU
// backend runs it as it is); the streams only let the GPU run more at once.
//
//===----------------------------------------------------------------------===//

#include "gptc/Runtime/Program.h"

#include <algorithm>
#include <set>

namespace gptc::rt {

namespace {

/// The roots of the buffers a launch reads and writes.
struct Touches {
  std::set<int> reads, writes;
};

Touches touches(const Program &p, const Launch &l) {
  Touches t;
  for (int id : l.inputs)
    t.reads.insert(p.root(id));
  for (int id : l.outputs)
    t.writes.insert(p.root(id));
  return t;
}

bool meet(const std::set<int> &a, const std::set<int> &b) {
  return std::any_of(a.begin(), a.end(), [&](int x) { return b.count(x); });
}

/// Whether launch `later` must wait for side launch `side` to finish: it
/// writes what `side` reads or writes, or reads what `side` writes.
bool mustWait(const Touches &side, const Touches &later) {
  return meet(later.writes, side.reads) || meet(later.writes, side.writes) ||
         meet(later.reads, side.writes);
}

} // namespace

int planStreams(Program &p) {
  int moved = 0;
  for (Function &f : p.functions) {
    const int n = int(f.launches.size());
    std::vector<Touches> t;
    for (const Launch &l : f.launches)
      t.push_back(touches(p, l));
    // The candidates: GEMMs whose results no later launch reads, and the
    // ids' sorts.
    std::vector<bool> side(size_t(n), false);
    for (int i = 0; i < n; ++i) {
      if (f.launches[i].stream != 0)
        continue;
      if (!runsBeside(f.launches[i].kernel))
        continue;
      if (!isGemm(f.launches[i].kernel)) { // sort_ids: read later, joined
        side[size_t(i)] = true;            // before its reader at the latest
        continue;
      }
      bool readLater = false;
      for (int j = i + 1; j < n && !readLater; ++j)
        readLater = meet(t[j].reads, t[i].writes);
      side[size_t(i)] = !readLater;
    }
    // Last first, so that each launch's join sees which later ones moved.
    for (int i = n - 1; i >= 0; --i) {
      if (!side[size_t(i)])
        continue;
      int join = i + 1;
      while (join < n && !side[size_t(join)] && !mustWait(t[i], t[join]))
        ++join;
      if (join == i + 1) {
        side[size_t(i)] = false; // nothing could run beside it
        continue;
      }
      f.launches[i].stream = 1;
      f.launches[i].join = join;
      ++moved;
    }
  }
  return moved;
}

} // namespace gptc::rt
