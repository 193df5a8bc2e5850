//===- EmitTemplates.cpp - instantiations of kernels/*.cuh ----------------===//
//
// Launches whose algorithm lives in a template (embeddings, layernorm,
// reductions, cross-entropy, attention): the wrapper passes shapes and
// attributes as template arguments and declares the module-scope scratch
// the cross-block reductions need.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

namespace gptc::cuda::detail {

//===----------------------------------------------------------------------===//
// Template kernels
//===----------------------------------------------------------------------===//

void Emitter::emitEmbedding() {
  expectArity(2, 1);
  const Shape &table = in(0).shape;
  if (table.size() != 2 || in(1).dtype != DType::I32)
    unsupported("expected a [V, C] table and i32 ids");
  useHeader("embedding.cuh");
  begin(entry, 256);
  int64_t positions = in(1).numel();
  os << "  embeddingForward<" << table[1] << ", " << i64Literal(positions)
     << ", " << table[0] << ">(in0, in1, out0);\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(ceilDiv(positions * table[1], 256));
}

void Emitter::emitEmbeddingGrad() {
  // dy, ids[, the addend: the tied lm_head's gradient][, with `accumulate`
  // (grads_accumulate) the sum it adds to, its own result]
  const bool accumulate = rt::accumulates(l);
  const size_t sum = accumulate ? 1 : 0;
  const bool addend = l.inputs.size() == 3 + sum;
  const size_t operands = addend ? 3 : 2;
  expectArity(operands + sum, 1);
  const Shape &table = out(0).shape;
  if (table.size() != 2 || in(1).dtype != DType::I32)
    unsupported("expected a [V, C] result and i32 ids");
  if (addend && (in(2).dtype != DType::F32 || out(0).dtype != DType::F32))
    unsupported("an addend needs a float32 addend and result");
  if (accumulate && (in(operands).dtype != DType::F32 ||
                     out(0).dtype != DType::F32 ||
                     storageOf(p, l.inputs.back()) != storageOf(p, l.outputs[0])))
    unsupported("accumulating needs a float32 result as its last operand");
  useHeader("embedding.cuh");
  int64_t C = table[1];
  // Blocks of up to 32 rows (strided) by a 256-column slice
  // (kernels/embedding.cuh): 32 KiB of float accumulators, whatever C is.
  const int64_t rows = 32, slice = 256, threads = 128;
  if (in(1).numel() * C >= (int64_t(1) << 31))
    unsupported("dy has " + std::to_string(in(1).numel() * C) +
                " elements; the kernel's offsets are 32-bit");
  // 5 blocks an SM: 96 registers (104 left alone, 4 blocks), no spill.
  begin(entry, threads, 5);
  os << "  embeddingBackward<" << C << ", " << i64Literal(in(1).numel()) << ", "
     << table[0] << ", " << rows << ">(in0, in1, out0"
     << (addend ? ", in2" : accumulate ? ", nullptr" : "")
     << (accumulate ? ", in" + std::to_string(operands) : "") << ");\n}\n";
  l.block[0] = threads;
  l.grid[0] = toGrid(ceilDiv(table[0], rows) * ceilDiv(C, slice));
}

void Emitter::emitLayernorm() {
  expectArity(3, 1);
  int64_t C = in(0).shape.back(), rows = in(0).numel() / C;
  useHeader("layernorm.cuh");
  begin(entry, 256, opts.layernormBlocks);
  os << "  layernormForward<" << C << ", " << i64Literal(rows)
     << ">(in0, in1, in2, out0, " << floatLiteral(floatAttr("epsilon", 1e-5))
     << ");\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(ceilDiv(rows, 8));
}

int Emitter::layernormGradLaunch(int64_t rows, int64_t C, int64_t sums) {
  // Each warp's dgamma/dbeta (and epilogue) sums in shared memory: 8 warps
  // a block while two blocks fit in an H100's SM (C up to 1536 with two
  // sums, 1024 with three), as many as fit for wider rows (GPT-2 large's
  // 1280 with a bias gradient: 6).
  const int64_t warpBytes = 4 * sums * C;
  int64_t warps = 8;
  while (warps > 1 && warps * warpBytes > kLayernormGradSharedBytes)
    --warps;
  if (warpBytes > kLayernormGradSharedBytes)
    unsupported("rows of " + std::to_string(C) + " elements: one warp's " +
                std::to_string(sums) + " column sums take " +
                std::to_string(warpBytes) + " bytes of shared memory, over " +
                std::to_string(kLayernormGradSharedBytes));
  int64_t blocks = std::min<int64_t>(ceilDiv(rows, warps), kLayernormGradBlocks);
  int64_t groups = ceilDiv(blocks, kLayernormGradGroup);
  pre << "// Column-sum partials (dgamma, dbeta"
      << (sums > 2 ? ", the epilogue's" : "") << "): a block's, then a\n"
      << "// group's of " << kLayernormGradGroup
      << " blocks; the groups' arrival counters and the last group's.\n";
  deviceScratch("float", "gptcPartials", blocks * sums * C);
  deviceScratch("float", "gptcGroupPartials", groups * sums * C);
  deviceScratch("unsigned", "gptcCounters", groups + 1);
  pre << "\n";
  l.block[0] = uint32_t(32 * warps);
  l.grid[0] = toGrid(blocks);
  l.sharedBytes = uint32_t(warps * warpBytes);
  return int(32 * warps);
}

std::string Emitter::layernormGradStaging(int64_t C) {
  if (!opts.layernormStaged)
    return "";
  // A row of x, then one of dy, each 16-byte aligned (layernorm.cuh's
  // kLayernormStageBytes).
  auto row16 = [&](rt::DType t) {
    return ceilDiv(C * rt::dtypeBytes(t), 16) * 16;
  };
  const int64_t stage = row16(in(0).dtype) + row16(in(2).dtype);
  const int64_t bytes = l.sharedBytes + l.block[0] / 32 * stage;
  // (Rows not in chunks of 4, or a stage past two blocks an SM: unstaged,
  // the same source as without the option, so no twin.)
  if (layernormChunk(C) != 4 || bytes > kLayernormGradStagedSharedBytes)
    return "";
  l.sharedBytes = uint32_t(bytes);
  return ", true";
}

void Emitter::emitLayernormGrad() {
  expectArity(3, 3);
  int64_t C = in(0).shape.back(), rows = in(0).numel() / C;
  useHeader("layernorm.cuh");
  begin(entry, layernormGradLaunch(rows, C, 2), layernormGradBlocks());
  os << "  layernormBackward<" << C << ", " << i64Literal(rows) << ", "
     << kLayernormGradGroup << layernormGradStaging(C)
     << ">(in0, in1, in2, out0, out1, out2, "
     << floatLiteral(floatAttr("epsilon", 1e-5))
     << ", gptcPartials, gptcGroupPartials, gptcCounters);\n}\n";
}

void Emitter::emitReduceSum() {
  expectArity(1, 1);
  // A corner (gpt.reduce_sum's `corner`) is summed where it lies: its
  // shape, the whole operand's strides.
  const Shape &whole = in(0).shape, &y = out(0).shape;
  auto corner = l.lists.find("corner");
  const Shape &x = corner == l.lists.end() ? whole : corner->second;
  if (x.size() != whole.size())
    unsupported("the corner is not of the operand's rank");
  for (size_t d = 0; d < x.size(); ++d)
    if (x[d] < 1 || x[d] > whole[d])
      unsupported("the corner does not fit the operand");
  if (y.size() > x.size())
    unsupported("the result has a higher rank than the operand");
  // A dimension is kept if the result has it at full size.
  size_t offset = x.size() - y.size();
  std::vector<bool> kept(x.size(), false);
  for (size_t d = offset; d < x.size(); ++d) {
    kept[d] = y[d - offset] == x[d];
    if (!kept[d] && y[d - offset] != 1)
      unsupported("the result does not broadcast to the operand");
  }
  Shape keptShape, keptStrides, redShape, redStrides,
      xs = rowMajorStrides(whole);
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 1)
      continue;
    (kept[d] ? keptShape : redShape).push_back(x[d]);
    (kept[d] ? keptStrides : redStrides).push_back(xs[d]);
  }
  int64_t K = numel(y), R = x.empty() ? 1 : numel(x) / K;
  bool innerKept = !x.empty() && kept.back() && x.back() > 1;
  int kt = innerKept && K >= 32 ? 32 : 1;
  // Many results of few terms each (GPT-2's position-embedding gradient,
  // summed over the batch: 786,432 results of 16 terms at B=16): a result
  // a thread, its terms in order, where 8 threads a result each loaded 2
  // and met in a tree of barriers (40 µs a call on an H200, 27% of the
  // DRAM floor). At least 256 blocks, so that every SM has some.
  if (innerKept && R <= kReduceFewTerms && K >= 256 * 256)
    kt = 256;
  int rt = 256 / kt;
  int64_t gx = ceilDiv(K, kt);
  int64_t splits = std::clamp<int64_t>(
      std::min<int64_t>(ceilDiv(R, int64_t(rt) * 8),
                        std::max<int64_t>(1, 1024 / gx)),
      1, 1024);
  useHeader("reduce.cuh");

  pre << "// offset(k, r): the input offset of term r of result k.\n"
      << "struct Index {\n  static __device__ __forceinline__ i64 offset(i64 k, "
         "i64 r) {\n    i64 o = 0;\n";
  auto decompose = [&](const Shape &shape, const Shape &strides,
                       const char *var) {
    for (size_t d = shape.size(); d-- > 0;) {
      pre << "    o += " << var << " % " << shape[d] << " * "
          << i64Literal(strides[d]) << ";\n";
      if (d > 0)
        pre << "    " << var << " /= " << shape[d] << ";\n";
    }
  };
  decompose(keptShape, keptStrides, "k");
  decompose(redShape, redStrides, "r");
  pre << "    (void)k;\n    (void)r;\n    return o;\n  }\n};\n\n";
  if (splits > 1) {
    deviceScratch("float", "gptcPartials", splits * K);
    deviceScratch("unsigned", "gptcCounters", gx);
    pre << "\n";
  }
  begin(entry, 256);
  os << "  reduceSum<Index, " << i64Literal(K) << ", " << i64Literal(R) << ", "
     << kt << ", " << splits << ">(in0, out0, "
     << (splits > 1 ? "gptcPartials, gptcCounters" : "nullptr, nullptr")
     << ");\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(gx);
  l.grid[1] = uint32_t(splits);
}

