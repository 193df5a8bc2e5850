//===- AttentionGraphInterpreter.h - cuDNN's graphs run on the CPU -*- C++ -*-//
//
// Test code. Runs an AttentionGraph (lib/Runtime/AttentionGraph.h) op by
// op with cuDNN's semantics: each tensor read and written through its own
// dims and strides (size-1 dims broadcast), a reshape a second view of the
// same elements, bf16 tensors rounded where they are stored and read.
// AttentionGraphTest.cpp checks the graphs with it against the executor;
// FakeCudnn.cpp runs what the CUDA backend hands "cuDNN" with it, on the
// fake driver's host memory.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_UNITTESTS_RUNTIME_ATTENTIONGRAPHINTERPRETER_H
#define GPTC_UNITTESTS_RUNTIME_ATTENTIONGRAPHINTERPRETER_H

#include "AttentionGraph.h"

#include "gptc/Executor/Precision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace gptc::rt::attention::testing {

class Interpreter {
public:
  explicit Interpreter(const AttentionGraph &g) : g(g) {}

  /// Binds a role's tensor to float32 elements, whatever its type.
  void bind(GraphRole role, float *base) {
    const int64_t uid = g.roles.at(role);
    views[uid] = {base, g.tensor(uid).strides, false};
  }
  /// Binds a tensor to elements of its own type (bf16: two bytes each), as
  /// device memory holds them.
  void bindTyped(int64_t uid, void *base) {
    const GraphTensor &t = g.tensor(uid);
    views[uid] = {base, t.strides, t.type == GraphType::BF16};
  }

  /// Runs every op; "" or what is wrong with the graph.
  std::string run() {
    for (const GraphTensor &t : g.tensors)
      if (t.byValue) {
        own[t.uid] = {t.value};
        views[t.uid] = {own[t.uid].data(), t.strides, false};
      }
    for (const GraphOp &op : g.ops) {
      for (int64_t in : op.inputs)
        if (!views.count(in))
          return op.name + " reads tensor " + std::to_string(in) +
                 ", which nothing wrote or bound";
      const GraphTensor &y = g.tensor(op.output);
      if (op.kind == GraphOp::Kind::Reshape) {
        // The same elements through the output's strides (and, where
        // the output's type differs, read as that type).
        const View &x = views.at(op.inputs[0]);
        views[y.uid] = {x.base, y.strides, x.bf16};
        continue;
      }
      storage(y);
      std::string wrong;
      if (op.kind == GraphOp::Kind::Matmul)
        wrong = matmul(op);
      else if (op.kind == GraphOp::Kind::Reduction)
        reduce(op);
      else
        pointwise(op);
      if (!wrong.empty())
        return wrong;
    }
    return "";
  }

  float read(int64_t uid, const std::array<int64_t, 4> &i) const {
    const GraphTensor &t = g.tensor(uid);
    const View &v = views.at(uid);
    int64_t at = 0;
    for (int d = 0; d < 4; ++d)
      at += (t.dims[d] == 1 ? 0 : i[d]) * v.strides[d];
    float x;
    if (v.bf16) {
      uint32_t bits = uint32_t(static_cast<const uint16_t *>(v.base)[at]) << 16;
      std::memcpy(&x, &bits, 4);
    } else {
      x = static_cast<const float *>(v.base)[at];
    }
    return t.type == GraphType::BF16 ? exec::roundToBF16(x) : x;
  }

private:
  /// Where a tensor's elements are, and whether they are stored as bf16
  /// (device memory of a bf16 tensor) or as float32 (everything else).
  struct View {
    void *base = nullptr;
    std::array<int64_t, 4> strides{};
    bool bf16 = false;
  };

  template <typename F>
  static void each(const std::array<int64_t, 4> &dims, F f) {
    std::array<int64_t, 4> i{};
    for (i[0] = 0; i[0] < dims[0]; ++i[0])
      for (i[1] = 0; i[1] < dims[1]; ++i[1])
        for (i[2] = 0; i[2] < dims[2]; ++i[2])
          for (i[3] = 0; i[3] < dims[3]; ++i[3])
            f(i);
  }

