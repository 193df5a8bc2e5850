//===- EmitGlue.cpp - kernels printed whole -------------------------------===//
//
// The glue (casts, transposes, pads, slices, splits, concats, iota) and the
// fused elementwise bodies: index arithmetic and scalar code with the shapes
// as constants, one kernel per launch and no template behind it. The
// multi-tensor kernels are in EmitMultiTensor.cpp.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

namespace gptc::cuda::detail {

//===----------------------------------------------------------------------===//
// Glue kernels
//===----------------------------------------------------------------------===//

void Emitter::emitMap() {
  expectArity(1, 1);
  if (in(0).numel() != out(0).numel())
    unsupported("operand and result sizes differ");
  exec::ScalarProgram identity;
  identity.numArgs = identity.numRegisters = 1;
  identity.results = {0};
  emitElementwise(identity);
}

void Emitter::emitIota() {
  expectArity(0, 1);
  begin(entry, 256);
  elementLoop(out(0).numel());
  if (out(0).dtype == DType::I32)
    os << "    out0[i] = int(i);\n";
  else
    os << "    out0[i] = fromFloat<" << tout(0) << ">(float(i));\n";
  os << "  }\n}\n";
}

void Emitter::emitTranspose() {
  expectArity(1, 1);
  const Shape &shape = out(0).shape;
  auto perm = l.lists.find("permutation");
  if (perm == l.lists.end() || perm->second.size() != shape.size())
    unsupported("no permutation of the result's rank");
  Shape inStrides = rowMajorStrides(in(0).shape), strides(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    strides[d] = inStrides[perm->second[d]];
  begin(entry, 256);
  elementLoop(out(0).numel());
  digits(shape, "i", "d", "    ");
  os << "    out0[i] = fromFloat<" << tout(0) << ">(toFloat(in0["
     << offsetExpr(shape, strides, "d") << "]));\n  }\n}\n";
}

void Emitter::emitPad() {
  expectArity(1, 1);
  const Shape &shape = out(0).shape, &small = in(0).shape;
  if (small.size() != shape.size())
    unsupported("ranks differ");
  int64_t value = intAttr("value", 0);
  std::string fill = out(0).dtype == DType::I32
                         ? std::to_string(value)
                         : "fromFloat<" + std::string(tout(0)) + ">(" +
                               floatLiteral(double(value)) + ")";
  begin(entry, 256);
  elementLoop(out(0).numel());
  digits(shape, "i", "d", "    ");
  std::string inside;
  for (size_t d = 0; d < shape.size(); ++d)
    if (small[d] != shape[d])
      inside += (inside.empty() ? "" : " && ") + std::string("d") +
                std::to_string(d) + " < " + std::to_string(small[d]);
  if (inside.empty())
    inside = "true";
  std::string load = out(0).dtype == DType::I32
                         ? "in0[" + offsetExpr(shape, rowMajorStrides(small), "d") + "]"
                         : "fromFloat<" + std::string(tout(0)) + ">(toFloat(in0[" +
                               offsetExpr(shape, rowMajorStrides(small), "d") + "]))";
  os << "    out0[i] = " << inside << " ? " << load << " : " << fill
     << ";\n  }\n}\n";
}

void Emitter::emitSlice() {
  expectArity(1, 1);
  const Shape &shape = out(0).shape;
  if (in(0).shape.size() != shape.size())
    unsupported("ranks differ");
  begin(entry, 256);
  elementLoop(out(0).numel());
  digits(shape, "i", "d", "    ");
  std::string offset = offsetExpr(shape, rowMajorStrides(in(0).shape), "d");
  if (out(0).dtype == DType::I32)
    os << "    out0[i] = in0[" << offset << "];\n  }\n}\n";
  else
    os << "    out0[i] = fromFloat<" << tout(0) << ">(toFloat(in0[" << offset
       << "]));\n  }\n}\n";
}

namespace {
/// [outer, size(axis), inner] views of split's input and concat's output.
struct AxisView {
  int64_t outer = 1, inner = 1;
};
AxisView axisView(const Shape &s, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < axis; ++d)
    v.outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d)
    v.inner *= s[d];
  return v;
}
} // namespace

