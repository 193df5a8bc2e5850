//===- FakeCudnn.cpp - a host-memory libcudnn.so.9 for the backend's tests
//-===//
//
// The cuDNN entry points lib/Runtime/CudnnAttention.cpp calls, over the
// fake driver (FakeCuda.cpp), whose device pointers are host memory:
// - descriptors keep the attributes set on them, and finalizing one checks
//   that what cuDNN requires of its type is there;
// - the heuristics offer one engine configuration, whose plan asks for
//   kWorkspaceBytes of workspace;
// - a run rebuilds the AttentionGraph from the plan's descriptors and the
//   variant pack, and runs it (AttentionGraphInterpreter.h) in stream order
//   through the fake driver's gptcFakeSubmitHost, captured into a CUDA
//   graph where one is being captured. It first writes over its own
//   workspace, so that gptc's parts must lie after it.
// So a test of the CUDA backend sees real attention results where the
// backend hands "cuDNN" a launch: its operands, layouts and workspace as
// the backend binds them.
//
//===----------------------------------------------------------------------===//

#include "AttentionGraph.h"
#include "AttentionGraphInterpreter.h"

#include <cuda.h>
#include <cudnn_graph.h>
#include <dlfcn.h>

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace gptc::rt::attention;

namespace {

constexpr int64_t kWorkspaceBytes = 1024;

struct Desc {
  cudnnBackendDescriptorType_t type;
  std::map<int, std::vector<uint8_t>> values; // raw, by attribute name
  std::map<int, std::vector<Desc *>> descs;   // descriptor attributes
  bool finalized = false;
  Desc *graph = nullptr; // an engine configuration's operation graph
};

std::string lastError;
cudaStream_t currentStream = nullptr;
int runs = 0;
std::string runError; // the first run that went wrong

cudnnStatus_t refuse(const std::string &why) {
  lastError = why;
  return CUDNN_STATUS_BAD_PARAM;
}

size_t elementBytes(cudnnBackendAttributeType_t t) {
  switch (t) {
  case CUDNN_TYPE_INT64:
  case CUDNN_TYPE_DOUBLE:
  case CUDNN_TYPE_VOID_PTR:
  case CUDNN_TYPE_HANDLE:
    return 8;
  case CUDNN_TYPE_BOOLEAN:
    return sizeof(bool);
  default:
    return 4; // float and the enums
  }
}

template <typename T> T value(const Desc *d, int name, T otherwise = T()) {
  auto it = d->values.find(name);
  if (it == d->values.end() || it->second.size() < sizeof(T))
    return otherwise;
  T v;
  std::memcpy(&v, it->second.data(), sizeof(T));
  return v;
}

std::vector<int64_t> int64s(const Desc *d, int name) {
  auto it = d->values.find(name);
  std::vector<int64_t> v;
  if (it != d->values.end()) {
    v.resize(it->second.size() / 8);
    std::memcpy(v.data(), it->second.data(), v.size() * 8);
  }
  return v;
}

Desc *one(const Desc *d, int name) {
  auto it = d->descs.find(name);
  return it == d->descs.end() || it->second.empty() ? nullptr
                                                    : it->second.front();
}

/// What finalizing a descriptor of this type requires, by attribute.
std::vector<int> required(cudnnBackendDescriptorType_t t) {
  switch (t) {
  case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
    return {CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_ATTR_TENSOR_DIMENSIONS,
            CUDNN_ATTR_TENSOR_STRIDES, CUDNN_ATTR_TENSOR_UNIQUE_ID,
            CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT};
  case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
    return {CUDNN_ATTR_POINTWISE_MODE, CUDNN_ATTR_POINTWISE_MATH_PREC};
  case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    return {CUDNN_ATTR_MATMUL_COMP_TYPE};
  case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
    return {CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_ATTR_REDUCTION_COMP_TYPE};
  case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    return {
        CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
        CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC};
  case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    return {CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
            CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
            CUDNN_ATTR_OPERATION_POINTWISE_YDESC};
  case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    return {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
            CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
            CUDNN_ATTR_OPERATION_REDUCTION_DESC};
  case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
    return {CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
            CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
  case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
    return {CUDNN_ATTR_OPERATIONGRAPH_OPS};
  case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    return {CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_ATTR_ENGINEHEUR_MODE};
  case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    return {CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
            CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG};
  case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
    return {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
            CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
            CUDNN_ATTR_VARIANT_PACK_WORKSPACE};
  default:
    return {};
  }
}

GraphType graphType(cudnnDataType_t t) {
  switch (t) {
  case CUDNN_DATA_BFLOAT16:
    return GraphType::BF16;
  case CUDNN_DATA_INT32:
    return GraphType::I32;
  case CUDNN_DATA_BOOLEAN:
    return GraphType::Bool;
  default:
    return GraphType::F32;
  }
}

PointwiseMode pointwiseMode(cudnnPointwiseMode_t m) {
  switch (m) {
  case CUDNN_POINTWISE_ADD:
    return PointwiseMode::Add;
  case CUDNN_POINTWISE_SUB:
    return PointwiseMode::Sub;
  case CUDNN_POINTWISE_MUL:
    return PointwiseMode::Mul;
  case CUDNN_POINTWISE_DIV:
    return PointwiseMode::Div;
  case CUDNN_POINTWISE_EXP:
    return PointwiseMode::Exp;
  case CUDNN_POINTWISE_LOG:
    return PointwiseMode::Log;
  case CUDNN_POINTWISE_GEN_INDEX:
    return PointwiseMode::GenIndex;
  case CUDNN_POINTWISE_CMP_GE:
    return PointwiseMode::CmpGe;
  case CUDNN_POINTWISE_BINARY_SELECT:
    return PointwiseMode::BinarySelect;
  default:
    return PointwiseMode::Identity;
  }
}

/// One run: the graph the plan's descriptors describe, and what the
/// variant pack binds. Kept for as long as the process lives: a captured
/// CUDA graph runs it again at every launch.
struct Run {
  AttentionGraph graph;
  std::map<int64_t, void *> bound;
  void *workspace = nullptr;
};
std::deque<Run> kept;

void runOnHost(void *data) {
  Run &r = *static_cast<Run *>(data);
  std::memset(r.workspace, 0xff, kWorkspaceBytes); // cuDNN's own part
  testing::Interpreter in(r.graph);
  for (auto [uid, at] : r.bound)
    in.bindTyped(uid, at);
  std::string wrong = in.run();
  if (!wrong.empty() && runError.empty())
    runError = wrong;
  ++runs;
}

/// The graph of a plan, from its descriptors; "" or why not.
std::string rebuild(const Desc *plan, const Desc *pack, Run &r) {
  const Desc *config = one(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
  if (!config || !config->graph)
    return "the plan has no engine configuration from the heuristics";
  std::map<const Desc *, int64_t> tensors;
  auto tensor = [&](const Desc *op, int name) -> int64_t {
    const Desc *t = one(op, name);
    if (!t)
      return 0;
    const int64_t uid = value<int64_t>(t, CUDNN_ATTR_TENSOR_UNIQUE_ID);
    if (tensors.emplace(t, uid).second) {
      GraphTensor g;
      g.uid = uid;
      g.type =
          graphType(value<cudnnDataType_t>(t, CUDNN_ATTR_TENSOR_DATA_TYPE));
      const auto dims = int64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS),
                 strides = int64s(t, CUDNN_ATTR_TENSOR_STRIDES);
      for (size_t d = 0; d < 4 && d < dims.size() && d < strides.size(); ++d) {
        g.dims[d] = dims[d];
        g.strides[d] = strides[d];
      }
      g.isVirtual = value<bool>(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
      g.byValue = value<bool>(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
      if (size_t(uid) > r.graph.tensors.size())
        r.graph.tensors.resize(size_t(uid));
      r.graph.tensors[size_t(uid - 1)] = g;
    }
    return uid;
  };
  auto ops = config->graph->descs.find(CUDNN_ATTR_OPERATIONGRAPH_OPS);
  if (ops == config->graph->descs.end())
    return "the operation graph has no operations";
  for (const Desc *d : ops->second) {
    GraphOp op;
    switch (d->type) {
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
      op.kind = GraphOp::Kind::Matmul;
      op.inputs = {tensor(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC),
                   tensor(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC)};
      op.output = tensor(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
      op.name = "matmul";
      break;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
      const Desc *pw = one(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
      op.kind = GraphOp::Kind::Pointwise;
      op.pointwise = pointwiseMode(
          value<cudnnPointwiseMode_t>(pw, CUDNN_ATTR_POINTWISE_MODE));
      op.axis = int(value<int64_t>(pw, CUDNN_ATTR_POINTWISE_AXIS, -1));
      for (int name : {CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                       CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                       CUDNN_ATTR_OPERATION_POINTWISE_TDESC})
        if (one(d, name))
          op.inputs.push_back(tensor(d, name));
      op.output = tensor(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
      op.name = "pointwise";
      break;
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
      const Desc *red = one(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
      op.kind = GraphOp::Kind::Reduction;
      op.reduction =
          value<cudnnReduceTensorOp_t>(red, CUDNN_ATTR_REDUCTION_OPERATOR) ==
                  CUDNN_REDUCE_TENSOR_MAX
              ? ReductionMode::Max
              : ReductionMode::Add;
      op.inputs = {tensor(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC)};
      op.output = tensor(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
      op.name = "reduction";
      break;
    }
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
      op.kind = GraphOp::Kind::Reshape;
      op.inputs = {tensor(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC)};
      op.output = tensor(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
      op.name = "reshape";
      break;
    default:
      return "an operation of descriptor type " + std::to_string(d->type);
    }
    r.graph.ops.push_back(op);
  }
  const auto uids = int64s(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const auto pointers = int64s(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  for (size_t i = 0; i < uids.size() && i < pointers.size(); ++i) {
    if (uids[i] < 1 || size_t(uids[i]) > r.graph.tensors.size())
      return "the variant pack binds unknown tensor " + std::to_string(uids[i]);
    GraphTensor &t = r.graph.tensors[size_t(uids[i] - 1)];
    void *at = reinterpret_cast<void *>(pointers[i]);
    if (t.byValue)
      std::memcpy(&t.value, at, 4);
    else
      r.bound[t.uid] = at;
  }
  for (const GraphTensor &t : r.graph.tensors)
    if (t.uid != 0 && !t.isVirtual && !t.byValue && !r.bound.count(t.uid))
      return "the variant pack binds no memory to tensor " +
             std::to_string(t.uid);
  r.workspace = reinterpret_cast<void *>(
      value<int64_t>(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE));
  if (!r.workspace)
    return "no workspace";
  // Nothing bound may lie in the part of the workspace cuDNN keeps.
  const auto *ws = static_cast<const char *>(r.workspace);
  for (auto [uid, at] : r.bound)
    if (static_cast<const char *>(at) >= ws &&
        static_cast<const char *>(at) < ws + kWorkspaceBytes)
      return "tensor " + std::to_string(uid) +
             " is bound inside cuDNN's own workspace";
  return "";
}

} // namespace

extern "C" {

// Test hooks.
/// Runs of a plan so far, and the first one whose graph did not run.
int gptcFakeCudnnRuns() { return runs; }
const char *gptcFakeCudnnRunError() { return runError.c_str(); }

size_t cudnnGetVersion() { return 91900; }
const char *cudnnGetErrorString(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS"
                                   : "CUDNN_STATUS_BAD_PARAM";
}
void cudnnGetLastErrorString(char *message, size_t max) {
  if (max > 0) {
    std::strncpy(message, lastError.c_str(), max - 1);
    message[max - 1] = 0;
  }
}
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
  static int context;
  *handle = reinterpret_cast<cudnnHandle_t>(&context);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t stream) {
  currentStream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t *d) {
  *d = new Desc{type};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  delete static_cast<Desc *>(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type,
                                       int64_t count, const void *values) {
  Desc *desc = static_cast<Desc *>(d);
  if (desc->finalized)
    return refuse("an attribute set on a finalized descriptor");
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    auto *ds = static_cast<Desc *const *>(values);
    desc->descs[name].assign(ds, ds + count);
    for (Desc *other : desc->descs[name])
      if (!other || !other->finalized)
        return refuse("attribute " + std::to_string(name) +
                      " names a descriptor not finalized");
    return CUDNN_STATUS_SUCCESS;
  }
  const auto *bytes = static_cast<const uint8_t *>(values);
  desc->values[name].assign(bytes, bytes + count * elementBytes(type));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
  Desc *desc = static_cast<Desc *>(d);
  for (int name : required(desc->type))
    if (!desc->values.count(name) && !desc->descs.count(name))
      return refuse("descriptor type " + std::to_string(desc->type) +
                    " finalized without attribute " + std::to_string(name));
  desc->finalized = true;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t,
                                       int64_t requested, int64_t *count,
                                       void *values) {
  Desc *desc = static_cast<Desc *>(d);
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    *count = 1;
    if (requested >= 1 && values) {
      Desc *config = *static_cast<Desc **>(values);
      config->graph = one(desc, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
      config->finalized = true;
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
    *count = 1;
    *static_cast<int64_t *>(values) = kWorkspaceBytes;
    return CUDNN_STATUS_SUCCESS;
  }
  return refuse("the fake cannot get attribute " + std::to_string(name));
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t pack) {
  static auto submitHost =
      reinterpret_cast<void (*)(void (*)(void *), void *, CUstream)>(
          dlsym(RTLD_DEFAULT, "gptcFakeSubmitHost"));
  if (!submitHost)
    return refuse("the fake driver is not loaded");
  Run &r = kept.emplace_back();
  if (std::string why =
          rebuild(static_cast<Desc *>(plan), static_cast<Desc *>(pack), r);
      !why.empty())
    return refuse(why);
  submitHost(runOnHost, &r, reinterpret_cast<CUstream>(currentStream));
  // Timing sees a run take what gptcFakeKernelMs set for "cudnn".
  static auto launched = reinterpret_cast<void (*)(const char *)>(
      dlsym(RTLD_DEFAULT, "gptcFakeLaunched"));
  if (launched)
    launched("cudnn");
  return CUDNN_STATUS_SUCCESS;
}

} // extern "C"
