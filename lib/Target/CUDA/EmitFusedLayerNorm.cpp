//===- EmitFusedLayerNorm.cpp - gpt.fused_layernorm -----------------------===//
//
// The launch's body becomes a generated functor (struct Prologue) that
// evaluates the ScalarProgram at a chunk of a row (4 consecutive elements
// when C is a multiple of 4, as layernorm.cuh's RowLayout takes them),
// reading its operands as the fused elementwise kernels do, writes the
// body's other values and leaves the values to normalise;
// layernormPrologueForward (layernorm.cuh) calls it per chunk of a row
// held in registers, then normalises the row as layernormForward does.
// gpt.fused_layernorm_grad's body becomes struct Epilogue, called per
// chunk of dx; the values it sums over the rows (a [C] result: an output
// projection's bias gradient) it adds into the kernel's column sums beside
// dgamma's and dbeta's, and writes when layernormBackwardWith has summed
// them.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

namespace gptc::cuda::detail {

void Emitter::emitFusedLayernorm() {
  const exec::ScalarProgram &body = l.body;
  size_t nIn = size_t(body.numArgs);
  if (l.outputs.empty() || l.inputs.size() != nIn + 2 ||
      body.results.size() != l.outputs.size())
    unsupported("the body does not match the operands");
  const Shape &shape = out(0).shape;
  if (shape.empty())
    unsupported("no rows to normalise");
  int64_t C = shape.back(), rows = numel(shape) / C;
  for (size_t r = 0; r < l.outputs.size(); ++r)
    if (out(r).shape != shape)
      unsupported("results differ in shape");
  if (in(nIn).numel() != C || in(nIn + 1).numel() != C)
    unsupported("gamma and beta are not [C]");
  useHeader("layernorm.cuh");
  const int width = layernormChunk(C);

  os << "// The fused body at the " << width
     << " elements from flat index i: writes the\n"
     << "// other values, leaves the values to normalise in v.\n"
     << "struct Prologue {\n";
  for (size_t a = 0; a < nIn; ++a)
    os << "  const " << tin(a) << " *in" << a << ";\n";
  for (size_t r = 1; r < l.outputs.size(); ++r)
    os << "  " << tout(r) << " *out" << r << ";\n";
  os << "  __device__ __forceinline__ void operator()(i64 i, float (&v)["
     << width << "]) const {\n";
  std::vector<int> args(nIn);
  for (size_t a = 0; a < nIn; ++a)
    args[a] = int(a);
  std::vector<std::string> targets(l.outputs.size());
  targets[0] = "v";
  chunkBody(body, shape, args, width, targets, "    ");
  for (size_t r = 1; r < l.outputs.size(); ++r)
    os << "    storeW<" << width << ">(out" << r << " + i, y" << r << ");\n";
  os << "  }\n};\n\n";

  begin(entry, 256, opts.layernormBlocks);
  os << "  layernormPrologueForward<" << C << ", " << i64Literal(rows)
     << ">(Prologue{";
  for (size_t a = 0; a < nIn; ++a)
    os << (a ? ", " : "") << "in" << a;
  for (size_t r = 1; r < l.outputs.size(); ++r)
    os << (nIn + r > 1 ? ", " : "") << "out" << r;
  os << "}, in" << nIn << ", in" << nIn + 1 << ", out0, "
     << floatLiteral(floatAttr("epsilon", 1e-5)) << ");\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(ceilDiv(rows, 8));
}

void Emitter::emitFusedLayernormGrad() {
  const exec::ScalarProgram &body = l.body;
  // Launch inputs: x, gamma, dy, then the body's arguments after dx.
  size_t nIn = body.numArgs > 0 ? size_t(body.numArgs - 1) : 0;
  if (body.numArgs < 1 || l.inputs.size() != nIn + 3 ||
      l.outputs.size() != body.results.size() + 2 || body.results.empty())
    unsupported("the body does not match the operands");
  const Shape &shape = in(0).shape;
  if (shape.empty())
    unsupported("no rows to normalise");
  int64_t C = shape.back(), rows = numel(shape) / C;
  // Each value is written (x's shape) or summed over the rows ([C]); the
  // summed ones take the kernel's column sums 2, 3, ... in order.
  std::vector<int> sumIndex(l.outputs.size(), -1);
  int columnSums = 0;
  for (size_t r = 2; r < l.outputs.size(); ++r) {
    if (out(r).shape == shape)
      continue;
    if (out(r).shape != Shape{C} || out(r).dtype != rt::DType::F32)
      unsupported("a value is neither of x's shape nor its float32 column "
                  "sums");
    sumIndex[r] = columnSums++;
  }
  if (columnSums == int(l.outputs.size()) - 2)
    unsupported("no value of x's shape is written");
  useHeader("layernorm.cuh");
  const int width = layernormChunk(C);

  os << "// The fused body at the " << width
     << " elements of dx from flat index i (register\n"
     << "// r0 is given[e]): writes its values"
     << (columnSums ? ", adds the summed ones to\n// sums (the warp's, at the "
                      "chunk's column)"
                    : "")
     << ".\nstruct Epilogue {\n"
     << "  static constexpr int kColumnSums = " << columnSums << ";\n";
  for (size_t a = 0; a < nIn; ++a)
    os << "  const " << tin(3 + a) << " *in" << 3 + a << ";\n";
  for (size_t r = 2; r < l.outputs.size(); ++r)
    os << "  " << tout(r) << " *out" << r << ";\n";
  os << "  __device__ __forceinline__ void operator()(i64 i, const float "
        "(&given)["
     << width << "], float *sums) const {\n";
  std::vector<int> args(nIn + 1, -1);
  for (size_t a = 0; a < nIn; ++a)
    args[a + 1] = int(3 + a);
  chunkBody(body, shape, args, width,
            std::vector<std::string>(body.results.size()), "    ");
  for (size_t r = 2; r < l.outputs.size(); ++r) {
    if (sumIndex[r] < 0) {
      os << "    storeW<" << width << ">(out" << r << " + i, y" << r - 2
         << ");\n";
      continue;
    }
    std::string at = "sums + " + std::to_string(sumIndex[r] * C);
    os << "    {\n      float s[" << width << "];\n      loadSharedW<" << width
       << ">(" << at << ", s);\n      for (int e = 0; e < " << width
       << "; ++e)\n        s[e] += y" << r - 2 << "[e];\n      storeSharedW<"
       << width << ">(" << at << ", s);\n    }\n";
  }
  os << "  }\n";
  // Column sum i of the epilogue's (sum i / C, column i % C), summed.
  os << "  template <int kW>\n  __device__ __forceinline__ void "
        "storeColumnSums(int i, const float (&s)[kW]) const {\n";
  for (size_t r = 2; r < l.outputs.size(); ++r)
    if (sumIndex[r] >= 0)
      os << "    if (i >= " << sumIndex[r] * C << " && i < "
         << (sumIndex[r] + 1) * C << ")\n      storeW<kW>(out" << r << " + (i - "
         << sumIndex[r] * C << "), s);\n";
  os << "  }\n};\n\n";

  begin(entry, layernormGradLaunch(rows, C, 2 + columnSums),
        layernormGradBlocks());
  os << "  layernormBackwardWith<" << C << ", " << i64Literal(rows) << ", "
     << kLayernormGradGroup << layernormGradStaging(C)
     << ">(in0, in1, in2, Epilogue{";
  for (size_t a = 0; a < nIn; ++a)
    os << (a ? ", " : "") << "in" << 3 + a;
  for (size_t r = 2; r < l.outputs.size(); ++r)
    os << (nIn + r > 2 ? ", " : "") << "out" << r;
  os << "}, out0, out1, " << floatLiteral(floatAttr("epsilon", 1e-5))
     << ", gptcPartials, gptcGroupPartials, gptcCounters);\n}\n";
}

} // namespace gptc::cuda::detail
