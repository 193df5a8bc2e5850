//===- CudnnAttention.cpp - cuDNN's fused attention through dlopen --------===//

#include "CudnnAttention.h"

#if __has_include(<cudnn_graph.h>)
#define GPTC_HAVE_CUDNN_HEADERS 1
#include <cudnn_graph.h>
#endif

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

namespace gptc::rt::cudnn {

using namespace attention;

#ifndef GPTC_HAVE_CUDNN_HEADERS

int cudnnVersion() {
  throw CudnnError("gptc was built without cuDNN's headers");
}
int checkDescriptors(const AttentionGraph &) { return cudnnVersion(); }
struct AttentionPlan::Impl {};
AttentionPlan::AttentionPlan(AttentionGraph) { cudnnVersion(); }
AttentionPlan::~AttentionPlan() = default;
int64_t AttentionPlan::workspaceBytes() const { return 0; }
const std::string &AttentionPlan::engine() const {
  static const std::string none;
  return none;
}
void AttentionPlan::run(void *, const std::map<GraphRole, void *> &,
                        void *) const {}

#else

namespace {

#define GPTC_CUDNN_FUNCTIONS(X)                                                \
  X(cudnnGetVersion)                                                           \
  X(cudnnGetErrorString) X(cudnnGetLastErrorString) X(cudnnCreate)             \
      X(cudnnDestroy) X(cudnnSetStream) X(cudnnBackendCreateDescriptor)        \
          X(cudnnBackendDestroyDescriptor) X(cudnnBackendFinalize)             \
              X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute)          \
                  X(cudnnBackendExecute)

struct Api {
#define GPTC_DECLARE(fn) decltype(&::fn) fn = nullptr;
  GPTC_CUDNN_FUNCTIONS(GPTC_DECLARE)
#undef GPTC_DECLARE
  int version = 0;
};

Api loadApi() {
  std::vector<std::string> candidates;
  if (const char *path = std::getenv("GPTC_CUDNN_LIBRARY"); path && *path)
    candidates.push_back(path);
  candidates.push_back("libcudnn.so.9");
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *dir = std::getenv(var); dir && *dir)
      candidates.push_back(std::string(dir) + "/lib64/libcudnn.so.9");
  candidates.push_back("/usr/local/cuda/lib64/libcudnn.so.9");
  void *h = nullptr;
  for (const std::string &c : candidates)
    if ((h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!h)
    throw CudnnError("cuDNN not found (libcudnn.so.9; GPTC_CUDNN_LIBRARY may "
                     "name the library)");
  Api a;
#define GPTC_RESOLVE(fn)                                                       \
  if (!(a.fn = reinterpret_cast<decltype(a.fn)>(dlsym(h, #fn))))               \
    throw CudnnError("the cuDNN library has no " #fn " (cuDNN 9 needed)");
  GPTC_CUDNN_FUNCTIONS(GPTC_RESOLVE)
#undef GPTC_RESOLVE
  a.version = int(a.cudnnGetVersion());
  if (a.version < 90000)
    throw CudnnError("cuDNN " + std::to_string(a.version) +
                     " is older than 9.0");
  return a;
}

const Api &api() {
  static std::once_flag once;
  static Api a;
  static std::string error;
  std::call_once(once, [] {
    try {
      a = loadApi();
    } catch (const CudnnError &e) {
      error = e.what();
    }
  });
  if (!error.empty())
    throw CudnnError(error);
  return a;
}

void check(cudnnStatus_t s, const std::string &what) {
  if (s == CUDNN_STATUS_SUCCESS)
    return;
  const Api &a = api();
  char detail[512] = {};
  a.cudnnGetLastErrorString(detail, sizeof detail);
  throw CudnnError(what + ": " + a.cudnnGetErrorString(s) +
                   (detail[0] ? std::string(" (") + detail + ")" : ""));
}

/// One backend descriptor, destroyed with it.
class Descriptor {
public:
  Descriptor() = default;
  Descriptor(cudnnBackendDescriptorType_t type, const std::string &what)
      : what(what) {
    check(api().cudnnBackendCreateDescriptor(type, &d), "creating " + what);
  }
  Descriptor(Descriptor &&o) noexcept : d(o.d), what(std::move(o.what)) {
    o.d = nullptr;
  }
  Descriptor &operator=(Descriptor &&o) noexcept {
    std::swap(d, o.d);
    std::swap(what, o.what);
    return *this;
  }
  ~Descriptor() {
    if (d)
      api().cudnnBackendDestroyDescriptor(d);
  }

  template <typename T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const T *values) {
    check(api().cudnnBackendSetAttribute(d, name, type, count, values),
          what + ": attribute " + std::to_string(int(name)));
  }
  void set(cudnnBackendAttributeName_t name, const Descriptor &other) {
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &other.d);
  }
  void finalize() {
    check(api().cudnnBackendFinalize(d), "finalizing " + what);
  }

  cudnnBackendDescriptor_t d = nullptr;
  std::string what;
};

cudnnDataType_t dataType(GraphType t) {
  switch (t) {
  case GraphType::F32:
    return CUDNN_DATA_FLOAT;
  case GraphType::BF16:
    return CUDNN_DATA_BFLOAT16;
  case GraphType::I32:
    return CUDNN_DATA_INT32;
  case GraphType::Bool:
    return CUDNN_DATA_BOOLEAN;
  }
  return CUDNN_DATA_FLOAT;
}

cudnnPointwiseMode_t pointwiseMode(PointwiseMode m) {
  switch (m) {
  case PointwiseMode::Add:
    return CUDNN_POINTWISE_ADD;
  case PointwiseMode::Sub:
    return CUDNN_POINTWISE_SUB;
  case PointwiseMode::Mul:
    return CUDNN_POINTWISE_MUL;
  case PointwiseMode::Div:
    return CUDNN_POINTWISE_DIV;
  case PointwiseMode::Exp:
    return CUDNN_POINTWISE_EXP;
  case PointwiseMode::Log:
    return CUDNN_POINTWISE_LOG;
  case PointwiseMode::Identity:
    return CUDNN_POINTWISE_IDENTITY;
  case PointwiseMode::GenIndex:
    return CUDNN_POINTWISE_GEN_INDEX;
  case PointwiseMode::CmpGe:
    return CUDNN_POINTWISE_CMP_GE;
  case PointwiseMode::BinarySelect:
    return CUDNN_POINTWISE_BINARY_SELECT;
  }
  return CUDNN_POINTWISE_IDENTITY;
}

/// A graph's descriptors: tensors by uid, then each op's own descriptor
/// (pointwise, matmul, reduction) and its operation.
struct Built {
  std::vector<Descriptor> tensors, parts, operations;
  Descriptor graph;
};

void buildOperations(const AttentionGraph &g, Built &b) {
  b.tensors.resize(g.tensors.size());
  for (const GraphTensor &t : g.tensors) {
    Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor '" + t.name + "'");
    const cudnnDataType_t type = dataType(t.type);
    const int64_t alignment = 16;
    const bool isVirtual = t.isVirtual, byValue = t.byValue;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data());
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data());
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid);
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &isVirtual);
    if (byValue)
      d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byValue);
    d.finalize();
    b.tensors[size_t(t.uid - 1)] = std::move(d);
  }
  auto tensor = [&](int64_t uid) -> const Descriptor & {
    return b.tensors.at(size_t(uid - 1));
  };
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  for (const GraphOp &op : g.ops) {
    const std::string what = "operation '" + op.name + "'";
    switch (op.kind) {
    case GraphOp::Kind::Matmul: {
      Descriptor m(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul of " + what);
      m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
      m.finalize();
      Descriptor o(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
      o.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensor(op.inputs.at(0)));
      o.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensor(op.inputs.at(1)));
      o.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensor(op.output));
      o.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, m);
      o.finalize();
      b.parts.push_back(std::move(m));
      b.operations.push_back(std::move(o));
      break;
    }
    case GraphOp::Kind::Pointwise: {
      Descriptor p(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise of " + what);
      const cudnnPointwiseMode_t mode = pointwiseMode(op.pointwise);
      const cudnnDataType_t precision = dataType(op.compute);
      p.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
      p.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
            &precision);
      if (op.pointwise == PointwiseMode::GenIndex) {
        const int64_t axis = op.axis;
        p.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
      }
      p.finalize();
      Descriptor o(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
      o.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p);
      o.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensor(op.inputs.at(0)));
      if (op.inputs.size() > 1)
        o.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensor(op.inputs[1]));
      if (op.inputs.size() > 2)
        o.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensor(op.inputs[2]));
      o.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensor(op.output));
      const float one = 1.0f;
      o.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
      o.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
      o.finalize();
      b.parts.push_back(std::move(p));
      b.operations.push_back(std::move(o));
      break;
    }
    case GraphOp::Kind::Reduction: {
      Descriptor r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction of " + what);
      const cudnnReduceTensorOp_t mode = op.reduction == ReductionMode::Max
                                             ? CUDNN_REDUCE_TENSOR_MAX
                                             : CUDNN_REDUCE_TENSOR_ADD;
      r.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
      r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
            1, &mode);
      r.finalize();
      Descriptor o(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
      o.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensor(op.inputs.at(0)));
      o.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensor(op.output));
      o.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
      o.finalize();
      b.parts.push_back(std::move(r));
      b.operations.push_back(std::move(o));
      break;
    }
    case GraphOp::Kind::Reshape: {
      Descriptor o(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
      o.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensor(op.inputs.at(0)));
      o.set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensor(op.output));
      o.finalize();
      b.operations.push_back(std::move(o));
      break;
    }
    }
  }
}

