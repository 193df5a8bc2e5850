//===- EmitMultiTensor.cpp - kernels over many tensors in one launch ------===//
//
// gpt.multi_tensor_elementwise (AdamW) and gpt.multi_tensor_reduce (the
// squared global gradient norm) walk all their tensors as one flat sequence
// of blocks: a __constant__ table gives each tensor's first block, a block
// finds its tensor by binary search and picks the tensor's pointers from a
// switch. The body is the launch's scalar code; per-tensor constants
// (`per_tensor`) come from a second table. When every tensor's length is a
// multiple of 4, a thread takes 4 consecutive elements with one vector
// access per operand (16 bytes of float32: AdamW's four loads are 64 bytes
// in flight a thread, not 16); else one element at a time, 256 apart.
// Buffers start 256-byte aligned, and blocks start 1024 elements in.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

namespace gptc::cuda::detail {

namespace {
/// Elements per block (of multi_tensor_reduce: per chunk): 256 threads, 4
/// elements a thread.
constexpr int64_t kBlockElems = 1024;
/// Chunks a multi_tensor_reduce block sums: its tree, partial and arrival
/// are paid once for this many chunks (GPT-2 124M's gradient norm ran as
/// 121,597 blocks of one chunk, 32% of its DRAM floor on an H100).
constexpr int64_t kReduceChunks = 16;
} // namespace

/// How a multi-tensor launch's operands feed its body: body argument j <
/// perTensor reads tensors[j * n + t]; then `constants` per-tensor constants;
/// then the scalars, which follow the tensors in the inputs.
struct MultiTensorLayout {
  int64_t n = 0, perTensor = 0, constants = 0, scalars = 0;
  std::vector<double> perTensorValues;
  /// Per-tensor argument j is one element for every tensor (a rank-0
  /// tensor): it broadcasts.
  std::vector<bool> broadcasts;
  int64_t input(int64_t j, int64_t t) const {
    return j < perTensor ? j * n + t
                         : perTensor * n + (j - perTensor - constants);
  }
};

/// `numels[t]` is tensor t's element count; `outs` the (type, name) of the
/// per-tensor result pointers. Emits the block table, the per-tensor constants,
/// and the kernel's head: `t`, the per-tensor pointers `a<j>`, and the body's
/// arguments that are the same for the whole block (constants and scalars),
/// then `n` and `base`. Returns the number of blocks.
int64_t Emitter::multiTensorHead(
    const MultiTensorLayout &m, const std::vector<int64_t> &numels,
    const std::vector<std::pair<std::string, std::string>> &outs,
    const std::string &chunk, const std::string &ind) {
  int64_t chunks = multiTensorTables(m, numels);
  multiTensorPick(m, outs, chunk, ind);
  return chunks;
}

int64_t Emitter::multiTensorTables(const MultiTensorLayout &m,
                                   const std::vector<int64_t> &numels) {
  Emitter &e = *this;
  std::vector<int64_t> firstBlock{0};
  for (int64_t t = 0; t < m.n; ++t)
    firstBlock.push_back(firstBlock.back() +
                         ceilDiv(std::max<int64_t>(numels[t], 1), kBlockElems));
  e.pre << "// Tensor t owns chunks of " << kBlockElems
        << " elements [kFirstBlock[t], kFirstBlock[t + 1]).\n"
        << "__constant__ i64 kFirstBlock[" << m.n + 1 << "] = {";
  for (size_t i = 0; i < firstBlock.size(); ++i)
    e.pre << (i ? ", " : "") << firstBlock[i];
  e.pre << "};\n__constant__ i64 kNumel[" << m.n << "] = {";
  for (int64_t t = 0; t < m.n; ++t)
    e.pre << (t ? ", " : "") << numels[t];
  e.pre << "};\n";
  if (m.constants > 0) {
    e.pre << "// Constant k of tensor t: kPerTensor[k * " << m.n << " + t].\n"
          << "__constant__ float kPerTensor[" << m.perTensorValues.size()
          << "] = {";
    for (size_t i = 0; i < m.perTensorValues.size(); ++i)
      e.pre << (i ? ", " : "") << floatLiteral(m.perTensorValues[i]);
    e.pre << "};\n";
  }
  e.pre << "\n";
  return firstBlock.back();
}

void Emitter::multiTensorPick(
    const MultiTensorLayout &m,
    const std::vector<std::pair<std::string, std::string>> &outs,
    const std::string &chunk, const std::string &ind) {
  Emitter &e = *this;
  os << ind << "  int lo = 0, hi = " << m.n - 1 << ";\n"
     << ind << "  while (lo < hi) { // the last tensor whose first block <= ours\n"
     << ind << "    int mid = (lo + hi + 1) / 2;\n"
     << ind << "    if (kFirstBlock[mid] <= " << chunk
     << ") lo = mid; else hi = mid - 1;\n"
     << ind << "  }\n"
     << ind << "  const int t = lo;\n";
  for (int64_t j = 0; j < m.perTensor; ++j)
    os << ind << "  const " << e.tin(m.input(j, 0)) << " *a" << j << ";\n";
  for (const auto &[type, name] : outs)
    os << ind << "  " << type << " *" << name << ";\n";
  // The last case is the default: every block has a tensor, and no thread
  // may leave before the block's barriers.
  os << ind << "  switch (t) {\n";
  for (int64_t t = 0; t < m.n; ++t) {
    os << ind
       << (t + 1 == m.n ? "  default:" : "  case " + std::to_string(t) + ":");
    for (int64_t j = 0; j < m.perTensor; ++j)
      os << " a" << j << " = in" << m.input(j, t) << ";";
    for (size_t r = 0; r < outs.size(); ++r)
      os << " " << outs[r].second << " = out" << r * m.n + t << ";";
    os << " break;\n";
  }
  os << ind << "  }\n";
  for (int64_t k = 0; k < m.constants; ++k)
    os << ind << "  const float r" << m.perTensor + k << " = kPerTensor["
       << k * m.n << " + t];\n";
  for (int64_t j = m.perTensor + m.constants;
       j < m.perTensor + m.constants + m.scalars; ++j)
    os << ind << "  const float r" << j << " = toFloat(in" << m.input(j, 0)
       << "[0]);\n";
  os << ind << "  const i64 n = kNumel[t];\n"
     << ind << "  const i64 base = (" << chunk << " - kFirstBlock[t]) * "
     << kBlockElems << ";\n";
}

bool Emitter::multiTensorVectorizes(const std::vector<int64_t> &numels) {
  for (int64_t n : numels)
    if (n % 4 != 0)
      return false;
  return true;
}

void Emitter::multiTensorLoop(const MultiTensorLayout &m, bool vec,
                              const std::string &ind) {
  if (!vec) {
    os << ind << "  for (i64 i = base + threadIdx.x; i < n && i < base + "
       << kBlockElems << "; i += blockDim.x) {\n";
    for (int64_t j = 0; j < m.perTensor; ++j)
      os << ind << "    const float r" << j << " = toFloat(a" << j << "["
         << (m.broadcasts[j] ? "0" : "i") << "]);\n";
    return;
  }
  static_assert(kBlockElems == 256 * 4, "a block is 256 threads of 4");
  os << ind << "  const i64 i = base + 4 * i64(threadIdx.x);\n"
     << ind << "  if (i < n) {\n";
  for (int64_t j = 0; j < m.perTensor; ++j)
    if (m.broadcasts[j])
      os << ind << "    const float s" << j << " = toFloat(a" << j
         << "[0]);\n";
    else
      os << ind << "    float x" << j << "[4];\n"
         << ind << "    load4(a" << j << " + i, x" << j << ");\n";
}

void Emitter::multiTensorElement(const MultiTensorLayout &m,
                                 const std::string &ind) {
  for (int64_t j = 0; j < m.perTensor; ++j)
    os << ind << "      const float r" << j << " = "
       << (m.broadcasts[j] ? "s" + std::to_string(j)
                           : "x" + std::to_string(j) + "[e]")
       << ";\n";
}

/// Splits inputs = perTensor·n tensors + scalars, with numArgs = perTensor
/// + constants + scalars.
MultiTensorLayout Emitter::multiTensorLayout() {
  Emitter &e = *this;
  MultiTensorLayout m;
  m.n = e.intAttr("num_tensors", 0);
  if (m.n <= 0)
    e.unsupported("num_tensors is not positive");
  if (auto it = e.l.floatLists.find("per_tensor"); it != e.l.floatLists.end()) {
    if (it->second.empty() || it->second.size() % size_t(m.n))
      e.unsupported("per_tensor is not a multiple of num_tensors");
    m.perTensorValues = it->second;
    m.constants = int64_t(it->second.size()) / m.n;
  }
  int64_t numArgs = e.l.body.numArgs - m.constants;
  int64_t inputs = int64_t(e.l.inputs.size());
  m.perTensor = m.n == 1 ? numArgs : (inputs - numArgs) / (m.n - 1);
  m.scalars = numArgs - m.perTensor;
  if (numArgs < 0 || m.perTensor <= 0 || m.scalars < 0 ||
      m.perTensor * m.n + m.scalars != inputs)
    e.unsupported("operands do not split into tensors and scalars");
  // Pointers are chosen per tensor, so an argument has one dtype.
  for (int64_t j = 0; j < m.perTensor; ++j)
    for (int64_t t = 1; t < m.n; ++t)
      if (e.in(m.input(j, t)).dtype != e.in(m.input(j, 0)).dtype)
        e.unsupported("argument " + std::to_string(j) + " mixes dtypes");
  for (int64_t j = 0; j < m.perTensor; ++j) {
    bool one = true;
    for (int64_t t = 0; t < m.n; ++t)
      one &= e.in(m.input(j, t)).numel() == 1;
    m.broadcasts.push_back(one);
  }
  return m;
}

void Emitter::emitMultiTensor() {
  MultiTensorLayout m = multiTensorLayout();
  const size_t numResults = l.body.results.size();
  if (l.outputs.size() != numResults * size_t(m.n))
    unsupported("results are not num_tensors per body result");
  for (size_t r = 0; r < numResults; ++r)
    for (int64_t t = 1; t < m.n; ++t)
      if (out(r * m.n + t).dtype != out(r * m.n).dtype)
        unsupported("result " + std::to_string(r) + " mixes dtypes");
  std::vector<int64_t> numels;
  for (int64_t t = 0; t < m.n; ++t)
    numels.push_back(out(t).numel());
  std::vector<std::pair<std::string, std::string>> outs;
  for (size_t r = 0; r < numResults; ++r)
    outs.push_back({tout(r * m.n), "o" + std::to_string(r)});

  begin(entry, 256);
  int64_t blocks = multiTensorHead(m, numels, outs);
  bool vec = multiTensorVectorizes(numels);
  multiTensorLoop(m, vec);
  if (vec) {
    for (size_t r = 0; r < numResults; ++r)
      os << "    float y" << r << "[4];\n";
    os << "#pragma unroll\n    for (int e = 0; e < 4; ++e) {\n";
    multiTensorElement(m);
    scalarCode(l.body, "      ");
    for (size_t r = 0; r < numResults; ++r)
      os << "      y" << r << "[e] = r" << l.body.results[r] << ";\n";
    os << "    }\n";
    for (size_t r = 0; r < numResults; ++r)
      os << "    store4(o" << r << " + i, y" << r << ");\n";
  } else {
    scalarCode(l.body, "    ");
    for (size_t r = 0; r < numResults; ++r)
      os << "    o" << r << "[i] = fromFloat<" << tout(r * m.n) << ">(r"
         << l.body.results[r] << ");\n";
  }
  os << "  }\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(blocks);
}

void Emitter::emitMultiTensorReduce() {
  MultiTensorLayout m = multiTensorLayout();
  if (m.constants > 0)
    unsupported("per-tensor constants in a reduction");
  if (l.outputs.size() != 1 || out(0).numel() != 1 ||
      l.body.results.size() != 1)
    unsupported("expected one body result and one scalar output");
  std::vector<int64_t> numels;
  for (int64_t t = 0; t < m.n; ++t)
    numels.push_back(in(t).numel());
  useHeader("multi_tensor.cuh");

  begin(entry, 256);
  const int64_t chunks = multiTensorTables(m, numels);
  const int64_t blocks = ceilDiv(chunks, kReduceChunks);
  // Scratch of the grid-wide sum: one partial a block and the arrival
  // counter (lastBlockToArrive resets it for the next launch).
  deviceScratch("double", "gptcPartials", blocks);
  deviceScratch("unsigned", "gptcCounter", -1);
  pre << "\n";
  const bool vec = multiTensorVectorizes(numels);
  const std::string result = "r" + std::to_string(l.body.results[0]);
  // Block b sums chunks [b·kReduceChunks, ...) in order, each thread its
  // own terms in order, so the sum is the same whichever way it loads
  // (but for the sign of a zero: a skipped term adds +0 below).
  os << "  double sum = 0.0; // this thread's terms, in order\n"
     << "  const i64 first = i64(blockIdx.x) * " << kReduceChunks << ";\n";
  if (vec) {
    // Where the block's chunks are all one tensor's (all but the blocks
    // that straddle two tensors, or the end), the chunks' loads are free
    // of branches and of the sums, so ptxas keeps several in flight a
    // thread (sm_90a: 3, at 38 registers and 6 blocks an SM) where the
    // chunk loop had one, behind its tensor search (GPT-2 124M's norm ran
    // at 47% of its DRAM floor on an H200 so).
    os << "  {\n";
    multiTensorPick(m, {}, "first", "  ");
    os << "    if (first + " << kReduceChunks << " <= kFirstBlock[t + 1]) {\n";
    for (int64_t j = 0; j < m.perTensor; ++j)
      if (m.broadcasts[j])
        os << "      const float s" << j << " = toFloat(a" << j << "[0]);\n";
      else
        os << "      float x" << j << "[" << kReduceChunks << "][4];\n";
    os << "#pragma unroll\n"
       << "      for (int c = 0; c < " << kReduceChunks << "; ++c) {\n"
       << "        // (past the end: the last 4, loaded and not added, so that\n"
       << "        // no load waits on a branch)\n"
       << "        const i64 i = min(base + c * " << kBlockElems
       << " + 4 * i64(threadIdx.x), n - 4);\n";
    for (int64_t j = 0; j < m.perTensor; ++j)
      if (!m.broadcasts[j])
        os << "        load4(a" << j << " + i, x" << j << "[c]);\n";
    os << "      }\n"
       << "#pragma unroll\n"
       << "      for (int c = 0; c < " << kReduceChunks << "; ++c) {\n"
       << "        // A select, not a branch: NVVM sank a branch's loads into\n"
       << "        // it, one in flight again. (+0 for a term past the end.)\n"
       << "        const bool inside = base + c * " << kBlockElems
       << " + 4 * i64(threadIdx.x) < n;\n"
       << "#pragma unroll\n"
       << "        for (int e = 0; e < 4; ++e) {\n";
    for (int64_t j = 0; j < m.perTensor; ++j)
      os << "          const float r" << j << " = "
         << (m.broadcasts[j] ? "s" + std::to_string(j)
                             : "x" + std::to_string(j) + "[c][e]")
         << ";\n";
    scalarCode(l.body, "          ");
    os << "          sum += inside ? double(" << result << ") : 0.0;\n"
       << "        }\n"
       << "      }\n"
       << "      multiTensorSum<256>(sum, out0, gptcPartials, &gptcCounter, "
       << blocks << "u);\n"
       << "      return;\n"
       << "    }\n"
       << "  }\n";
  }
  // The chunks one after another.
  os << "  for (int c = 0; c < " << kReduceChunks << "; ++c) {\n"
     << "    const i64 chunk = first + c;\n"
     << "    if (chunk >= " << chunks << ")\n"
     << "      break; // the same for the whole block\n";
  const std::string ind = "  ";
  multiTensorPick(m, {}, "chunk", ind);
  multiTensorLoop(m, vec, ind);
  if (vec) {
    os << "#pragma unroll\n" << ind << "    for (int e = 0; e < 4; ++e) {\n";
    multiTensorElement(m, ind);
    scalarCode(l.body, ind + "      ");
    os << ind << "      sum += double(" << result << ");\n"
       << ind << "    }\n";
  } else {
    scalarCode(l.body, ind + "    ");
    os << ind << "    sum += double(" << result << ");\n";
  }
  os << ind << "  }\n  }\n"
     << "  multiTensorSum<256>(sum, out0, gptcPartials, &gptcCounter, "
     << blocks << "u);\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(blocks);
}

} // namespace gptc::cuda::detail