void Emitter::emitCrossEntropy(bool withGrad) {
  expectArity(withGrad ? 3 : 2, withGrad ? 2 : 1);
  int64_t V = in(0).shape.back(), rows = in(1).numel();
  if (in(0).numel() != rows * V || in(1).dtype != DType::I32)
    unsupported("logits are not [positions, V] of i32 targets");
  int64_t classes = intAttr("num_classes", V);
  bool hasIgnore = l.ints.count("ignore_index");
  int64_t ignore = intAttr("ignore_index", 0);
  useHeader("cross_entropy.cuh");
  int threads = V >= 8192 ? 512 : 128;
  pre << "// Per-row loss terms and the arrival counter.\n";
  deviceScratch("double", "gptcLosses", rows);
  deviceScratch("unsigned", "gptcCounter", -1);
  pre << "\n";
  // Two 512-thread blocks an SM (64 registers a thread): while one block
  // waits at a barrier between the passes, the other's loads keep DRAM busy.
  begin(entry, threads, 2);
  // 8-element chunks (16-byte accesses) when rows are a multiple of 8 long
  // (the padded vocabulary's always are), else one element at a time.
  int vec = V % 8 == 0 ? 8 : 1;
  std::string consts = std::to_string(V) + ", " + std::to_string(classes) +
                       ", " + i64Literal(rows) + ", " + i64Literal(ignore) +
                       ", " + (hasIgnore ? "true" : "false") + ", " +
                       std::to_string(vec);
  // The gradient keeps 2-byte rows in shared memory between its passes
  // (kStash): V·2 bytes, at most 112 KiB so that two blocks fit an H100 SM.
  const bool stash = withGrad && vec == 8 && V * 2 <= 112 * 1024 &&
                     (in(0).dtype == DType::BF16 || in(0).dtype == DType::F16);
  // The max-first form (EmitOptions::maxFirstCrossEntropy): bf16 only.
  const bool maxFirst = stash && opts.maxFirstCrossEntropy &&
                        in(0).dtype == DType::BF16 &&
                        out(1).dtype == DType::BF16;
  if (withGrad)
    os << "  crossEntropyWithGrad<" << consts << (stash ? ", true" : "")
       << (maxFirst ? ", true" : "")
       << ">(in0, in1, in2, out0, out1, gptcLosses, &gptcCounter);\n}\n";
  else
    os << "  crossEntropy<" << consts
       << ">(in0, in1, out0, gptcLosses, &gptcCounter);\n}\n";
  if (out(0).dtype != DType::F32 || (withGrad && in(2).dtype != DType::F32))
    unsupported("the loss and dloss must be f32");
  l.block[0] = threads;
  l.grid[0] = toGrid(rows);
  if (stash)
    l.sharedBytes = uint32_t(V * 2);
}

