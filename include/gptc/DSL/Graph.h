//===- Graph.h - a small C++ DSL that builds gpt dialect graphs -*- C++ -*-===//
//
// Models are ordinary C++ that calls these functions:
//
//   Graph g(ctx, "gpt2_forward");
//   Tensor wte = g.param("wte.weight", {V, C}, Init::normal(0.02));
//   Tensor x = embedding(wte, g.input("tokens", {B, T}));
//   ...
//   g.output("loss", crossEntropy(logits, targets));
//
// Each call emits one gpt op directly, located at the line of the model
// source that made it (std::source_location), inside a NameLoc naming the
// current scope ("h.3.attn"), so IR dumps point back at the model's code.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_DSL_GRAPH_H
#define GPTC_DSL_GRAPH_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <source_location>
#include <string>
#include <vector>

namespace gptc::dsl {

using Shape = std::vector<int64_t>;
using SrcLoc = std::source_location;

class Graph;

/// A tensor value in the graph being built.
class Tensor {
public:
  Tensor(Graph *graph, mlir::Value value) : graph(graph), value(value) {}

  mlir::Value getValue() const { return value; }
  Graph &getGraph() const { return *graph; }
  mlir::RankedTensorType getType() const;
  llvm::ArrayRef<int64_t> shape() const { return getType().getShape(); }
  int64_t rank() const { return static_cast<int64_t>(shape().size()); }
  /// Size of dimension `i`; negative `i` counts from the end.
  int64_t dim(int64_t i) const;

private:
  Graph *graph;
  mlir::Value value;
};

/// How a parameter is initialised before training.
struct Init {
  enum class Kind { Normal, Zeros, Ones };
  Kind kind;
  double std = 0.0;
  static Init normal(double std) { return {Kind::Normal, std}; }
  static Init zeros() { return {Kind::Zeros}; }
  static Init ones() { return {Kind::Ones}; }
};

/// Builds one func.func in a fresh module. Parameters and inputs become
/// function arguments, outputs become results.
class Graph {
public:
  Graph(mlir::MLIRContext &ctx, llvm::StringRef funcName);

  Tensor param(const std::string &name, const Shape &shape, Init init,
               SrcLoc loc = SrcLoc::current());
  /// A batch of token ids ("tokens" or "targets"), i32.
  Tensor input(const std::string &name, const Shape &shape,
               SrcLoc loc = SrcLoc::current());
  void output(const std::string &name, Tensor value);

  /// Names the ops built while the returned guard lives: "h.0", then
  /// "h.0.attn" for a nested scope. Scoped names also prefix param names.
  class Scope {
  public:
    Scope(Graph &graph, const std::string &name);
    ~Scope();
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;

  private:
    Graph &graph;
  };
  Scope scope(const std::string &name) { return Scope(*this, name); }
  std::string scopedName(const std::string &leaf) const;

  /// Finishes the function and hands over the module.
  mlir::OwningOpRef<mlir::ModuleOp> finish();

  mlir::MLIRContext &getContext() { return *builder.getContext(); }
  mlir::OpBuilder &getBuilder() { return builder; }
  mlir::Location location(SrcLoc loc) const;

private:
  mlir::OpBuilder builder;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp func;
  std::vector<std::string> scopes;
  llvm::SmallVector<mlir::Value> outputs;
  llvm::SmallVector<std::string> outputNames;
};

//===----------------------------------------------------------------------===//
// Ops. Shapes are checked by the op verifiers when `finish` verifies.
//===----------------------------------------------------------------------===//

Tensor embedding(Tensor table, Tensor ids, SrcLoc loc = SrcLoc::current());
Tensor positions(Graph &g, int64_t n, SrcLoc loc = SrcLoc::current());

struct MatmulOptions {
  bool transposeA = false;
  bool transposeB = false;
};
Tensor matmul(Tensor a, Tensor b, MatmulOptions opts = {},
              SrcLoc loc = SrcLoc::current());
Tensor layernorm(Tensor x, Tensor gamma, Tensor beta, double epsilon = 1e-5,
                 SrcLoc loc = SrcLoc::current());
Tensor softmax(Tensor x, SrcLoc loc = SrcLoc::current());
Tensor causalMask(Tensor x, SrcLoc loc = SrcLoc::current());
Tensor gelu(Tensor x, SrcLoc loc = SrcLoc::current());
Tensor reshape(Tensor x, const Shape &shape, SrcLoc loc = SrcLoc::current());
Tensor transpose(Tensor x, const std::vector<int64_t> &permutation,
                 SrcLoc loc = SrcLoc::current());
/// Splits `x` into `pieces` equal parts along `axis`.
std::vector<Tensor> split(Tensor x, int64_t axis, int64_t pieces,
                          SrcLoc loc = SrcLoc::current());
Tensor crossEntropy(Tensor logits, Tensor targets,
                    SrcLoc loc = SrcLoc::current());
Tensor constant(Graph &g, float value, SrcLoc loc = SrcLoc::current());

Tensor add(Tensor a, Tensor b, SrcLoc loc = SrcLoc::current());
Tensor sub(Tensor a, Tensor b, SrcLoc loc = SrcLoc::current());
Tensor mul(Tensor a, Tensor b, SrcLoc loc = SrcLoc::current());
Tensor div(Tensor a, Tensor b, SrcLoc loc = SrcLoc::current());

// An operator cannot take a default argument, so the left operand converts
// to `Located`, whose constructor captures the location of the expression
// that wrote `a + b` in the model.
struct Located {
  Located(Tensor tensor, SrcLoc loc = SrcLoc::current())
      : tensor(tensor), loc(loc) {}
  Tensor tensor;
  SrcLoc loc;
};
Tensor operator+(Located a, Tensor b);
Tensor operator-(Located a, Tensor b);
Tensor operator*(Located a, Tensor b);
Tensor operator/(Located a, Tensor b);
Tensor operator*(Located a, float s);

} // namespace gptc::dsl

#endif // GPTC_DSL_GRAPH_H
