//===- Arguments.cpp - parameters from checkpoints, batches from data -----===//

#include "gptc/Executor/Arguments.h"

#include "gptc/Formats/Error.h"
#include "gptc/Formats/LlmcModel.h"

#include <set>
#include <string_view>

namespace gptc::exec {

namespace {
// Buffers and the tied head that Hugging Face checkpoints carry beside the
// parameters; they hold nothing gptc needs.
bool isIgnoredCheckpointTensor(std::string_view name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
         name == "lm_head.weight";
}
} // namespace

int64_t parameterCount(const std::vector<ArgumentInfo> &args) {
  int64_t n = 0;
  for (const ArgumentInfo &a : args)
    if (a.kind == ArgumentInfo::Kind::Param)
      n += numElements(a.shape);
  return n;
}

std::map<std::string, HostTensor>
loadParameters(const std::vector<ArgumentInfo> &args,
               const SafetensorsFile &file) {
  const std::string &path = file.path();
  std::map<std::string, HostTensor> params;
  std::set<std::string> used;
  for (const ArgumentInfo &a : args) {
    if (a.kind != ArgumentInfo::Kind::Param)
      continue;
    const TensorInfo *t = file.find(a.name);
    if (!t)
      t = file.find("transformer." + a.name);
    if (!t)
      throw FormatError(path + ": missing tensor '" + a.name + "'");
    if (t->dtype != DType::F32 && t->dtype != DType::F16 &&
        t->dtype != DType::BF16)
      throw FormatError(path + ": tensor '" + t->name + "' has dtype " +
                        dtypeName(t->dtype) + ", expected F32, F16 or BF16");
    if (t->shape != a.shape)
      throw FormatError(path + ": tensor '" + t->name + "' has shape " +
                        shapeString(t->shape) + ", expected " +
                        shapeString(a.shape));
    HostTensor h;
    h.shape = a.shape;
    h.f32 = file.toFloat(*t);
    params.emplace(a.name, std::move(h));
    used.insert(t->name);
  }
  for (const TensorInfo &t : file.tensors())
    if (!used.count(t.name) && !isIgnoredCheckpointTensor(t.name))
      throw FormatError(path + ": unexpected tensor '" + t.name +
                        "' (not a parameter of this model)");
  return params;
}

std::map<std::string, HostTensor>
loadParametersFromFile(const std::vector<ArgumentInfo> &args,
                       const std::string &path) {
  if (!isLlmcModelFile(path))
    return loadParameters(args, SafetensorsFile::open(path));
  LlmcModel model = readLlmcModel(path);
  std::map<std::string, HostTensor> params;
  for (const ArgumentInfo &a : args) {
    if (a.kind != ArgumentInfo::Kind::Param)
      continue;
    auto it = model.tensors.find(a.name);
    if (it == model.tensors.end())
      throw FormatError(path + ": missing tensor '" + a.name +
                        "' (the llm.c header says " +
                        std::to_string(model.numLayers) + " layers)");
    if (it->second.shape != a.shape)
      throw FormatError(path + ": tensor '" + a.name + "' has shape " +
                        shapeString(it->second.shape) + ", expected " +
                        shapeString(a.shape));
    HostTensor h;
    h.shape = a.shape;
    h.f32 = std::move(it->second.data);
    params.emplace(a.name, std::move(h));
    model.tensors.erase(it);
  }
  if (!model.tensors.empty())
    throw FormatError(path + ": unexpected tensor '" +
                      model.tensors.begin()->first +
                      "' (not a parameter of this model)");
  return params;
}

Batch batchAt(const std::vector<uint16_t> &tokens, size_t start, int64_t B,
              int64_t T, int64_t vocab, const std::string &source) {
  size_t need = size_t(B * T + 1);
  if (start + need > tokens.size())
    throw FormatError(source + ": holds " + std::to_string(tokens.size()) +
                      " tokens, fewer than one batch of B*T+1 = " +
                      std::to_string(need) + " needs");
  Batch batch{HostTensor::ids({B, T}), HostTensor::ids({B, T})};
  for (size_t i = 0; i < need; ++i) {
    uint16_t id = tokens[start + i];
    if (id >= vocab)
      throw FormatError(source + ": token id " + std::to_string(id) +
                        " at index " + std::to_string(start + i) +
                        " is outside the vocabulary of " +
                        std::to_string(vocab));
    if (i + 1 < need)
      batch.tokens.i32[i] = id;
    if (i > 0)
      batch.targets.i32[i - 1] = id;
  }
  return batch;
}

std::vector<HostTensor>
bindArguments(const std::vector<ArgumentInfo> &args,
              const std::map<std::string, HostTensor> &params,
              const Batch &batch) {
  std::vector<HostTensor> out;
  for (const ArgumentInfo &a : args) {
    switch (a.kind) {
    case ArgumentInfo::Kind::Param:
      out.push_back(params.at(a.name));
      break;
    case ArgumentInfo::Kind::ParamCopy:
      out.push_back(paramCopy(params.at(a.name), a.shape, a.storage));
      break;
    case ArgumentInfo::Kind::Tokens:
      out.push_back(batch.tokens);
      break;
    case ArgumentInfo::Kind::Targets:
      out.push_back(batch.targets);
      break;
    }
  }
  return out;
}

} // namespace gptc::exec