void Emitter::emitSplit() {
  if (l.inputs.size() != 1 || l.outputs.empty())
    unsupported("expected one input");
  int64_t axis = intAttr("axis", -1);
  const Shape &shape = in(0).shape;
  if (axis < 0 || axis >= int64_t(shape.size()))
    unsupported("bad axis");
  AxisView v = axisView(shape, axis);
  begin(entry, 256);
  elementLoop(in(0).numel());
  os << "    const i64 inner = i % " << i64Literal(v.inner)
     << ", a = i / " << i64Literal(v.inner) << " % " << shape[axis]
     << ", outer = i / " << i64Literal(v.inner * shape[axis]) << ";\n";
  os << "    const float x = toFloat(in0[i]);\n    ";
  int64_t start = 0;
  for (size_t r = 0; r < l.outputs.size(); ++r) {
    int64_t size = out(r).shape[axis];
    os << "if (a < " << start + size << ")\n      out" << r << "[(outer * "
       << size << " + a - " << start << ") * " << i64Literal(v.inner)
       << " + inner] = fromFloat<" << tout(r) << ">(x);\n";
    start += size;
    if (r + 1 < l.outputs.size())
      os << "    else ";
  }
  os << "  }\n}\n";
}

void Emitter::emitConcat() {
  if (l.outputs.size() != 1 || l.inputs.empty())
    unsupported("expected one output");
  int64_t axis = intAttr("axis", -1);
  const Shape &shape = out(0).shape;
  if (axis < 0 || axis >= int64_t(shape.size()))
    unsupported("bad axis");
  AxisView v = axisView(shape, axis);
  begin(entry, 256);
  elementLoop(out(0).numel());
  os << "    const i64 inner = i % " << i64Literal(v.inner)
     << ", a = i / " << i64Literal(v.inner) << " % " << shape[axis]
     << ", outer = i / " << i64Literal(v.inner * shape[axis]) << ";\n";
  os << "    float x;\n";
  int64_t start = 0;
  for (size_t r = 0; r < l.inputs.size(); ++r) {
    int64_t size = in(r).shape[axis];
    os << "    " << (r == 0 ? "" : "else ");
    if (r + 1 < l.inputs.size())
      os << "if (a < " << start + size << ")";
    os << "\n      x = toFloat(in" << r << "[(outer * " << size << " + a - "
       << start << ") * " << i64Literal(v.inner) << " + inner]);\n";
    start += size;
  }
  os << "    out0[i] = fromFloat<" << tout(0) << ">(x);\n  }\n}\n";
}

//===----------------------------------------------------------------------===//
// Fused elementwise bodies
//===----------------------------------------------------------------------===//

void Emitter::scalarCode(const exec::ScalarProgram &body,
                         const std::string &indent) {
  using exec::Opcode;
  for (const exec::Instruction &in : body.code) {
    std::string a = "r" + std::to_string(in.a), b = "r" + std::to_string(in.b);
    std::string e;
    // _rn intrinsics: no contraction into FMA, so a fused chain rounds like
    // the CPU executor's float code.
    switch (in.op) {
    case Opcode::Add: e = "__fadd_rn(" + a + ", " + b + ")"; break;
    case Opcode::Sub: e = "__fsub_rn(" + a + ", " + b + ")"; break;
    case Opcode::Mul: e = "__fmul_rn(" + a + ", " + b + ")"; break;
    case Opcode::Div: e = "__fdiv_rn(" + a + ", " + b + ")"; break;
    // std::max / std::min, including which operand a NaN comparison picks.
    case Opcode::Max: e = "(" + a + " < " + b + " ? " + b + " : " + a + ")"; break;
    case Opcode::Min: e = "(" + b + " < " + a + " ? " + b + " : " + a + ")"; break;
    case Opcode::Neg: e = "-" + a; break;
    case Opcode::Exp: e = "expf(" + a + ")"; break;
    case Opcode::Log: e = "logf(" + a + ")"; break;
    case Opcode::Tanh: e = "tanhf(" + a + ")"; break;
    case Opcode::Sqrt: e = "sqrtf(" + a + ")"; break;
    case Opcode::Rsqrt: e = "__fdiv_rn(1.0f, sqrtf(" + a + "))"; break;
    case Opcode::Erf: e = "erff(" + a + ")"; break;
    case Opcode::Const: e = floatLiteral(in.value); break;
    }
    os << indent << "const float r" << in.dst << " = " << e << ";\n";
  }
}