// The handle attribute, deprecated from cuDNN 9.8 on (it may be left
// unset there) and still taken: by value, so no deprecation warning.
constexpr auto kOperationGraphHandle = cudnnBackendAttributeName_t(800);

/// The operation graph over b's operations; `handle` may be null on 9.8+.
void buildGraph(Built &b, cudnnHandle_t handle) {
  b.graph = Descriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                       "the operation graph");
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Descriptor &o : b.operations)
    ops.push_back(o.d);
  b.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
              int64_t(ops.size()), ops.data());
  if (handle)
    b.graph.set(kOperationGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle);
  b.graph.finalize();
}

} // namespace

int cudnnVersion() { return api().version; }

int checkDescriptors(const AttentionGraph &g) {
  Built b;
  buildOperations(g, b);
  if (api().version >= 90800)
    buildGraph(b, nullptr);
  return int(b.operations.size());
}

struct AttentionPlan::Impl {
  AttentionGraph graph;
  cudnnHandle_t handle = nullptr;
  Built built;
  /// The heuristics and their engine configurations, kept while the plan
  /// that names one lives (as cudnn-frontend keeps them).
  Descriptor heuristics;
  std::vector<Descriptor> configs;
  Descriptor plan;
  int64_t cudnnWorkspace = 0; // rounded up to 256 bytes
  std::string engine;
  /// The by-value scalars' values, where the variant pack points.
  std::vector<std::pair<int64_t, float>> scalars;

