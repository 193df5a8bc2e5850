//===- ScalarProgram.cpp - fused bodies as register programs --------------===//
//
// Register r holds a chunk of kChunk elements of one scalar value. Arguments
// point straight into their tensor where it has the iteration shape, or are
// gathered (broadcast) into their register; each instruction is one loop
// over the chunk, which vectorises.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/ScalarProgram.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gptc::exec {

const char *opcodeName(Opcode op) {
  switch (op) {
  case Opcode::Add: return "add";
  case Opcode::Sub: return "sub";
  case Opcode::Mul: return "mul";
  case Opcode::Div: return "div";
  case Opcode::Max: return "max";
  case Opcode::Min: return "min";
  case Opcode::Neg: return "neg";
  case Opcode::Exp: return "exp";
  case Opcode::Log: return "log";
  case Opcode::Tanh: return "tanh";
  case Opcode::Sqrt: return "sqrt";
  case Opcode::Rsqrt: return "rsqrt";
  case Opcode::Erf: return "erf";
  case Opcode::Const: return "const";
  }
  return "?";
}

namespace {

constexpr int64_t kChunk = 2048;
constexpr int64_t kParallelElements = int64_t(1) << 18;

/// Runs the code over `len` elements; `src[r]` points at register r's chunk
/// (arguments already loaded); computed registers live in `scratch`.
void runChunk(const ScalarProgram &p, std::vector<const float *> &src,
              float *scratch, int64_t len) {
  for (const Instruction &in : p.code) {
    float *d = scratch + int64_t(in.dst) * kChunk;
    const float *a = src[in.a], *b = src[in.b];
    switch (in.op) {
#define GPTC_LOOP(expr)                                                        \
  for (int64_t i = 0; i < len; ++i)                                            \
    d[i] = (expr);                                                             \
  break;
    case Opcode::Add: GPTC_LOOP(a[i] + b[i])
    case Opcode::Sub: GPTC_LOOP(a[i] - b[i])
    case Opcode::Mul: GPTC_LOOP(a[i] * b[i])
    case Opcode::Div: GPTC_LOOP(a[i] / b[i])
    case Opcode::Max: GPTC_LOOP(std::max(a[i], b[i]))
    case Opcode::Min: GPTC_LOOP(std::min(a[i], b[i]))
    case Opcode::Neg: GPTC_LOOP(-a[i])
    case Opcode::Exp: GPTC_LOOP(std::exp(a[i]))
    case Opcode::Log: GPTC_LOOP(std::log(a[i]))
    case Opcode::Tanh: GPTC_LOOP(std::tanh(a[i]))
    case Opcode::Sqrt: GPTC_LOOP(std::sqrt(a[i]))
    case Opcode::Rsqrt: GPTC_LOOP(1.0f / std::sqrt(a[i]))
    case Opcode::Erf: GPTC_LOOP(std::erf(a[i]))
    case Opcode::Const: GPTC_LOOP(in.value)
#undef GPTC_LOOP
    }
    src[in.dst] = d;
  }
}

/// Where an argument's elements come from, seen from the iteration shape.
struct ArgumentSource {
  const float *data;
  bool contiguous;              // same shape: point into it
  std::vector<int64_t> strides; // otherwise: 0 on broadcast dimensions
};

ArgumentSource sourceOf(const HostTensor &t,
                        const std::vector<int64_t> &shape) {
  if (t.kind != ElementKind::F32)
    throw KernelError("fused ops take float tensors only");
  ArgumentSource s{t.data(), t.shape == shape, {}};
  if (s.contiguous)
    return s;
  s.strides.assign(shape.size(), 0);
  int64_t stride = 1;
  size_t offset = shape.size() - t.shape.size();
  for (size_t i = t.shape.size(); i-- > 0;) {
    s.strides[offset + i] = t.shape[i] == 1 ? 0 : stride;
    stride *= t.shape[i];
  }
  return s;
}

/// Copies elements [start, start + len) of the broadcast view into `dst`.
void gather(const ArgumentSource &s, const std::vector<int64_t> &shape,
            int64_t start, int64_t len, float *dst) {
  size_t rank = shape.size();
  if (rank == 0 || std::all_of(s.strides.begin(), s.strides.end(),
                               [](int64_t x) { return x == 0; })) {
    std::fill(dst, dst + len, s.data[0]);
    return;
  }
  std::vector<int64_t> index(rank);
  int64_t rest = start, offset = 0;
  for (size_t d = rank; d-- > 0;) {
    index[d] = rest % shape[d];
    rest /= shape[d];
    offset += index[d] * s.strides[d];
  }
  for (int64_t i = 0; i < len; ++i) {
    dst[i] = s.data[offset];
    for (size_t d = rank; d-- > 0;) {
      offset += s.strides[d];
      if (++index[d] < shape[d])
        break;
      offset -= index[d] * s.strides[d];
      index[d] = 0;
    }
  }
}

/// One unit of work: elements [start, start + len) of tensor `tensor`.
struct Chunk {
  int64_t tensor, start, len;
};

/// Runs `p` over every chunk of every tensor (OpenMP over chunks) and hands
/// each chunk's registers to `consume(c, chunk, src)`, c numbering the
/// chunks in tensor and element order. Per tensor t, `args[t]` are the
/// sources of the body arguments, of or broadcasting to `shapes[t]`.
template <typename Consume>
void forEachChunk(const ScalarProgram &p,
                  const std::vector<std::vector<ArgumentSource>> &args,
                  const std::vector<std::vector<int64_t>> &shapes,
                  Consume consume) {
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < shapes.size(); ++t) {
    int64_t n = numElements(shapes[t]);
    for (int64_t start = 0; start < n; start += kChunk)
      chunks.push_back({int64_t(t), start, std::min(kChunk, n - start)});
  }
  // Registers live in per-thread buffers kept across calls: no allocation
  // inside the parallel loop. Small ops stay on one thread: waking the team
  // costs more than they do.
  int64_t total = 0;
  for (const Chunk &chunk : chunks)
    total += chunk.len;
#pragma omp parallel for schedule(static) if (total >= kParallelElements)
  for (size_t c = 0; c < chunks.size(); ++c) {
    thread_local std::vector<float> scratchBuffer;
    thread_local std::vector<const float *> src;
    scratchBuffer.resize(std::max(scratchBuffer.size(),
                                  size_t(p.numRegisters) * kChunk));
    src.resize(std::max(src.size(), size_t(p.numRegisters)));
    float *scratch = scratchBuffer.data();
    const Chunk &chunk = chunks[c];
    for (int a = 0; a < p.numArgs; ++a) {
      const ArgumentSource &s = args[chunk.tensor][a];
      if (s.contiguous) {
        src[a] = s.data + chunk.start;
        continue;
      }
      float *reg = scratch + int64_t(a) * kChunk;
      gather(s, shapes[chunk.tensor], chunk.start, chunk.len, reg);
      src[a] = reg;
    }
    runChunk(p, src, scratch, chunk.len);
    consume(c, chunk, src);
  }
}

