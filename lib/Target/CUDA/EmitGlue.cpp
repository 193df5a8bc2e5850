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
  // gpt.cast keeps the shape (SameOperandsAndResultShape); the elementwise
  // body would index a reshaped operand as a broadcast one.
  if (in(0).shape != out(0).shape)
    unsupported("operand and result shapes differ");
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
  std::string inside;
  for (size_t d = 0; d < shape.size(); ++d)
    if (small[d] != shape[d])
      inside += (inside.empty() ? "" : " && ") + std::string("d") +
                std::to_string(d) + " < " + std::to_string(small[d]);
  if (inside.empty())
    inside = "true";
  const std::string offset = offsetExpr(shape, rowMajorStrides(small), "d");
  // Four elements a thread where rows are not padded and split into fours
  // (the vocabulary pad of the tied wte, every step): one test, one 16-byte
  // float32 load and one 8-byte bf16 store, against four of each.
  if (out(0).dtype != DType::I32 && shape.back() == small.back() &&
      shape.back() % 4 == 0) {
    const int64_t n = out(0).numel();
    l.block[0] = 256;
    l.grid[0] = toGrid(ceilDiv(n / 4, 256));
    os << "  for (i64 v = i64(blockIdx.x) * blockDim.x + threadIdx.x; v < "
       << i64Literal(n / 4) << "; v += i64(gridDim.x) * blockDim.x) {\n"
       << "    const i64 i = v * 4;\n";
    digits(shape, "i", "d", "    ");
    os << "    float x[4];\n"
       << "    if (" << inside << ")\n"
       << "      loadW<4>(in0 + " << offset << ", x);\n"
       << "    else\n"
       << "      x[0] = x[1] = x[2] = x[3] = " << floatLiteral(double(value))
       << ";\n"
       << "    storeW<4>(out0 + i, x);\n  }\n}\n";
    return;
  }
  elementLoop(out(0).numel());
  digits(shape, "i", "d", "    ");
  std::string load = out(0).dtype == DType::I32
                         ? "in0[" + offset + "]"
                         : "fromFloat<" + std::string(tout(0)) +
                               ">(toFloat(in0[" + offset + "]))";
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

void Emitter::chunkBody(const exec::ScalarProgram &body, const Shape &shape,
                        const std::vector<int> &args, int width,
                        const std::vector<std::string> &targets,
                        const std::string &ind) {
  // Only the dimensions a broadcast operand varies along need a digit.
  std::vector<bool> needed(shape.size(), false);
  for (int a : args) {
    if (a < 0)
      continue;
    const Shape &s = in(a).shape;
    if (s == shape || in(a).numel() == 1)
      continue;
    if (s.size() > shape.size())
      unsupported("an operand does not broadcast to the result");
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != 1)
        needed[shape.size() - s.size() + i] = true;
  }
  if (std::find(needed.begin(), needed.end(), true) != needed.end())
    digits(shape, "i", "d", ind, needed);
  const std::string w = std::to_string(width);
  std::vector<std::string> value(args.size());
  for (size_t a = 0; a < args.size(); ++a) {
    if (args[a] < 0) {
      value[a] = "given[e]";
      continue;
    }
    const Shape &s = in(args[a]).shape;
    const std::string n = std::to_string(args[a]);
    std::string index = s == shape              ? std::string("i")
                        : in(args[a]).numel() == 1 ? std::string("0")
                                                   : broadcastOffset(s, shape, "d");
    // Varies along the row: `width` consecutive elements from its offset
    // (rows are a multiple of `width` long, so the chunk stays in one row).
    bool perElement = s == shape || (in(args[a]).numel() > 1 && !s.empty() &&
                                     s.back() == shape.back());
    if (perElement) {
      os << ind << "float x" << n << "[" << w << "];\n"
         << ind << (width == 4 ? "load4(" : "loadW<" + w + ">(") << "in" << n
         << " + " << index << ", x" << n << ");\n";
      value[a] = "x" + n + "[e]";
    } else {
      os << ind << "const float s" << n << " = toFloat(in" << n << "["
         << index << "]);\n";
      value[a] = "s" + n;
    }
  }
  for (size_t k = 0; k < targets.size(); ++k)
    if (targets[k].empty())
      os << ind << "float y" << k << "[" << w << "];\n";
  os << "#pragma unroll\n" << ind << "for (int e = 0; e < " << w << "; ++e) {\n";
  for (size_t a = 0; a < args.size(); ++a)
    os << ind << "  const float r" << a << " = " << value[a] << ";\n";
  scalarCode(body, ind + "  ");
  for (size_t k = 0; k < targets.size(); ++k)
    os << ind << "  "
       << (targets[k].empty() ? "y" + std::to_string(k) : targets[k])
       << "[e] = r" << body.results[k] << ";\n";
  os << ind << "}\n";
}

void Emitter::emitElementwise(const exec::ScalarProgram &body) {
  if (l.outputs.empty())
    unsupported("no results");
  if (int(l.inputs.size()) != body.numArgs ||
      body.results.size() != l.outputs.size())
    unsupported("the body does not match the operands");
  const Shape &shape = out(0).shape;
  const int64_t n = numel(shape);
  begin(entry, 256);
  l.block[0] = 256;
  // Four elements a thread with vector accesses when rows split into fours
  // (the operands that vary along the row then start 4-aligned too).
  int width = !shape.empty() && shape.back() % 4 == 0 ? 4 : 1;
  l.grid[0] = toGrid(ceilDiv(n / width, 256));
  os << "  for (i64 v = i64(blockIdx.x) * blockDim.x + threadIdx.x; v < "
     << i64Literal(n / width) << "; v += i64(gridDim.x) * blockDim.x) {\n"
     << "    const i64 i = v * " << width << ";\n";
  std::vector<int> args(l.inputs.size());
  for (size_t a = 0; a < args.size(); ++a)
    args[a] = int(a);
  chunkBody(body, shape, args, width,
            std::vector<std::string>(l.outputs.size()), "    ");
  for (size_t r = 0; r < l.outputs.size(); ++r)
    os << "    " << (width == 4 ? "store4(" : "storeW<1>(") << "out" << r
       << " + i, y" << r << ");\n";
  os << "  }\n}\n";
}

} // namespace gptc::cuda::detail