void Emitter::emitElementwise(const exec::ScalarProgram &body) {
  if (l.outputs.empty())
    unsupported("no results");
  if (int(l.inputs.size()) != body.numArgs ||
      body.results.size() != l.outputs.size())
    unsupported("the body does not match the operands");
  const Shape &shape = out(0).shape;
  const int64_t n = numel(shape);
  // Only the dimensions a broadcast operand varies along need a digit.
  std::vector<bool> needed(shape.size(), false);
  for (size_t a = 0; a < l.inputs.size(); ++a) {
    const Shape &s = in(a).shape;
    if (s == shape || in(a).numel() == 1)
      continue;
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != 1)
        needed[shape.size() - s.size() + i] = true;
  }
  bool anyDigit = std::find(needed.begin(), needed.end(), true) != needed.end();
  auto operandIndex = [&](size_t a) {
    return in(a).shape == shape ? std::string("i")
           : in(a).numel() == 1 ? std::string("0")
                                : broadcastOffset(in(a).shape, shape, "d");
  };
  begin(entry, 256);
  l.block[0] = 256;

  // Four elements a thread with vector accesses when rows split into fours
  // (the operands that vary along the row then start 4-aligned too).
  bool vectorize = !shape.empty() && shape.back() % 4 == 0;
  if (!vectorize) {
    l.grid[0] = toGrid(ceilDiv(n, 256));
    os << "  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < "
       << i64Literal(n) << "; i += i64(gridDim.x) * blockDim.x) {\n";
    if (anyDigit)
      digits(shape, "i", "d", "    ", needed);
    for (size_t a = 0; a < l.inputs.size(); ++a)
      os << "    const float r" << a << " = toFloat(in" << a << "["
         << operandIndex(a) << "]);\n";
    scalarCode(body, "    ");
    for (size_t r = 0; r < l.outputs.size(); ++r)
      os << "    out" << r << "[i] = fromFloat<" << tout(r) << ">(r"
         << body.results[r] << ");\n";
    os << "  }\n}\n";
    return;
  }
  l.grid[0] = toGrid(ceilDiv(n / 4, 256));
  os << "  for (i64 v = i64(blockIdx.x) * blockDim.x + threadIdx.x; v < "
     << i64Literal(n / 4) << "; v += i64(gridDim.x) * blockDim.x) {\n"
     << "    const i64 i = v * 4;\n";
  if (anyDigit)
    digits(shape, "i", "d", "    ", needed);
  std::vector<bool> perElement(l.inputs.size());
  for (size_t a = 0; a < l.inputs.size(); ++a) {
    const Shape &s = in(a).shape;
    // Varies along the row: four consecutive elements from its offset.
    perElement[a] = s == shape || (in(a).numel() > 1 && !s.empty() &&
                                   s.back() == shape.back());
    if (perElement[a])
      os << "    float x" << a << "[4];\n    load4(in" << a << " + "
         << operandIndex(a) << ", x" << a << ");\n";
    else
      os << "    const float s" << a << " = toFloat(in" << a << "["
         << operandIndex(a) << "]);\n";
  }
  for (size_t r = 0; r < l.outputs.size(); ++r)
    os << "    float y" << r << "[4];\n";
  os << "#pragma unroll\n    for (int e = 0; e < 4; ++e) {\n";
  for (size_t a = 0; a < l.inputs.size(); ++a)
    os << "      const float r" << a << " = "
       << (perElement[a] ? "x" + std::to_string(a) + "[e]"
                         : "s" + std::to_string(a))
       << ";\n";
  scalarCode(body, "      ");
  for (size_t r = 0; r < l.outputs.size(); ++r)
    os << "      y" << r << "[e] = r" << body.results[r] << ";\n";
  os << "    }\n";
  for (size_t r = 0; r < l.outputs.size(); ++r)
    os << "    store4(out" << r << " + i, y" << r << ");\n";
  os << "  }\n}\n";
}

} // namespace gptc::cuda::detail