/// What differs between the [B, H, T, D] and the packed attention ops: the
/// sizes, the HeadRows type of each operand group (attention.cuh) and the
/// kernel's pointer arguments.
struct Emitter::AttentionLayout {
  int64_t D, T, S, heads; ///< heads = B·H
  std::string lq, lk, lo; ///< q and dq; k, v, dk and dv; out and dout
  std::string args; ///< q, k, v, out, lse or q, k, v, lse, dout, delta, dq, dk, dv
  bool bf16;        ///< q, k, v (and dout) are bf16
  bool aligned16;         ///< every row start is 16-byte aligned
};

/// HeadRows of [heads, rows, D] contiguous.
static std::string contiguousRows(int64_t rows, int64_t D) {
  return "HeadRows<1, " + std::to_string(D) + ", 0, " + i64Literal(rows * D) +
         ">";
}

/// HeadRows of H heads of D side by side in rows `width` apart, T rows a
/// batch: packed [B, T, width] (c_attn's output, out and dout).
static std::string packedRows(int64_t H, int64_t width, int64_t D, int64_t T) {
  return "HeadRows<" + std::to_string(H) + ", " + i64Literal(width) + ", " +
         std::to_string(D) + ", " + i64Literal(T * width) + ">";
}

/// sizeof(AtomicBackwardShared<D, keyTiles>) (attention_backward_mma.cuh): 64 x
/// (D + 8) bf16 tiles of q and dout twice and of k keyTiles times, twice
/// keyTiles 64 x 72 tiles of dS, and 4 x 64 floats of row terms.
static uint32_t atomicSharedBytes(int64_t D, int keyTiles) {
  return uint32_t((4 + keyTiles) * 64 * (D + 8) * 2 +
                  2 * keyTiles * 64 * 72 * 2 + 4 * 64 * 4);
}

