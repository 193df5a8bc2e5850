//===- EmitTemplates.cpp - instantiations of kernels/*.cuh ----------------===//
//
// Launches whose algorithm lives in a template (embeddings, layernorm,
// reductions, cross-entropy; attention is EmitAttention.cpp's): the
// wrapper passes shapes and attributes as template arguments and declares
// the module-scope scratch the cross-block reductions need.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include "gptc/Executor/Kernels.h"

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
  // its own result, which it adds to: grads_accumulate's sum so far, or in
  // grads the tied lm_head's gradient, which its GEMM wrote there]
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
  if (in(1).numel() * C >= (int64_t(1) << 31))
    unsupported("dy has " + std::to_string(in(1).numel() * C) +
                " elements; the kernel's offsets are 32-bit");
  if (l.ints.count("position_bits")) {
    emitEmbeddingGradSorted(addend, accumulate, operands);
    return;
  }
  // Blocks of up to 32 rows (strided) by a 256-column slice
  // (kernels/embedding.cuh): 32 KiB of float accumulators, whatever C is.
  const int64_t rows = 32, slice = 256, threads = 128;
  // 5 blocks an SM: 96 registers (104 left alone, 4 blocks), no spill.
  begin(entry, threads, 5);
  os << "  embeddingBackward<" << C << ", " << i64Literal(in(1).numel()) << ", "
     << table[0] << ", " << rows << ">(in0, in1, out0"
     << (addend ? ", in2" : accumulate ? ", nullptr" : "")
     << (accumulate ? ", in" + std::to_string(operands) : "") << ");\n}\n";
  l.block[0] = threads;
  l.grid[0] = toGrid(ceilDiv(table[0], rows) * ceilDiv(C, slice));
}

// The sorted form (kernels/embedding.cuh): in(1) is sort_ids' keys. Blocks
// of 32 keys by 256-column slices, then (but for the in-place form, where
// rows no id hits keep their bytes) blocks of 128 rows that write the rows
// no key has. Scratch: each window's two pieces of rows that cross windows,
// and an arrival counter a window and slice.
void Emitter::emitEmbeddingGradSorted(bool addend, bool accumulate,
                                      size_t operands) {
  const Shape &table = out(0).shape;
  const int64_t C = table[1], V = table[0], positions = in(1).numel();
  const int64_t bits = intAttr("position_bits", -1);
  if (in(1).shape.size() != 1 || !exec::idsSortable(positions, V) ||
      bits != exec::sortedIdPositionBits(positions))
    unsupported("sorted ids of " + std::to_string(positions) +
                " positions and " + std::to_string(bits) +
                " position bits do not fit a table of " + std::to_string(V) +
                " rows");
  const int64_t windows = ceilDiv(positions, 32), slices = ceilDiv(C, 256);
  const bool dense = addend || !accumulate;
  deviceScratch("float", "gptcPieces", windows * 2 * C);
  deviceScratch("unsigned", "gptcArrivals", windows * slices);
  // 4 blocks an SM: at most 128 registers (140 left alone: 3), 32 loads in
  // flight a thread.
  begin(entry, 128, 4);
  os << "  embeddingBackwardSorted<" << C << ", " << i64Literal(positions)
     << ", " << V << ", " << bits << ", " << (dense ? "true" : "false")
     << ">(in0, in1, out0, " << (addend ? "in2" : "nullptr") << ", "
     << (accumulate ? "in" + std::to_string(operands) : "nullptr")
     << ", gptcPieces, gptcArrivals);\n}\n";
  l.block[0] = 128;
  l.grid[0] = toGrid((windows + (dense ? ceilDiv(V, 128) : 0)) * slices);
}

