//===- Graph.cpp - the graph-building DSL ---------------------------------===//

#include "gptc/DSL/Graph.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

namespace gptc::dsl {

//===----------------------------------------------------------------------===//
// Tensor
//===----------------------------------------------------------------------===//

RankedTensorType Tensor::getType() const {
  return cast<RankedTensorType>(value.getType());
}

int64_t Tensor::dim(int64_t i) const {
  int64_t r = rank();
  assert(i >= -r && i < r && "dimension out of range");
  return shape()[i < 0 ? i + r : i];
}

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

Graph::Graph(MLIRContext &ctx, StringRef funcName) : builder(&ctx) {
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(module->getBody());
  func = builder.create<func::FuncOp>(builder.getUnknownLoc(), funcName,
                                      builder.getFunctionType({}, {}));
  builder.setInsertionPointToStart(func.addEntryBlock());
}

Location Graph::location(SrcLoc loc) const {
  // Paths relative to the repository read better in IR dumps.
  StringRef file = loc.file_name();
  file.consume_front(GPTC_SOURCE_DIR "/");
  Location fileLoc = FileLineColLoc::get(builder.getContext(), file,
                                         loc.line(), loc.column());
  if (scopes.empty())
    return fileLoc;
  return NameLoc::get(StringAttr::get(builder.getContext(), scopes.back()),
                      fileLoc);
}

std::string Graph::scopedName(const std::string &leaf) const {
  return scopes.empty() ? leaf : scopes.back() + "." + leaf;
}

Graph::Scope::Scope(Graph &graph, const std::string &name) : graph(graph) {
  graph.scopes.push_back(graph.scopedName(name));
}
Graph::Scope::~Scope() { graph.scopes.pop_back(); }

Tensor Graph::param(const std::string &name, const Shape &shape, Init init,
                    SrcLoc loc) {
  SmallVector<NamedAttribute> attrs;
  attrs.push_back(builder.getNamedAttr(gpt::kParamAttr,
                                       builder.getStringAttr(scopedName(name))));
  switch (init.kind) {
  case Init::Kind::Normal:
    attrs.push_back(
        builder.getNamedAttr(gpt::kInitAttr, builder.getStringAttr("normal")));
    attrs.push_back(builder.getNamedAttr(gpt::kInitStdAttr,
                                         builder.getF32FloatAttr(init.std)));
    break;
  case Init::Kind::Zeros:
    attrs.push_back(
        builder.getNamedAttr(gpt::kInitAttr, builder.getStringAttr("zeros")));
    break;
  case Init::Kind::Ones:
    attrs.push_back(
        builder.getNamedAttr(gpt::kInitAttr, builder.getStringAttr("ones")));
    break;
  }
  unsigned index = func.getNumArguments();
  func.insertArgument(index, RankedTensorType::get(shape, builder.getF32Type()),
                      builder.getDictionaryAttr(attrs), location(loc));
  return Tensor(this, func.getArgument(index));
}

Tensor Graph::input(const std::string &name, const Shape &shape, SrcLoc loc) {
  unsigned index = func.getNumArguments();
  auto attrs = builder.getDictionaryAttr(builder.getNamedAttr(
      gpt::kInputAttr, builder.getStringAttr(name)));
  func.insertArgument(index,
                      RankedTensorType::get(shape, builder.getI32Type()),
                      attrs, location(loc));
  return Tensor(this, func.getArgument(index));
}

void Graph::output(const std::string &name, Tensor value) {
  outputs.push_back(value.getValue());
  outputNames.push_back(name);
}

OwningOpRef<ModuleOp> Graph::finish() {
  builder.create<func::ReturnOp>(builder.getUnknownLoc(), outputs);
  SmallVector<Type> resultTypes;
  for (Value v : outputs)
    resultTypes.push_back(v.getType());
  func.setFunctionType(
      builder.getFunctionType(func.getArgumentTypes(), resultTypes));
  for (auto [i, name] : llvm::enumerate(outputNames))
    func.setResultAttr(i, gpt::kOutputAttr, builder.getStringAttr(name));
  return std::move(module);
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

namespace {
RankedTensorType tensorType(ArrayRef<int64_t> shape, Type elem) {
  return RankedTensorType::get(shape, elem);
}

template <typename OpTy, typename... Args>
Tensor build(Graph &g, SrcLoc loc, Type resultType, Args &&...args) {
  auto op = g.getBuilder().create<OpTy>(g.location(loc), resultType,
                                        std::forward<Args>(args)...);
  return Tensor(&g, op.getResult());
}

Tensor binary(StringRef kind, Tensor a, Tensor b, SrcLoc loc) {
  Graph &g = a.getGraph();
  FailureOr<SmallVector<int64_t>> shape =
      gpt::broadcastShapes(a.shape(), b.shape());
  if (failed(shape))
    llvm::report_fatal_error("gptc DSL: cannot broadcast operands of " +
                             Twine(kind));
  Type type = tensorType(*shape, a.getType().getElementType());
  Value x = a.getValue(), y = b.getValue();
  if (kind == "add")
    return build<gpt::AddOp>(g, loc, type, x, y);
  if (kind == "sub")
    return build<gpt::SubOp>(g, loc, type, x, y);
  if (kind == "mul")
    return build<gpt::MulOp>(g, loc, type, x, y);
  return build<gpt::DivOp>(g, loc, type, x, y);
}
} // namespace

Tensor embedding(Tensor table, Tensor ids, SrcLoc loc) {
  Shape shape(ids.shape().begin(), ids.shape().end());
  shape.push_back(table.dim(1));
  return build<gpt::EmbeddingOp>(
      table.getGraph(), loc,
      tensorType(shape, table.getType().getElementType()), table.getValue(),
      ids.getValue());
}

Tensor positions(Graph &g, int64_t n, SrcLoc loc) {
  return build<gpt::IotaOp>(g, loc,
                            tensorType({n}, g.getBuilder().getI32Type()));
}

Tensor matmul(Tensor a, Tensor b, MatmulOptions opts, SrcLoc loc) {
  Shape shape(a.shape().begin(), a.shape().end() - 2);
  shape.push_back(opts.transposeA ? a.dim(-1) : a.dim(-2));
  shape.push_back(opts.transposeB ? b.dim(-2) : b.dim(-1));
  Graph &g = a.getGraph();
  auto op = g.getBuilder().create<gpt::MatmulOp>(
      g.location(loc), tensorType(shape, a.getType().getElementType()),
      a.getValue(), b.getValue(), opts.transposeA, opts.transposeB);
  return Tensor(&g, op.getResult());
}

Tensor layernorm(Tensor x, Tensor gamma, Tensor beta, double epsilon,
                 SrcLoc loc) {
  Graph &g = x.getGraph();
  auto op = g.getBuilder().create<gpt::LayerNormOp>(
      g.location(loc), x.getType(), x.getValue(), gamma.getValue(),
      beta.getValue(), g.getBuilder().getF32FloatAttr(epsilon));
  return Tensor(&g, op.getResult());
}

Tensor softmax(Tensor x, SrcLoc loc) {
  return build<gpt::SoftmaxOp>(x.getGraph(), loc, x.getType(), x.getValue());
}

Tensor causalMask(Tensor x, SrcLoc loc) {
  return build<gpt::CausalMaskOp>(x.getGraph(), loc, x.getType(),
                                  x.getValue());
}

Tensor gelu(Tensor x, SrcLoc loc) {
  Graph &g = x.getGraph();
  auto op = g.getBuilder().create<gpt::GeluOp>(
      g.location(loc), x.getType(), x.getValue(),
      g.getBuilder().getStringAttr("tanh"));
  return Tensor(&g, op.getResult());
}

Tensor reshape(Tensor x, const Shape &shape, SrcLoc loc) {
  return build<gpt::ReshapeOp>(
      x.getGraph(), loc, tensorType(shape, x.getType().getElementType()),
      x.getValue());
}

Tensor transpose(Tensor x, const std::vector<int64_t> &permutation,
                 SrcLoc loc) {
  Shape shape;
  for (int64_t p : permutation)
    shape.push_back(x.dim(p));
  Graph &g = x.getGraph();
  auto op = g.getBuilder().create<gpt::TransposeOp>(
      g.location(loc), tensorType(shape, x.getType().getElementType()),
      x.getValue(), g.getBuilder().getDenseI64ArrayAttr(permutation));
  return Tensor(&g, op.getResult());
}

std::vector<Tensor> split(Tensor x, int64_t axis, int64_t pieces,
                          SrcLoc loc) {
  Shape shape(x.shape().begin(), x.shape().end());
  shape[axis] /= pieces;
  SmallVector<Type> types(pieces,
                          tensorType(shape, x.getType().getElementType()));
  Graph &g = x.getGraph();
  auto op = g.getBuilder().create<gpt::SplitOp>(
      g.location(loc), types, x.getValue(),
      g.getBuilder().getI64IntegerAttr(axis));
  std::vector<Tensor> out;
  for (Value r : op.getResults())
    out.emplace_back(&g, r);
  return out;
}

Tensor crossEntropy(Tensor logits, Tensor targets, SrcLoc loc) {
  Graph &g = logits.getGraph();
  return build<gpt::CrossEntropyOp>(
      g, loc, tensorType({}, g.getBuilder().getF32Type()), logits.getValue(),
      targets.getValue());
}

Tensor constant(Graph &g, float value, SrcLoc loc) {
  auto type = tensorType({}, g.getBuilder().getF32Type());
  auto op = g.getBuilder().create<gpt::ConstantOp>(
      g.location(loc), type, DenseElementsAttr::get(type, value));
  return Tensor(&g, op.getResult());
}

Tensor add(Tensor a, Tensor b, SrcLoc loc) { return binary("add", a, b, loc); }
Tensor sub(Tensor a, Tensor b, SrcLoc loc) { return binary("sub", a, b, loc); }
Tensor mul(Tensor a, Tensor b, SrcLoc loc) { return binary("mul", a, b, loc); }
Tensor div(Tensor a, Tensor b, SrcLoc loc) { return binary("div", a, b, loc); }

Tensor operator+(Located a, Tensor b) { return add(a.tensor, b, a.loc); }
Tensor operator-(Located a, Tensor b) { return sub(a.tensor, b, a.loc); }
Tensor operator*(Located a, Tensor b) { return mul(a.tensor, b, a.loc); }
Tensor operator/(Located a, Tensor b) { return div(a.tensor, b, a.loc); }
Tensor operator*(Located a, float s) {
  return mul(a.tensor, constant(a.tensor.getGraph(), s, a.loc), a.loc);
}

} // namespace gptc::dsl