/// sizeof(WgmmaBackwardShared<D>) (attention_backward_wgmma.cuh): six 64 x D
/// bf16 tiles (q and dout twice, k, v), a 64 x 72 bf16 tile of dSᵀ, and 4 x 64
/// floats of row terms; with `bulk` (WgmmaBulkBackwardShared) 2,048 floats
/// more, where dq's shares wait for their bulk reductions.
static uint32_t wgmmaBackwardSharedBytes(int64_t D, bool bulk) {
  return uint32_t(6 * 64 * D * 2 + 64 * 72 * 2 + 4 * 64 * 4 +
                  (bulk ? 2048 * 4 : 0));
}

/// sizeof(WgmmaSplitShared<D>) (attention_backward_wgmma_split.cuh): six 64 x D
/// bf16 tiles (two kept, two walked twice) and 4 x 64 floats of row terms.
static uint32_t wgmmaSplitSharedBytes(int64_t D) {
  return uint32_t(6 * 64 * D * 2 + 4 * 64 * 4);
}

/// sizeof(WgmmaStoredDsShared<D>) (attention_backward_wgmma_split.cuh): two 64
/// x D bf16 tiles of k and two 64 x 72 of dSᵀ.
static uint32_t wgmmaStoredDsSharedBytes(int64_t D) {
  return uint32_t(2 * 64 * D * 2 + 2 * 64 * 72 * 2);
}

/// alignof of the wgmma backwards' shared memory (wg::OperandTile): 1,024
/// where D is 64 (swizzled tiles), 128 where it is 32 (core matrices).
/// wg::dynamicSharedAs starts it at such a boundary, so their launches ask
/// for this less 16 bytes more than its size.
static uint32_t wgmmaSharedAlign(int64_t D) { return D == 64 ? 1024 : 128; }

/// sizeof(WgmmaKeys128Shared<D>): q's core-matrix tile and 8 operand tiles
/// (two buffers of two 64-key tiles of k and of v), each 64·D bf16; at
/// D = 64 the operand tiles are 1,024-byte aligned (swizzled), and q's 8 KB
/// keeps them so.
static uint32_t wgmmaKeys128SharedBytes(int64_t D) {
  return uint32_t(9 * 64 * D * 2);
}

/// The heads a group of a tensor-core attention grid takes together
/// (blockWork in attention.cuh): the most that divide `heads` and keep what
/// their blocks share, `bytes` a head, within `budget` bytes of L2
/// (EmitOptions::attentionL2Bytes).
static int64_t headsPerGroup(int64_t heads, int64_t bytes, int64_t budget) {
  const int64_t most = std::max<int64_t>(1, budget / bytes);
  for (int64_t g = std::min(most, heads); g > 1; --g)
    if (heads % g == 0)
      return g;
  return 1;
}