  ~Impl() {
    plan = Descriptor();
    configs.clear();
    heuristics = Descriptor();
    built = Built();
    if (handle)
      api().cudnnDestroy(handle);
  }
};

AttentionPlan::AttentionPlan(AttentionGraph graph) : impl(new Impl) {
  const Api &a = api();
  Impl &p = *impl;
  p.graph = std::move(graph);
  check(a.cudnnCreate(&p.handle), "cudnnCreate");
  buildOperations(p.graph, p.built);
  buildGraph(p.built, p.handle);

  Descriptor &heuristics = p.heuristics =
      Descriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "the heuristics");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, p.built.graph);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heuristics.finalize();
  int64_t count = 0;
  check(a.cudnnBackendGetAttribute(heuristics.d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                   nullptr),
        "the heuristics' result count");
  if (count == 0)
    throw CudnnError("cuDNN's heuristics have no engine for the graph");
  std::vector<Descriptor> &configs = p.configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                         "engine configuration " + std::to_string(i));
    raw.push_back(configs.back().d);
  }
  check(a.cudnnBackendGetAttribute(heuristics.d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                   raw.data()),
        "the heuristics' results");
  std::string refusals;
  for (int64_t i = 0; i < count && !p.plan.d; ++i) {
    try {
      Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                      "execution plan " + std::to_string(i));
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
               &p.handle);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[size_t(i)]);
      plan.finalize();
      int64_t bytes = 0, got = 0;
      check(a.cudnnBackendGetAttribute(plan.d,
                                       CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, &got, &bytes),
            "the plan's workspace size");
      p.cudnnWorkspace = (bytes + 255) / 256 * 256;
      p.plan = std::move(plan);
      p.engine = "configuration " + std::to_string(i + 1) + " of " +
                 std::to_string(count);
    } catch (const CudnnError &e) {
      refusals += std::string(refusals.empty() ? "" : "; ") + e.what();
    }
  }
  if (!p.plan.d)
    throw CudnnError("no engine configuration of " + std::to_string(count) +
                     " finalizes: " + refusals);
  for (const GraphTensor &t : p.graph.tensors)
    if (t.byValue)
      // cuDNN before 9.10 masks with the least float, not -inf
      // (cudnn-frontend's get_negative_inf_value).
      p.scalars.push_back({t.uid, std::isinf(t.value) && a.version < 91000
                                      ? std::numeric_limits<float>::lowest()
                                      : t.value});
}

AttentionPlan::~AttentionPlan() = default;

int64_t AttentionPlan::workspaceBytes() const {
  return impl->cudnnWorkspace + impl->graph.workspaceBytes;
}

const std::string &AttentionPlan::engine() const { return impl->engine; }

void AttentionPlan::run(void *stream,
                        const std::map<GraphRole, void *> &operands,
                        void *workspace) const {
  const Api &a = api();
  Impl &p = *impl;
  std::vector<int64_t> uids;
  std::vector<void *> pointers;
  for (auto [role, uid] : p.graph.roles) {
    void *at = nullptr;
    if (auto w = p.graph.workspaceOffset.find(role);
        w != p.graph.workspaceOffset.end())
      at = static_cast<char *>(workspace) + p.cudnnWorkspace + w->second;
    else if (auto o = operands.find(role); o != operands.end())
      at = o->second;
    else
      throw CudnnError(std::string("no memory bound to ") +
                       graphRoleName(role));
    uids.push_back(uid);
    pointers.push_back(at);
  }
  for (auto &[uid, value] : p.scalars) {
    uids.push_back(uid);
    pointers.push_back(&value);
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "the variant pack");
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
           int64_t(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           int64_t(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
           &workspace);
  pack.finalize();
  check(a.cudnnSetStream(p.handle, static_cast<cudaStream_t>(stream)),
        "cudnnSetStream");
  check(a.cudnnBackendExecute(p.handle, p.plan.d, pack.d),
        "cudnnBackendExecute");
}

#endif // GPTC_HAVE_CUDNN_HEADERS

} // namespace gptc::rt::cudnn