std::vector<std::vector<ArgumentSource>>
sourcesOf(const std::vector<std::vector<const HostTensor *>> &args,
          const std::vector<std::vector<int64_t>> &shapes) {
  std::vector<std::vector<ArgumentSource>> sources(args.size());
  for (size_t t = 0; t < args.size(); ++t)
    for (const HostTensor *x : args[t])
      sources[t].push_back(sourceOf(*x, shapes[t]));
  return sources;
}

} // namespace

double
sumScalarProgram(const ScalarProgram &p,
                 const std::vector<std::vector<const HostTensor *>> &args,
                 const std::vector<std::vector<int64_t>> &shapes) {
  if (p.results.size() != 1)
    throw KernelError("a reduced body yields one value");
  // Chunk partials in double, added in chunk order: the sum depends on the
  // chunking (fixed), never on the thread count.
  size_t numChunks = 0;
  for (const std::vector<int64_t> &shape : shapes)
    numChunks += size_t((numElements(shape) + kChunk - 1) / kChunk);
  std::vector<double> partials(numChunks, 0.0);
  forEachChunk(p, sourcesOf(args, shapes), shapes,
               [&](size_t c, const Chunk &chunk,
                   const std::vector<const float *> &src) {
                 const float *y = src[p.results[0]];
                 double sum = 0.0;
                 for (int64_t i = 0; i < chunk.len; ++i)
                   sum += double(y[i]);
                 partials[c] = sum;
               });
  double sum = 0.0;
  for (double partial : partials)
    sum += partial;
  return sum;
}

void runScalarProgram(const ScalarProgram &p,
                      const std::vector<std::vector<const HostTensor *>> &args,
                      const std::vector<std::vector<float *>> &outs,
                      const std::vector<std::vector<int64_t>> &shapes) {
  forEachChunk(p, sourcesOf(args, shapes), shapes,
               [&](size_t, const Chunk &chunk,
                   const std::vector<const float *> &src) {
                 for (size_t r = 0; r < p.results.size(); ++r)
                   std::memcpy(outs[chunk.tensor][r] + chunk.start,
                               src[p.results[r]], chunk.len * sizeof(float));
               });
}

} // namespace gptc::exec