void Emitter::emitAttention(const AttentionLayout &a, bool grad) {
  // HeadRows::head computes element offsets in 32 bits.
  for (size_t i = 0; i < l.inputs.size(); ++i)
    if (in(i).numel() >= (int64_t(1) << 32))
      unsupported("an operand has 2^32 elements or more (head offsets are "
                  "32-bit)");
  for (size_t i = 0; i < l.outputs.size(); ++i)
    if (out(i).numel() >= (int64_t(1) << 32))
      unsupported("a result has 2^32 elements or more (head offsets are "
                  "32-bit)");
  bool causal = intAttr("causal", 0) != 0;
  std::string scale = floatLiteral(floatAttr("scale", 1.0));
  bool mma = a.bf16 && a.aligned16 && a.T % 64 == 0 && a.S % 64 == 0 &&
             a.D % 16 == 0 && a.D <= 64 && (!causal || a.T == a.S);
  // --attention-backward=atomic: FlashAttention-2's backward, dq summed
  // by atomics in module scratch (attentionBackwardAtomic), for the head
  // sizes its dq product splits over 4 warps.
  // --attention-backward=wgmma: the same on warpgroup MMA where the target
  // has it (attentionBackwardTensorCores), with the atomic kernel's scratch.
  using Fwd = AttentionForward;
  using Bwd = AttentionBackward;
  const Fwd fwd = opts.attentionForward;
  const Bwd bwd = opts.attentionBackward;
  const bool wgmmaBwd = bwd == Bwd::Wgmma || bwd == Bwd::WgmmaOverlap ||
                        bwd == Bwd::WgmmaBulk || bwd == Bwd::WgmmaOrdered;
  bool atomic = grad && mma &&
                (bwd == Bwd::Atomic || bwd == Bwd::Atomic128 || wgmmaBwd) &&
                (a.D == 16 || a.D == 32 || a.D == 64);
  const bool wgmmaGrad = atomic && wgmmaBwd;
  // --attention-backward=wgmma-split: the split kernel's blocks (no
  // atomics: deterministic) on warpgroup MMA where the target has it
  // (attentionBackwardSplitTensorCores), else the split kernel itself.
  const bool wgmmaSplit = grad && mma &&
                          (bwd == Bwd::WgmmaSplit || bwd == Bwd::WgmmaSplitSs ||
                           bwd == Bwd::WgmmaDs);
  const bool wgmmaSplitD = wgmmaSplit && (a.D == 32 || a.D == 64);
  // --attention-backward=wgmma-ds: wgmma-split's dk/dv blocks store dSᵀ
  // for dq blocks that then need one product a tile pair rather than
  // three (attentionBackwardStoredDsTensorCores).
  const bool storedDs = wgmmaSplitD && bwd == Bwd::WgmmaDs;
  // --attention-backward=wgmma-split-ss: wgmma-split with the rows each
  // block keeps read from shared memory by every product, not held in
  // registers: 126 registers at D=64 (158 held), so 4 blocks an SM.
  const bool sharedRows = wgmmaSplitD && bwd == Bwd::WgmmaSplitSs;
  // --attention-backward=wgmma-overlap: dv and dk in flight longer, which
  // needs 170 registers at D=64, so 2 blocks an SM.
  const bool overlap = wgmmaGrad && bwd == Bwd::WgmmaOverlap;
  // --attention-backward=wgmma-bulk: dq's shares summed by bulk reductions
  // from 8 KB more of shared memory (still 3 blocks an SM).
  const bool bulk =
      wgmmaGrad && (bwd == Bwd::WgmmaBulk || bwd == Bwd::WgmmaOrdered);
  // --attention-backward=wgmma-ordered: the same shares added in one order
  // (deterministic), to two copies of the sums, each add waiting for the
  // one before it (a count a tile and copy).
  const bool ordered = bulk && bwd == Bwd::WgmmaOrdered;
  // --attention-forward=wgmma-overlap: a third V buffer, the same 4 blocks
  // an SM.
  const bool overlapForward = !grad && mma && fwd == Fwd::WgmmaOverlap;
  // --attention-backward=atomic128: the same with 128 keys a block of 8
  // warps, as FlashAttention-2 takes them, where S is a multiple of 128
  // and the dq product has two n-tiles a warp (D of 32 or 64).
  const int keyTiles = atomic && bwd == Bwd::Atomic128 && a.S % 128 == 0 &&
                               (a.D == 32 || a.D == 64)
                           ? 2
                           : 1;
  // The attention headers this direction's kernels take (attention.cuh
  // lists them): the simple kernels need the first alone.
  useHeader("attention.cuh");
  if (mma) {
    useHeader("attention_mma.cuh");
    useHeader("attention_wgmma.cuh");
    if (grad) {
      useHeader("attention_backward_mma.cuh");
      useHeader("attention_backward_wgmma.cuh");
      useHeader("attention_backward_wgmma_split.cuh");
    } else {
      useHeader("attention_forward_mma.cuh");
      useHeader("attention_forward_wgmma.cuh");
    }
  }
  std::string tmpl = std::to_string(a.D) + ", " + std::to_string(a.T) + ", " +
                     std::to_string(a.S) + ", " + (causal ? "true" : "false") +
                     ", " + a.lq + ", " + a.lk + ", " + a.lo;
  // The tensor-core forward at 4 blocks an SM fits in 128 registers (left
  // alone, ptxas spills at small head sizes). The backward wants 216 for
  // no spills at D=64, but at 3 blocks an SM (168 registers, then a spill
  // of 84 bytes) it ran 20% faster on an H100 (1075 against 1344 µs, GPT-2
  // at T=1024). Taking the query tiles in halves, it no longer spills on
  // sm_90a, nor does the atomic backward.
  // --attention-forward=mma128: 8 warps, 128 queries a block, at 2
  // blocks an SM (the same 128 registers a thread). --attention-forward=
  // mma2: 4 warps of 32 queries, 128 a block, at 2 blocks an SM (up to
  // 255 registers a thread).
  const bool wgmmaForward =
      attentionAlgorithmNeedsSm90a(attentionAlgorithmLabel(fwd));
  const bool rows128 = !grad && mma && a.T % 128 == 0;
  const bool rowPairs = rows128 && fwd == Fwd::Mma2;
  const bool wide = rows128 && fwd == Fwd::Mma128;
  // --attention-forward=wgmma128: two warpgroups, 128 queries a block,
  // share each key tile's copies, at 2 blocks an SM (mma128 where the
  // target has no wgmma).
  const bool wgmmaWide = rows128 && fwd == Fwd::Wgmma128;
  // --attention-forward=wgmma-k128: 128 keys a step, two 64-key tiles of
  // k and v double-buffered in dynamic shared memory, at 3 blocks an SM.
  const bool keys128 = !grad && mma && fwd == Fwd::WgmmaK128 && a.S % 128 == 0;
  // --attention-forward=wgmma-ss: q read from shared memory by the scores'
  // wgmma, no fragments held: 90 registers at D = 64, 5 blocks an SM.
  const bool sharedQuery = !grad && mma && fwd == Fwd::WgmmaSs;
  // --attention-forward=mma-pipe: the next tile's scores under this one's
  // softmax, 32 registers more: 3 blocks an SM (168 registers).
  const bool pipelined = !grad && mma && fwd == Fwd::MmaPipe;
  // Two key tiles a block: 91 KB of shared memory, so at most 2 blocks an
  // SM, and 128 registers a thread spill: 1 block, 8 warps.
  const int threads =
      !mma ? 64 : wide || wgmmaWide || keyTiles == 2 ? 256 : 128;
  const int blocksPerSM = !mma                            ? 0
                          : keyTiles == 2                 ? 1
                          : sharedQuery                   ? 5
                          : sharedRows                    ? 4
                          : overlap                       ? 2
                          : grad || pipelined || keys128  ? 3
                          : wide || rowPairs || wgmmaWide ? 2
                                                          : 4;
  begin(entry, threads, blocksPerSM);
  // With a wgmma algorithm the forward picks wgmma or mma.sync by the
  // target NVRTC compiles for (the runtime may compile the same source for
  // another); without, mma.sync.
  const char *impl = !mma           ? "Simple"
                     : storedDs     ? "StoredDsTensorCores"
                     : wgmmaSplit   ? "SplitTensorCores"
                     : grad         ? "Mma"
                     : keys128      ? "Keys128TensorCores"
                     : wgmmaForward ? "TensorCores"
                     : pipelined    ? "MmaPipelined"
                                    : "Mma";
  if (atomic) {
    impl = wgmmaGrad ? "TensorCores" : "Atomic";
    // dq's float32 sums ([heads, T, D]) and each query tile's arrivals,
    // left zero by every launch for the next.
    deviceScratch("float", "gptcDqSum",
                  a.heads * a.T * a.D * (ordered ? 2 : 1));
    deviceScratch("unsigned", "gptcArrivals", a.heads * (a.T / 64));
    if (ordered)
      deviceScratch("unsigned", "gptcDqTurns", a.heads * (a.T / 64) * 2);
    pre << "static_assert(sizeof(AtomicBackwardShared<" << a.D
        << (keyTiles == 2 ? ", 2" : "")
        << ">) == " << atomicSharedBytes(a.D, keyTiles)
        << ", \"the launch's dynamic shared memory\");\n";
    if (wgmmaGrad && (a.D == 32 || a.D == 64)) {
      const char *type =
          bulk ? "WgmmaBulkBackwardShared" : "WgmmaBackwardShared";
      pre << "#if GPTC_WGMMA\nstatic_assert(sizeof(" << type << "<" << a.D
          << ">) == " << wgmmaBackwardSharedBytes(a.D, bulk) << " && alignof("
          << type << "<" << a.D << ">) == " << wgmmaSharedAlign(a.D)
          << ", \"the wgmma backward's dynamic shared memory\");\n#endif\n";
    }
    pre << "\n";
  }
  if (keys128 && (a.D == 32 || a.D == 64))
    pre << "#if GPTC_WGMMA\nstatic_assert(sizeof(WgmmaKeys128Shared<" << a.D
        << ">) == " << wgmmaKeys128SharedBytes(a.D)
        << " && alignof(WgmmaKeys128Shared<" << a.D
        << ">) == " << wgmmaSharedAlign(a.D)
        << ", \"the launch's dynamic shared memory\");\n#endif\n\n";
  if (wgmmaSplitD) {
    // The structs the kernel lays its dynamic shared memory out as.
    auto sharedIs = [&](const char *type, uint32_t bytes, const char *what) {
      pre << "static_assert(sizeof(" << type << "<" << a.D << ">) == " << bytes
          << " && alignof(" << type << "<" << a.D
          << ">) == " << wgmmaSharedAlign(a.D) << ", \"" << what << "\");\n";
    };
    pre << "#if GPTC_WGMMA\n";
    sharedIs("WgmmaSplitShared", wgmmaSplitSharedBytes(a.D),
             "the launch's dynamic shared memory");
    if (storedDs)
      sharedIs("WgmmaStoredDsShared", wgmmaStoredDsSharedBytes(a.D),
               "the dq blocks' dynamic shared memory");
    pre << "#endif\n\n";
  }
  if (storedDs) {
    // Each tile pair's dSᵀ (64 x 64 bf16, as pairs) and each query tile's
    // count of dk/dv blocks done with it, left zero by every launch.
    const int64_t qt = a.T / 64, kt = a.S / 64;
    const int64_t tiles = causal ? qt * (qt + 1) / 2 : qt * kt;
    deviceScratch("unsigned", "gptcDsT", a.heads * tiles * 2048);
    deviceScratch("unsigned", "gptcDsReady", a.heads * qt);
    pre << "\n";
  }
  os << "  attention" << (grad ? "Backward" : "Forward") << impl << "<" << tmpl
     << (wide                                      ? ", 8"
         : rowPairs                                ? ", 4, 2"
         : wgmmaWide                               ? ", false, 2"
         : sharedQuery                             ? ", false, 1, true"
         : keyTiles == 2                           ? ", 2"
         : overlap || overlapForward || sharedRows ? ", true"
         : ordered                                 ? ", false, true, true"
         : bulk                                    ? ", false, true"
                                                   : "")
     << ">(" << a.args << ", " << scale
     << (ordered    ? ", gptcDqSum, gptcArrivals, gptcDqTurns"
         : atomic   ? ", gptcDqSum, gptcArrivals"
         : storedDs ? ", gptcDsT, gptcDsReady"
                    : "")
     << ");\n}\n";
  l.block[0] = uint32_t(threads);
  const int64_t ranks = atomic ? a.S / (64 * keyTiles)
                        : grad ? ceilDiv(a.T, 64) + ceilDiv(a.S, 64)
                               : ceilDiv(a.T, wide || rowPairs || wgmmaWide
                                                  ? 128
                                                  : 64);
  if (mma) {
    // (heads of a group, ranks, groups), blockWork's order. A head's
    // blocks share k and v (forward); q, k, v, dout and the row terms
    // (split backward); q, dout, the row terms and dq's float32 sums
    // (atomic; two copies of the sums, ordered).
    const int64_t shared = atomic ? (ordered ? 12 : 8) * a.T * a.D + 8 * a.T
                           : grad ? 4 * (a.T + a.S) * a.D + 8 * a.T
                                  : 4 * a.S * a.D;
    const int64_t group =
        headsPerGroup(a.heads, shared, opts.attentionL2Bytes);
    if (a.heads / group > 65535)
      unsupported("more than 65535 groups of heads for the grid's z");
    l.grid[0] = uint32_t(group);
    l.grid[1] = uint32_t(ranks);
    l.grid[2] = uint32_t(a.heads / group);
  } else {
    if (a.heads > 65535)
      unsupported("more than 65535 heads (B·H) for the grid's y");
    l.grid[0] = toGrid(ranks);
    l.grid[1] = uint32_t(a.heads);
  }
  if (atomic)
    l.sharedBytes = atomicSharedBytes(a.D, keyTiles);
  // The runtime may compile the source for a target without wgmma: the
  // launch has room for either kernel.
  if (wgmmaGrad && (a.D == 32 || a.D == 64))
    l.sharedBytes =
        std::max(l.sharedBytes, wgmmaBackwardSharedBytes(a.D, bulk) +
                                    wgmmaSharedAlign(a.D) - 16);
  // (The mma.sync forward the source falls back to off sm_90a has static
  // shared memory: it leaves this unused.)
  if (keys128 && (a.D == 32 || a.D == 64))
    l.sharedBytes = wgmmaKeys128SharedBytes(a.D) + wgmmaSharedAlign(a.D) - 16;
  // (the split kernel's shared memory is static: it leaves this unused)
  if (wgmmaSplitD)
    l.sharedBytes =
        std::max(wgmmaSplitSharedBytes(a.D),
                 storedDs ? wgmmaStoredDsSharedBytes(a.D) : 0u) +
        wgmmaSharedAlign(a.D) - 16;
}

