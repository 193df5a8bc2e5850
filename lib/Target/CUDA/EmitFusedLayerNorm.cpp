//===- EmitFusedLayerNorm.cpp - gpt.fused_layernorm -----------------------===//
//
// The launch's body becomes a generated functor (struct Prologue) that
// evaluates the ScalarProgram at one flat index, broadcasting its operands
// by index arithmetic as the fused elementwise kernels do, writes the
// body's other values and returns the value to normalise;
// layernormPrologueForward (layernorm.cuh) calls it per element of a row
// held in registers, then normalises the row as layernormForward does.
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
  headers.insert("layernorm.cuh");

  // Only the dimensions a broadcast operand varies along need a digit.
  std::vector<bool> needed(shape.size(), false);
  for (size_t a = 0; a < nIn; ++a) {
    const Shape &s = in(a).shape;
    if (s == shape || in(a).numel() == 1)
      continue;
    if (s.size() > shape.size())
      unsupported("an input does not broadcast to the result");
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != 1)
        needed[shape.size() - s.size() + i] = true;
  }
  bool anyDigit = std::find(needed.begin(), needed.end(), true) != needed.end();

  os << "// The fused body at flat index i: writes the other values, returns\n"
     << "// the value to normalise.\nstruct Prologue {\n";
  for (size_t a = 0; a < nIn; ++a)
    os << "  const " << tin(a) << " *in" << a << ";\n";
  for (size_t r = 1; r < l.outputs.size(); ++r)
    os << "  " << tout(r) << " *out" << r << ";\n";
  os << "  __device__ __forceinline__ float operator()(i64 i) const {\n";
  if (anyDigit)
    digits(shape, "i", "d", "    ", needed);
  for (size_t a = 0; a < nIn; ++a) {
    std::string index = in(a).shape == shape  ? std::string("i")
                        : in(a).numel() == 1 ? std::string("0")
                                             : broadcastOffset(in(a).shape,
                                                               shape, "d");
    os << "    const float r" << a << " = toFloat(in" << a << "[" << index
       << "]);\n";
  }
  scalarCode(body, "    ");
  for (size_t r = 1; r < l.outputs.size(); ++r)
    os << "    out" << r << "[i] = fromFloat<" << tout(r) << ">(r"
       << body.results[r] << ");\n";
  os << "    return r" << body.results[0] << ";\n  }\n};\n\n";

  begin(entry, 256);
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
  for (size_t r = 2; r < l.outputs.size(); ++r)
    if (out(r).shape != shape)
      unsupported("values differ in shape from x");
  headers.insert("layernorm.cuh");

  std::vector<bool> needed(shape.size(), false);
  for (size_t a = 0; a < nIn; ++a) {
    const Shape &s = in(3 + a).shape;
    if (s == shape || in(3 + a).numel() == 1)
      continue;
    if (s.size() > shape.size())
      unsupported("an input does not broadcast to x");
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != 1)
        needed[shape.size() - s.size() + i] = true;
  }
  bool anyDigit = std::find(needed.begin(), needed.end(), true) != needed.end();

  os << "// The fused body at flat index i of dx (register r0): writes its\n"
     << "// values.\nstruct Epilogue {\n";
  for (size_t a = 0; a < nIn; ++a)
    os << "  const " << tin(3 + a) << " *in" << 3 + a << ";\n";
  for (size_t r = 2; r < l.outputs.size(); ++r)
    os << "  " << tout(r) << " *out" << r << ";\n";
  os << "  __device__ __forceinline__ void operator()(i64 i, float dx) const "
        "{\n";
  if (anyDigit)
    digits(shape, "i", "d", "    ", needed);
  os << "    const float r0 = dx;\n";
  for (size_t a = 0; a < nIn; ++a) {
    const Shape &s = in(3 + a).shape;
    std::string index = s == shape                ? std::string("i")
                        : in(3 + a).numel() == 1 ? std::string("0")
                                                 : broadcastOffset(s, shape, "d");
    os << "    const float r" << a + 1 << " = toFloat(in" << 3 + a << "["
       << index << "]);\n";
  }
  scalarCode(body, "    ");
  for (size_t r = 2; r < l.outputs.size(); ++r)
    os << "    out" << r << "[i] = fromFloat<" << tout(r) << ">(r"
       << body.results[r - 2] << ");\n";
  os << "  }\n};\n\n";

  int64_t blocks = layernormGradScratch(rows, C);
  begin(entry, 256, kLayernormGradMinBlocks);
  os << "  layernormBackwardWith<" << C << ", " << i64Literal(rows)
     << ">(in0, in1, in2, Epilogue{";
  for (size_t a = 0; a < nIn; ++a)
    os << (a ? ", " : "") << "in" << 3 + a;
  for (size_t r = 2; r < l.outputs.size(); ++r)
    os << (nIn + r > 2 ? ", " : "") << "out" << r;
  os << "}, out0, out1, " << floatLiteral(floatAttr("epsilon", 1e-5))
     << ", gptcPartials, &gptcCounter);\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(blocks);
}

} // namespace gptc::cuda::detail
