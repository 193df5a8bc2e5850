//===- GradKernels.cpp - the adjoint ops of gpt-autodiff ------------------===//
//
// Reductions accumulate in double and in a fixed order, so gradients do not
// depend on the thread count (exact --resume needs bitwise repeatability).
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Kernels.h"

#include "RowExpSum.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gptc::exec {

HostTensor reduceSum(const HostTensor &x, const std::vector<int64_t> &shape) {
  // Each input element adds into the output element it broadcast from.
  size_t rank = x.shape.size(), offset = rank - shape.size();
  std::vector<int64_t> outStrides(rank, 0);
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    outStrides[offset + i] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  std::vector<double> acc(numElements(shape), 0.0);
  int64_t n = x.numel();
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d)
      o += index[d] * outStrides[d];
    acc[o] += x.f32[i];
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < x.shape[d])
        break;
      index[d] = 0;
    }
  }
  HostTensor out = HostTensor::floats(shape);
  for (size_t i = 0; i < acc.size(); ++i)
    out.f32[i] = float(acc[i]);
  return out;
}

HostTensor attentionBiasGrad(const HostTensor &dqkv, const HostTensor &dout) {
  const int64_t C = dout.shape.back(), rows = dout.numel() / C;
  if (dqkv.shape.back() != 3 * C || dqkv.numel() != 3 * rows * C)
    throw KernelError("attention_bias_grad: dqkv " + shapeString(dqkv.shape) +
                      " is not three times dout " + shapeString(dout.shape));
  std::vector<double> q(size_t(C), 0.0), v(size_t(C), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      q[c] += dqkv.f32[r * 3 * C + c];
      v[c] += dout.f32[r * C + c];
    }
  HostTensor out = HostTensor::floats({3 * C}); // k's third stays zero
  for (int64_t c = 0; c < C; ++c) {
    out.f32[c] = float(q[c]);
    out.f32[2 * C + c] = float(v[c]);
  }
  return out;
}

HostTensor concat(const std::vector<const HostTensor *> &inputs,
                  int64_t axis) {
  std::vector<int64_t> shape = inputs[0]->shape;
  shape[axis] = 0;
  for (const HostTensor *in : inputs)
    shape[axis] += in->shape[axis];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d)
    inner *= shape[d];
  HostTensor out = HostTensor::floats(shape);
  int64_t start = 0;
  for (const HostTensor *in : inputs) {
    int64_t size = in->shape[axis];
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(in->data() + o * size * inner, size * inner,
                  out.data() + (o * shape[axis] + start) * inner);
    start += size;
  }
  return out;
}

HostTensor embeddingGrad(const HostTensor &dy, const HostTensor &ids,
                         const std::vector<int64_t> &tableShape,
                         const HostTensor *addend) {
  int64_t C = tableShape[1], n = ids.numel();
  if (addend && addend->shape != tableShape)
    throw KernelError("embedding_grad: the addend is not of the table's "
                      "shape");
  std::vector<double> acc(numElements(tableShape), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t row = ids.i32[i];
    if (row < 0 || row >= tableShape[0])
      throw KernelError("id " + std::to_string(row) + " at position " +
                        std::to_string(i) + " is outside the table's " +
                        std::to_string(tableShape[0]) + " rows");
    for (int64_t c = 0; c < C; ++c)
      acc[row * C + c] += dy.f32[i * C + c];
  }
  HostTensor out = HostTensor::floats(tableShape);
  for (size_t i = 0; i < acc.size(); ++i)
    out.f32[i] = addend ? addend->f32[i] + float(acc[i]) : float(acc[i]);
  return out;
}

int sortedIdPositionBits(int64_t positions) {
  int bits = 0;
  while (bits < 62 && (int64_t(1) << bits) < positions)
    ++bits;
  return bits;
}

bool idsSortable(int64_t positions, int64_t rows) {
  int rowBits = 0;
  while (rowBits < 62 && (int64_t(1) << rowBits) <= rows)
    ++rowBits;
  return positions > 0 && positions <= kMaxSortedIds && rows > 0 &&
         rowBits + sortedIdPositionBits(positions) <= 31;
}

HostTensor sortIds(const HostTensor &ids, int64_t rows, int positionBits) {
  const int64_t n = ids.numel();
  if (positionBits < sortedIdPositionBits(n) || !idsSortable(n, rows))
    throw KernelError("sort_ids: " + std::to_string(n) +
                      " positions of a table of " + std::to_string(rows) +
                      " rows do not fit keys of " +
                      std::to_string(positionBits) + " position bits");
  HostTensor keys = HostTensor::ids({n});
  for (int64_t p = 0; p < n; ++p) {
    const int64_t row = ids.i32[p];
    if (row < 0 || row >= rows)
      throw KernelError("id " + std::to_string(row) + " at position " +
                        std::to_string(p) + " is outside the table's " +
                        std::to_string(rows) + " rows");
    keys.i32[p] = int32_t(row << positionBits | p);
  }
  std::sort(keys.i32.begin(), keys.i32.end());
  return keys;
}