  void storage(const GraphTensor &t) {
    if (views.count(t.uid))
      return; // bound
    // Stored as its strides say, so that a reshape sees its elements
    // where cuDNN's would be; but where they overlap (cudnn-frontend's
    // dout·out, a tensor no engine stores) densely.
    int64_t span = 1;
    for (int d = 0; d < 4; ++d)
      span += (t.dims[d] - 1) * t.strides[d];
    std::vector<bool> used(static_cast<size_t>(span), false);
    bool overlaps = false;
    each(t.dims, [&](const std::array<int64_t, 4> &i) {
      int64_t at = 0;
      for (int d = 0; d < 4; ++d)
        at += i[d] * t.strides[d];
      overlaps |= used[size_t(at)];
      used[size_t(at)] = true;
    });
    std::array<int64_t, 4> strides = t.strides;
    if (overlaps) {
      strides = {t.dims[1] * t.dims[2] * t.dims[3], t.dims[2] * t.dims[3],
                 t.dims[3], 1};
      span = t.dims[0] * strides[0];
    }
    own[t.uid].assign(size_t(span), std::nanf(""));
    views[t.uid] = {own[t.uid].data(), strides, false};
  }

  void write(const GraphTensor &t, const std::array<int64_t, 4> &i, float x) {
    const View &v = views.at(t.uid);
    int64_t at = 0;
    for (int d = 0; d < 4; ++d)
      at += i[d] * v.strides[d];
    if (t.type == GraphType::BF16)
      x = exec::roundToBF16(x);
    else if (t.type == GraphType::Bool)
      x = x != 0 ? 1.0f : 0.0f;
    if (v.bf16) {
      static_cast<uint16_t *>(v.base)[at] = exec::bf16BitsOf(x);
    } else {
      static_cast<float *>(v.base)[at] = x;
    }
  }

  std::string matmul(const GraphOp &op) {
    const GraphTensor &a = g.tensor(op.inputs.at(0)),
                      &b = g.tensor(op.inputs.at(1)), &c = g.tensor(op.output);
    if (a.dims[3] != b.dims[2] || c.dims[2] != a.dims[2] ||
        c.dims[3] != b.dims[3])
      return op.name + ": [" + std::to_string(a.dims[2]) + ", " +
             std::to_string(a.dims[3]) + "] by [" + std::to_string(b.dims[2]) +
             ", " + std::to_string(b.dims[3]) + "] into [" +
             std::to_string(c.dims[2]) + ", " + std::to_string(c.dims[3]) + "]";
    each(c.dims, [&](const std::array<int64_t, 4> &i) {
      double sum = 0;
      for (int64_t k = 0; k < a.dims[3]; ++k)
        sum += double(read(a.uid, {i[0], i[1], i[2], k})) *
               double(read(b.uid, {i[0], i[1], k, i[3]}));
      write(c, i, float(sum));
    });
    return "";
  }

  void reduce(const GraphOp &op) {
    const GraphTensor &x = g.tensor(op.inputs.at(0)), &y = g.tensor(op.output);
    const bool max = op.reduction == ReductionMode::Max;
    std::map<std::array<int64_t, 4>, double> acc;
    each(x.dims, [&](const std::array<int64_t, 4> &i) {
      std::array<int64_t, 4> o = i;
      for (int d = 0; d < 4; ++d)
        if (y.dims[d] == 1)
          o[d] = 0;
      const double v = read(x.uid, i);
      auto [it, added] = acc.try_emplace(o, v);
      if (!added)
        it->second = max ? std::max(it->second, v) : it->second + v;
    });
    for (const auto &[i, v] : acc)
      write(y, i, float(v));
  }

  void pointwise(const GraphOp &op) {
    const GraphTensor &y = g.tensor(op.output);
    each(y.dims, [&](const std::array<int64_t, 4> &i) {
      auto in = [&](size_t n) { return read(op.inputs.at(n), i); };
      float r = 0;
      switch (op.pointwise) {
      case PointwiseMode::Add:
        r = in(0) + in(1);
        break;
      case PointwiseMode::Sub:
        r = in(0) - in(1);
        break;
      case PointwiseMode::Mul:
        r = in(0) * in(1);
        break;
      case PointwiseMode::Div:
        r = in(0) / in(1);
        break;
      case PointwiseMode::Exp:
        r = std::exp(in(0));
        break;
      case PointwiseMode::Log:
        r = std::log(in(0));
        break;
      case PointwiseMode::Identity:
        r = in(0);
        break;
      case PointwiseMode::GenIndex:
        r = float(i.at(size_t(op.axis)));
        break;
      case PointwiseMode::CmpGe:
        r = in(0) >= in(1) ? 1.0f : 0.0f;
        break;
      case PointwiseMode::BinarySelect:
        r = in(2) != 0 ? in(0) : in(1);
        break;
      }
      write(y, i, r);
    });
  }

  const AttentionGraph &g;
  std::map<int64_t, View> views;
  std::map<int64_t, std::vector<float>> own;
};

} // namespace gptc::rt::attention::testing

#endif // GPTC_UNITTESTS_RUNTIME_ATTENTIONGRAPHINTERPRETER_H