// One block of 1,024 threads; its keys and digit counts in dynamic shared
// memory (GPT-2's 16,384 positions: 96 KiB).
void Emitter::emitSortIds() {
  expectArity(1, 1);
  const int64_t positions = in(0).numel(), rows = intAttr("rows", -1),
                bits = intAttr("position_bits", -1);
  if (in(0).dtype != DType::I32 || out(0).dtype != DType::I32 ||
      out(0).numel() != positions)
    unsupported("expected i32 ids and as many i32 keys");
  if (!exec::idsSortable(positions, rows) ||
      bits != exec::sortedIdPositionBits(positions))
    unsupported(std::to_string(positions) + " ids of a table of " +
                std::to_string(rows) + " rows do not fit keys of " +
                std::to_string(bits) + " position bits");
  useHeader("embedding.cuh");
  begin(entry, 1024);
  os << "  sortIds<" << i64Literal(positions) << ", " << rows << ", " << bits
     << ">(in0, out0);\n}\n";
  l.block[0] = 1024;
  l.sharedBytes = uint32_t(ceilDiv(positions, 1024) * 1024 * 4 + 16 * 1024 * 2);
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
  // With 32 threads along the kept rows, each takes 16 bytes of a row
  // (8 bf16 or 4 floats) where whole vectors of them lie in the innermost
  // dimension, every stride (a multiple of the operand's last dimension)
  // keeps them 16-byte aligned, and a warp still has results to take.
  const int64_t elementBytes = rt::dtypeBytes(in(0).dtype);
  const int vectorWidth = elementBytes == 2 ? 8 : elementBytes == 4 ? 4 : 1;
  const bool floatInput = in(0).dtype == DType::F32 ||
                          in(0).dtype == DType::BF16 ||
                          in(0).dtype == DType::F16;
  const int vec = kt == 32 && floatInput && vectorWidth > 1 &&
                          x.back() % vectorWidth == 0 &&
                          whole.back() % vectorWidth == 0 &&
                          K >= 32 * vectorWidth
                      ? vectorWidth
                      : 1;
  int rt = 256 / kt;
  int64_t gx = ceilDiv(K, int64_t(kt) * vec);
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
     << kt << ", " << splits << ", " << vec << ">(in0, out0, "
     << (splits > 1 ? "gptcPartials, gptcCounters" : "nullptr, nullptr")
     << ");\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(gx);
  l.grid[1] = uint32_t(splits);
}

void Emitter::emitAttentionBiasGrad() {
  expectArity(2, 1);
  const int64_t C = in(1).shape.back(), R = in(1).numel() / C;
  if (in(0).shape.back() != 3 * C || in(0).numel() != 3 * R * C ||
      out(0).numel() != 3 * C)
    unsupported("dqkv is not [rows, 3C] of dout's [rows, C]");
  // reduce_sum's form for a kept innermost dimension, 16-byte loads where
  // both operands' rows keep whole vectors (kernels/reduce.cuh).
  const int64_t bytes =
      std::max(rt::dtypeBytes(in(0).dtype), rt::dtypeBytes(in(1).dtype));
  const int64_t width = bytes == 2 ? 8 : bytes == 4 ? 4 : 1;
  const int vec = width > 1 && C % width == 0 && C >= 32 * width &&
                          in(0).dtype != DType::I32 && in(1).dtype != DType::I32
                      ? int(width)
                      : 1;
  const int64_t columns = ceilDiv(C, int64_t(32) * vec);
  const int64_t splits = std::clamp<int64_t>(
      std::min<int64_t>(ceilDiv(R, int64_t(8) * 8),
                        std::max<int64_t>(1, 1024 / (2 * columns))),
      1, 1024);
  useHeader("reduce.cuh");
  if (splits > 1) {
    deviceScratch("float", "gptcPartials", 2 * splits * C);
    deviceScratch("unsigned", "gptcCounters", 2 * columns);
    pre << "\n";
  }
  begin(entry, 256);
  os << "  attentionBiasGrad<" << i64Literal(C) << ", " << i64Literal(R) << ", "
     << splits << ", " << vec << ">(in0, in1, out0, "
     << (splits > 1 ? "gptcPartials, gptcCounters" : "nullptr, nullptr")
     << ");\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(2 * columns + 1);
  l.grid[1] = uint32_t(splits);
}