HostTensor idsOfSortedKeys(const HostTensor &keys, int positionBits) {
  const int64_t n = keys.numel();
  HostTensor ids = HostTensor::ids({n});
  std::fill(ids.i32.begin(), ids.i32.end(), -1);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t key = keys.i32[i];
    const int64_t p = key & ((int64_t(1) << positionBits) - 1);
    if (key < 0 || p >= n || ids.i32[p] >= 0)
      throw KernelError("sorted ids: key " + std::to_string(key) + " at " +
                        std::to_string(i) + " is not a position of " +
                        std::to_string(n) + " once");
    ids.i32[p] = key >> positionBits;
  }
  return ids;
}

// With xhat = (x - mean) · rstd and dxhat = dy · gamma:
//   dx = rstd · (dxhat - mean(dxhat) - xhat · mean(dxhat · xhat)).
std::vector<HostTensor> layernormGrad(const HostTensor &x,
                                      const HostTensor &gamma,
                                      const HostTensor &dy, float epsilon) {
  int64_t C = x.shape.back(), rows = x.numel() / C;
  HostTensor dx = HostTensor::floats(x.shape);
  std::vector<double> dgamma(C, 0.0), dbeta(C, 0.0);
  std::vector<double> xhatRows(x.numel());
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float *in = x.data() + r * C, *g = dy.data() + r * C;
    double *xhat = xhatRows.data() + r * C;
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; ++c)
      mean += in[c];
    mean /= double(C);
    for (int64_t c = 0; c < C; ++c)
      var += (in[c] - mean) * (in[c] - mean);
    double rstd = 1.0 / std::sqrt(var / double(C) + double(epsilon));
    double meanD = 0.0, meanDX = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      xhat[c] = (in[c] - mean) * rstd;
      double d = double(g[c]) * gamma.f32[c];
      meanD += d;
      meanDX += d * xhat[c];
    }
    meanD /= double(C);
    meanDX /= double(C);
    for (int64_t c = 0; c < C; ++c) {
      double d = double(g[c]) * gamma.f32[c];
      dx.f32[r * C + c] = float(rstd * (d - meanD - xhat[c] * meanDX));
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      dgamma[c] += double(dy.f32[r * C + c]) * xhatRows[r * C + c];
      dbeta[c] += dy.f32[r * C + c];
    }
  HostTensor dg = HostTensor::floats({C}), db = HostTensor::floats({C});
  for (int64_t c = 0; c < C; ++c) {
    dg.f32[c] = float(dgamma[c]);
    db.f32[c] = float(dbeta[c]);
  }
  return {std::move(dx), std::move(dg), std::move(db)};
}

HostTensor softmaxGrad(const HostTensor &y, const HostTensor &dy) {
  int64_t C = y.shape.back(), rows = y.numel() / C;
  HostTensor dx = HostTensor::floats(y.shape);
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float *p = y.data() + r * C, *g = dy.data() + r * C;
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c)
      dot += double(p[c]) * g[c];
    for (int64_t c = 0; c < C; ++c)
      dx.f32[r * C + c] = float(p[c] * (g[c] - dot));
  }
  return dx;
}

HostTensor geluGrad(const HostTensor &x, const HostTensor &dy,
                    bool tanhApproximation) {
  HostTensor dx = HostTensor::floats(x.shape);
  int64_t n = x.numel();
  const double k = std::sqrt(2.0 / M_PI);
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    double v = x.f32[i], slope;
    if (tanhApproximation) {
      double inner = k * (v + 0.044715 * v * v * v);
      double t = std::tanh(inner);
      double dInner = k * (1.0 + 3.0 * 0.044715 * v * v);
      slope = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dInner;
    } else {
      double cdf = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
      double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
      slope = cdf + v * pdf;
    }
    dx.f32[i] = float(slope * dy.f32[i]);
  }
  return dx;
}

HostTensor crossEntropyGrad(const HostTensor &logits,
                            const HostTensor &targets,
                            const HostTensor &dloss, int64_t numClasses,
                            std::optional<int32_t> ignoreIndex) {
  int64_t V = logits.shape.back(), rows = targets.numel();
  int64_t classes = numClasses < 0 ? V : numClasses;
  auto ignored = [&](int64_t r) { return ignoreIndex && targets.i32[r] == *ignoreIndex; };
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r)
    counted += !ignored(r);
  // Padded columns and ignored rows stay exactly 0.
  HostTensor dlogits = HostTensor::floats(logits.shape);
  double scale = double(dloss.f32[0]) / double(counted);
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    if (ignored(r))
      continue;
    const float *row = logits.data() + r * V;
    float *out = dlogits.data() + r * V;
    auto [max, sum] = rowExpSum(row, classes);
    int32_t target = targets.i32[r];
    for (int64_t v = 0; v < classes; ++v) {
      double p = std::exp(row[v] - max) / sum;
      out[v] = float((p - (v == target ? 1.0 : 0.0)) * scale);
    }
  }
  return dlogits;
}

} // namespace gptc::exec