void Emitter::emitFlashAttention(bool grad) {
  if (grad && l.inputs.size() == 6)
    unsupported("no delta operand (gpt.attention_row_dot's result, which "
                "gpt-autodiff writes)");
  expectArity(grad ? 7 : 3, grad ? 3 : 2);
  const Shape &q = in(0).shape, &k = in(1).shape;
  if (q.size() < 2 || k.size() != q.size())
    unsupported("q and k need rank 2 or more");
  if (grad && (in(4).dtype != DType::F32 || in(6).dtype != DType::F32))
    unsupported("lse and delta must be f32");
  AttentionLayout a;
  a.T = q[q.size() - 2];
  a.D = q.back();
  a.S = k[k.size() - 2];
  a.heads = numel(q) / (a.T * a.D);
  a.lq = a.lo = contiguousRows(a.T, a.D);
  a.lk = contiguousRows(a.S, a.D);
  // q, k, v, lse, dout, delta -> dq, dk, dv (out is delta's input only).
  a.args = grad ? "in0, in1, in2, in4, in5, in6, out0, out1, out2"
                : "in0, in1, in2, out0, out1";
  a.bf16 = in(0).dtype == DType::BF16 && in(1).dtype == DType::BF16 &&
           in(2).dtype == DType::BF16 &&
           (!grad || in(5).dtype == DType::BF16);
  a.aligned16 = a.D % 8 == 0; // 8 bf16s: rows start at multiples of D
  emitAttention(a, grad);
}

