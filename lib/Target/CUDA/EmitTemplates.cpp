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
  headers.insert("embedding.cuh");
  begin(entry, 256);
  int64_t positions = in(1).numel();
  os << "  embeddingForward<" << table[1] << ", " << i64Literal(positions)
     << ", " << table[0] << ">(in0, in1, out0);\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(ceilDiv(positions * table[1], 256));
}

void Emitter::emitEmbeddingGrad() {
  expectArity(2, 1);
  const Shape &table = out(0).shape;
  if (table.size() != 2 || in(1).dtype != DType::I32)
    unsupported("expected a [V, C] result and i32 ids");
  headers.insert("embedding.cuh");
  int64_t C = table[1];
  // Rows per block: as many as fit 24 KiB of float accumulators.
  int64_t rows = std::max<int64_t>(1, 6144 / C);
  if (rows * C * 4 > 40 * 1024)
    unsupported("rows of " + std::to_string(C) +
                " columns do not fit in shared memory");
  begin(entry, 128);
  os << "  embeddingBackward<" << C << ", " << i64Literal(in(1).numel()) << ", "
     << table[0] << ", " << rows << ">(in0, in1, out0);\n}\n";
  l.block[0] = 128;
  l.grid[0] = toGrid(ceilDiv(table[0], rows));
}

void Emitter::emitLayernorm() {
  expectArity(3, 1);
  int64_t C = in(0).shape.back(), rows = in(0).numel() / C;
  headers.insert("layernorm.cuh");
  begin(entry, 256);
  os << "  layernormForward<" << C << ", " << i64Literal(rows)
     << ">(in0, in1, in2, out0, " << floatLiteral(floatAttr("epsilon", 1e-5))
     << ");\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(ceilDiv(rows, 8));
}

void Emitter::emitLayernormGrad() {
  expectArity(3, 3);
  int64_t C = in(0).shape.back(), rows = in(0).numel() / C;
  headers.insert("layernorm.cuh");
  int64_t blocks = std::min<int64_t>(ceilDiv(rows, 8), 256);
  pre << "// Per-block partial dgamma/dbeta and the arrival counter.\n"
      << "__device__ float gptcPartials[" << blocks * 2 * C << "];\n"
      << "__device__ unsigned gptcCounter;\n\n";
  begin(entry, 256);
  os << "  layernormBackward<" << C << ", " << i64Literal(rows)
     << ">(in0, in1, in2, out0, out1, out2, "
     << floatLiteral(floatAttr("epsilon", 1e-5))
     << ", gptcPartials, &gptcCounter);\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(blocks);
}

void Emitter::emitReduceSum() {
  expectArity(1, 1);
  const Shape &x = in(0).shape, &y = out(0).shape;
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
  Shape keptShape, keptStrides, redShape, redStrides, xs = rowMajorStrides(x);
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 1)
      continue;
    (kept[d] ? keptShape : redShape).push_back(x[d]);
    (kept[d] ? keptStrides : redStrides).push_back(xs[d]);
  }
  int64_t K = numel(y), R = x.empty() ? 1 : numel(x) / K;
  bool innerKept = !x.empty() && kept.back() && x.back() > 1;
  int kt = innerKept && K >= 32 ? 32 : 1, rt = 256 / kt;
  int64_t gx = ceilDiv(K, kt);
  int64_t splits = std::clamp<int64_t>(
      std::min<int64_t>(ceilDiv(R, int64_t(rt) * 8),
                        std::max<int64_t>(1, 1024 / gx)),
      1, 1024);
  headers.insert("reduce.cuh");

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
  if (splits > 1)
    pre << "__device__ float gptcPartials[" << splits * K << "];\n"
        << "__device__ unsigned gptcCounters[" << gx << "];\n\n";
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
  headers.insert("cross_entropy.cuh");
  int threads = V >= 8192 ? 512 : 128;
  pre << "// Per-row loss terms and the arrival counter.\n"
      << "__device__ double gptcLosses[" << rows << "];\n"
      << "__device__ unsigned gptcCounter;\n\n";
  begin(entry, threads);
  std::string consts = std::to_string(V) + ", " + std::to_string(classes) +
                       ", " + i64Literal(rows) + ", " + i64Literal(ignore) +
                       ", " + (hasIgnore ? "true" : "false");
  if (withGrad)
    os << "  crossEntropyWithGrad<" << consts
       << ">(in0, in1, in2, out0, out1, gptcLosses, &gptcCounter);\n}\n";
  else
    os << "  crossEntropy<" << consts
       << ">(in0, in1, out0, gptcLosses, &gptcCounter);\n}\n";
  if (out(0).dtype != DType::F32 || (withGrad && in(2).dtype != DType::F32))
    unsupported("the loss and dloss must be f32");
  l.block[0] = threads;
  l.grid[0] = toGrid(rows);
}

void Emitter::emitFlashAttention(bool grad) {
  expectArity(grad ? 6 : 3, grad ? 3 : 2);
  const Shape &q = in(0).shape, &k = in(1).shape;
  if (q.size() < 2 || k.size() != q.size())
    unsupported("q and k need rank 2 or more");
  int64_t T = q[q.size() - 2], D = q.back(), S = k[k.size() - 2];
  int64_t heads = numel(q) / (T * D);
  bool causal = intAttr("causal", 0) != 0;
  std::string scale = floatLiteral(floatAttr("scale", 1.0));
  bool bf16 = in(0).dtype == DType::BF16 && in(1).dtype == DType::BF16 &&
              in(2).dtype == DType::BF16 &&
              (!grad || in(5).dtype == DType::BF16);
  bool mma = bf16 && T % 64 == 0 && S % 64 == 0 && D % 16 == 0 && D <= 64 &&
             (!causal || T == S);
  if (grad && in(4).dtype != DType::F32)
    unsupported("lse must be f32");
  headers.insert("attention.cuh");
  std::string dims = std::to_string(D) + ", " + std::to_string(T) + ", " +
                     std::to_string(S) + ", " + (causal ? "true" : "false");
  // The tensor-core forward at 4 blocks an SM fits in 128 registers (left
  // alone, ptxas spills at small head sizes); the backward needs ~240.
  begin(entry, mma ? 128 : 64, mma && !grad ? 4 : 0);
  if (!grad && mma)
    os << "  attentionForwardMma<" << dims << ">(in0, in1, in2, out0, out1, "
       << scale << ");\n}\n";
  else if (!grad)
    os << "  attentionForwardSimple<" << dims << ">(in0, in1, in2, out0, out1, "
       << scale << ");\n}\n";
  else if (mma)
    os << "  attentionBackwardMma<" << dims << ">(in0, in1, in2, in3, in4, "
       << "in5, out0, out1, out2, " << scale << ");\n}\n";
  else
    os << "  attentionBackwardSimple<" << dims << ">(in0, in1, in2, in3, in4, "
       << "in5, out0, out1, out2, " << scale << ");\n}\n";
  l.block[0] = mma ? 128 : 64;
  l.grid[0] = toGrid(grad ? ceilDiv(T, 64) + ceilDiv(S, 64) : ceilDiv(T, 64));
  l.grid[1] = uint32_t(heads);
}

} // namespace gptc::cuda::detail