void Emitter::emitCrossEntropy(bool withGrad) {
  expectArity(withGrad ? 3 : 2, withGrad ? 2 : 1);
  int64_t V = in(0).shape.back(), rows = in(1).numel();
  if (in(0).numel() != rows * V || in(1).dtype != DType::I32)
    unsupported("logits are not [positions, V] of i32 targets");
  if (out(0).dtype != DType::F32 || (withGrad && in(2).dtype != DType::F32))
    unsupported("the loss and dloss must be f32");
  int64_t classes = intAttr("num_classes", V);
  bool hasIgnore = l.ints.count("ignore_index");
  int64_t ignore = intAttr("ignore_index", 0);
  useHeader("cross_entropy.cuh");
  int threads = V >= 8192 ? 512 : 128;
  pre << "// Per-row loss terms and the arrival counter.\n";
  deviceScratch("double", "gptcLosses", rows);
  deviceScratch("unsigned", "gptcCounter", -1);
  pre << "\n";
  // 8-element chunks (16-byte accesses) when rows are a multiple of 8 long
  // (the padded vocabulary's always are), else one element at a time.
  int vec = V % 8 == 0 ? 8 : 1;
  // The gradient keeps 2-byte rows in shared memory between its passes
  // (kStash): V·2 bytes, at most 112 KiB so that two blocks fit an H100 SM.
  const bool stash = withGrad && vec == 8 && V * 2 <= 112 * 1024 &&
                     (in(0).dtype == DType::BF16 || in(0).dtype == DType::F16);
  // The max-first form (EmitOptions::maxFirstCrossEntropy): bf16 only.
  const bool maxFirst = stash && opts.maxFirstCrossEntropy &&
                        in(0).dtype == DType::BF16 &&
                        out(1).dtype == DType::BF16;
  // Its cluster form (EmitOptions::crossEntropyCluster): kCtas blocks a
  // row, each with its slice of the row's chunks stashed, then the
  // cluster's kCtas (max, sum) pairs, 8 bytes each.
  if (const int ctas = opts.crossEntropyCluster;
      maxFirst && ctas > 1 && threads % (32 * ctas) == 0) {
    const int64_t slice = (V / 8 + ctas - 1) / ctas;
    // As many blocks an SM as the whole-row form's threads make.
    begin(entry, threads / ctas, 2 * ctas);
    os << "  crossEntropyWithGradCluster<" << V << ", " << classes << ", "
       << i64Literal(rows) << ", " << i64Literal(ignore) << ", "
       << (hasIgnore ? "true" : "false") << ", " << ctas
       << ">(in0, in1, in2, out0, out1, gptcLosses, &gptcCounter);\n}\n";
    l.block[0] = uint32_t(threads / ctas);
    l.grid[0] = toGrid(rows * ctas);
    l.cluster = uint32_t(ctas);
    l.sharedBytes = uint32_t(slice * 16 + ctas * 8);
    return;
  }
  // Two 512-thread blocks an SM (64 registers a thread): while one block
  // waits at a barrier between the passes, the other's loads keep DRAM busy.
  begin(entry, threads, 2);
  std::string consts = std::to_string(V) + ", " + std::to_string(classes) +
                       ", " + i64Literal(rows) + ", " + i64Literal(ignore) +
                       ", " + (hasIgnore ? "true" : "false") + ", " +
                       std::to_string(vec);
  if (withGrad)
    os << "  crossEntropyWithGrad<" << consts << (stash ? ", true" : "")
       << (maxFirst ? ", true" : "")
       << ">(in0, in1, in2, out0, out1, gptcLosses, &gptcCounter);\n}\n";
  else
    os << "  crossEntropy<" << consts
       << ">(in0, in1, out0, gptcLosses, &gptcCounter);\n}\n";
  l.block[0] = threads;
  l.grid[0] = toGrid(rows);
  l.cluster = 1;
  if (stash)
    l.sharedBytes = uint32_t(V * 2);
}

} // namespace gptc::cuda::detail