void Emitter::emitFlashAttentionQKV(bool grad) {
  if (grad && l.inputs.size() == 4)
    unsupported("no delta operand (gpt.attention_row_dot's result, which "
                "gpt-autodiff writes)");
  expectArity(grad ? 5 : 1, grad ? 1 : 2);
  const Shape &qkv = in(0).shape;
  int64_t H = intAttr("num_heads", 0);
  if (qkv.size() != 3 || H <= 0 || qkv[2] % (3 * H) != 0)
    unsupported("expected qkv [B, T, 3 * num_heads * head size]");
  if (grad && (in(2).dtype != DType::F32 || in(4).dtype != DType::F32))
    unsupported("lse and delta must be f32");
  AttentionLayout a;
  const int64_t B = qkv[0], T = qkv[1], C = qkv[2] / 3;
  a.T = a.S = T;
  a.D = C / H;
  a.heads = B * H;
  // Head h of q at column h·D of [B, T, 3C] rows (k and v: the pointer
  // moved by C and 2C); out, dout [B, T, C] rows.
  a.lq = a.lk = packedRows(H, 3 * C, a.D, T);
  a.lo = packedRows(H, C, a.D, T);
  const std::string c = i64Literal(C), c2 = i64Literal(2 * C);
  // qkv -> out, lse; qkv, out, lse, dout, delta -> dqkv (out is delta's
  // input only).
  a.args = grad ? "in0, in0 + " + c + ", in0 + " + c2 +
                      ", in2, in3, in4, out0, out0 + " + c + ", out0 + " + c2
                : "in0, in0 + " + c + ", in0 + " + c2 + ", out0, out1";
  a.bf16 = in(0).dtype == DType::BF16 &&
           (!grad || in(3).dtype == DType::BF16);
  // The tensor-core kernels load rows 16 bytes (8 bf16s) at a time: the
  // row strides (3C, C), the head offsets (h·D) and the part offsets (C,
  // 2C) must all be multiples of 8. Padded GPT-2 has C a multiple of 64
  // and D = 64; anything else takes the simple kernel.
  a.aligned16 = C % 8 == 0 && a.D % 8 == 0;
  emitAttention(a, grad);
}

void Emitter::emitAttentionRowDot() {
  expectArity(2, 1);
  const Shape &o = in(0).shape;
  int64_t H = intAttr("num_heads", 0);
  if (in(1).shape != o || in(1).dtype != in(0).dtype)
    unsupported("out and dout differ");
  if (out(0).dtype != DType::F32)
    unsupported("delta must be f32");
  // The layout of out: [B, H, T, D] contiguous, or packed [B, T, H·D].
  int64_t T, D, heads;
  std::string lo;
  if (o.size() == 4 && H == 0) {
    T = o[2], D = o[3], heads = o[0] * o[1];
    lo = contiguousRows(T, D);
  } else if (o.size() == 3 && H > 0 && o[2] % H == 0) {
    T = o[1], D = o[2] / H, heads = o[0] * H;
    lo = packedRows(H, o[2], D, T);
  } else {
    unsupported("expected out [B, H, T, D], or [B, T, C] with num_heads");
  }
  if (in(0).numel() >= (int64_t(1) << 32))
    unsupported("out has 2^32 elements or more (head offsets are 32-bit)");
  // 16-byte loads where every row starts 16 bytes aligned: 8 bf16s or f16s,
  // 4 floats.
  const bool narrow = in(0).dtype != DType::F32;
  const int64_t rowStride = o.size() == 4 ? D : o[2];
  const int width = narrow && D % 8 == 0 && rowStride % 8 == 0    ? 8
                    : !narrow && D % 4 == 0 && rowStride % 4 == 0 ? 4
                                                                  : 1;
  int lanes = 1; // the most lanes, a power of two up to 32, with a chunk each
  while (lanes < 32 && lanes * 2 * width <= D)
    lanes *= 2;
  useHeader("attention.cuh");
  begin(entry, 256);
  const int64_t rows = heads * T;
  os << "  attentionRowDot<" << D << ", " << T << ", " << i64Literal(rows)
     << ", " << lo << ", " << width << ", " << lanes << ", "
     << kRowDotRounds << ">(in0, in1, out0);\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(ceilDiv(rows, 256 / lanes * kRowDotRounds));
}

} // namespace gptc::cuda::detail
