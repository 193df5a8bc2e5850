//===- ProgramFile.cpp - the binary form of a kernel-level Program --------===//
//
// Layout: the 8 bytes "GPTCPROG", a little-endian uint32 version, then the
// Program as CBOR (nlohmann::json): one object with the fields below, byte
// blobs (constants' data, cubins) as CBOR byte strings. Enums are stored as
// their integer values; readProgram checks every field's presence, type and
// range, so a damaged file is one FormatError line, never a crash later.
//
//===----------------------------------------------------------------------===//

#include "gptc/Formats/Error.h"
#include "gptc/Runtime/Program.h"

#include <nlohmann/json.hpp>

#include <cstring>

using json = nlohmann::json;

namespace gptc::rt {

namespace {

constexpr char kMagic[8] = {'G', 'P', 'T', 'C', 'P', 'R', 'O', 'G'};
/// 2: the GradSum role and the stash_grads / accumulate_grads functions
/// (gradient accumulation on the device). A version 1 program has neither.
/// 3: gemm_fallback_column_partials_* takes `pre` (GELU's derivative in the
/// bias gradient's pass, Program.h), and the runtime runs it by default.
/// 4: each kernel's scratch_bytes (DeviceKernel::scratchBytes).
/// 5: attention_row_dot launches, whose result the attention gradients
/// read as their last input (their kernels no longer read out).
/// 6: each launch's `variant` label and `variants` (other kernels for it,
/// timed at load: Launch::variants).
/// 7: each launch's `stream` and `join` (planStreams: a weight gradient's
/// GEMM on the side stream).
/// 8: the ParamCopy role (gpt-weight-copies).
/// 9: no GradSum role; gradient accumulation is the grads_accumulate
/// function (stash_grads and accumulate_grads are gone).
/// 10: attention_bias_grad launches (c_attn's bias gradient in one, where
/// a reduce_sum, a GEMM and a concat were).
/// 11: sort_ids launches, and embedding_grad reading their keys
/// (`position_bits`: the sorted form, SortEmbeddingIds.cpp).
/// 12: each launch's and variant's `cluster` (blocks a cluster: the loss
/// gradient's cluster forms).
constexpr uint32_t kVersion = 12;

json kernelChoiceToJson(const LaunchVariant &v) {
  return {{"label", v.label},
          {"device_kernel", v.deviceKernel},
          {"grid", {v.grid[0], v.grid[1], v.grid[2]}},
          {"block", {v.block[0], v.block[1], v.block[2]}},
          {"shared_bytes", v.sharedBytes},
          {"cluster", v.cluster}};
}

json bodyToJson(const exec::ScalarProgram &b) {
  json code = json::array();
  for (const exec::Instruction &in : b.code)
    code.push_back({int(in.op), in.dst, in.a, in.b, in.value});
  return {{"num_args", b.numArgs},
          {"num_registers", b.numRegisters},
          {"code", code},
          {"results", b.results}};
}

json launchToJson(const Launch &l) {
  json variants = json::array();
  for (const LaunchVariant &v : l.variants)
    variants.push_back(kernelChoiceToJson(v));
  return {{"kernel", l.kernel},
          {"inputs", l.inputs},
          {"outputs", l.outputs},
          {"ints", l.ints},
          {"floats", l.floats},
          {"lists", l.lists},
          {"float_lists", l.floatLists},
          {"body", bodyToJson(l.body)},
          {"loc", l.loc},
          {"device_kernel", l.deviceKernel},
          {"grid", {l.grid[0], l.grid[1], l.grid[2]}},
          {"block", {l.block[0], l.block[1], l.block[2]}},
          {"shared_bytes", l.sharedBytes},
          {"cluster", l.cluster},
          {"variant", l.variant},
          {"variants", variants},
          {"stream", l.stream},
          {"join", l.join}};
}

/// Reads fields of one object, naming the path of what is wrong.
class Reader {
public:
  explicit Reader(const std::string &source) : source(source) {}

  [[noreturn]] void fail(const std::string &what) const {
    throw FormatError(source + ": " + what);
  }

  const json &field(const json &obj, const char *key,
                    const std::string &path) const {
    if (!obj.is_object())
      fail("'" + path + "' is not an object");
    auto it = obj.find(key);
    if (it == obj.end())
      fail("missing field '" + path + "." + key + "'");
    return *it;
  }

  template <typename T>
  T get(const json &obj, const char *key, const std::string &path) const {
    const json &v = field(obj, key, path);
    try {
      return v.get<T>();
    } catch (const json::exception &) {
      fail("field '" + path + "." + key + "' has the wrong type");
    }
  }

  std::vector<uint8_t> bytes(const json &obj, const char *key,
                             const std::string &path) const {
    const json &v = field(obj, key, path);
    if (!v.is_binary())
      fail("field '" + path + "." + key + "' is not a byte string");
    return v.get_binary();
  }

  template <typename E>
  E enumOf(const json &obj, const char *key, const std::string &path,
           int count) const {
    int v = get<int>(obj, key, path);
    if (v < 0 || v >= count)
      fail("field '" + path + "." + key + "' is out of range (" +
           std::to_string(v) + ")");
    return E(v);
  }

private:
  const std::string &source;
};

exec::ScalarProgram bodyFromJson(const Reader &r, const json &j,
                                 const std::string &path) {
  exec::ScalarProgram b;
  b.numArgs = r.get<int>(j, "num_args", path);
  b.numRegisters = r.get<int>(j, "num_registers", path);
  if (b.numArgs < 0 || b.numArgs > b.numRegisters)
    r.fail("field '" + path + ".num_args' is out of range");
  const json &code = r.field(j, "code", path);
  if (!code.is_array())
    r.fail("field '" + path + ".code' is not an array");
  for (size_t i = 0; i < code.size(); ++i) {
    const json &in = code[i];
    std::string where = path + ".code[" + std::to_string(i) + "]";
    if (!in.is_array() || in.size() != 5 || !in[0].is_number_integer() ||
        !in[1].is_number_integer() || !in[2].is_number_integer() ||
        !in[3].is_number_integer() || !in[4].is_number())
      r.fail("'" + where + "' is not [op, dst, a, b, value]");
    int op = in[0].get<int>();
    if (op < 0 || op > int(exec::Opcode::Const))
      r.fail("'" + where + "' has an unknown opcode " + std::to_string(op));
    exec::Instruction ins{exec::Opcode(op), in[1].get<int>(), in[2].get<int>(),
                          in[3].get<int>(), in[4].get<float>()};
    for (int reg : {ins.dst, ins.a, ins.b})
      if (reg < 0 || reg >= b.numRegisters)
        r.fail("'" + where + "' names register " + std::to_string(reg) +
               " of " + std::to_string(b.numRegisters));
    b.code.push_back(ins);
  }
  b.results = r.get<std::vector<int>>(j, "results", path);
  for (int reg : b.results)
    if (reg < 0 || reg >= b.numRegisters)
      r.fail("field '" + path + ".results' names register " +
             std::to_string(reg) + " of " + std::to_string(b.numRegisters));
  return b;
}

} // namespace

std::vector<uint8_t> writeProgram(const Program &p) {
  json params = json::array();
  for (const train::ParamSpec &s : p.params)
    params.push_back({{"name", s.name},
                      {"shape", s.shape},
                      {"init", int(s.init)},
                      {"std", s.std}});
  json buffers = json::array();
  for (const Buffer &b : p.buffers)
    buffers.push_back({{"name", b.name},
                       {"dtype", int(b.dtype)},
                       {"shape", b.shape},
                       {"role", int(b.role)},
                       {"binding", b.binding},
                       {"view_of", b.viewOf},
                       {"offset", b.offset},
                       {"init", json::binary(b.init)}});
  json functions = json::array();
  for (const Function &f : p.functions) {
    json launches = json::array();
    for (const Launch &l : f.launches)
      launches.push_back(launchToJson(l));
    functions.push_back({{"name", f.name},
                         {"launches", launches},
                         {"arguments", f.arguments},
                         {"results", f.results},
                         {"norm_launches", f.normLaunches}});
  }
  json kernels = json::array();
  for (const DeviceKernel &k : p.kernels)
    kernels.push_back({{"name", k.name},
                       {"source", k.source},
                       {"fuses", k.fuses},
                       {"arch", k.arch},
                       {"scratch_bytes", k.scratchBytes},
                       {"cubin", json::binary(k.cubin)}});
  json doc = {{"meta", p.meta},         {"params", params},
              {"buffers", buffers},     {"functions", functions},
              {"kernels", kernels},     {"arena_bytes", p.arenaBytes}};

  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  for (int i = 0; i < 4; ++i)
    out.push_back(uint8_t(kVersion >> (8 * i)));
  json::to_cbor(doc, out);
  return out;
}

Program readProgram(const uint8_t *data, size_t size,
                    const std::string &source) {
  Reader r(source);
  if (size < sizeof(kMagic) || std::memcmp(data, kMagic, sizeof(kMagic)))
    r.fail("not a gptc program (bad magic)");
  if (size < sizeof(kMagic) + 4)
    r.fail("truncated gptc program (no version)");
  uint32_t version = 0;
  for (int i = 0; i < 4; ++i)
    version |= uint32_t(data[sizeof(kMagic) + i]) << (8 * i);
  if (version != kVersion)
    r.fail("gptc program version " + std::to_string(version) +
           ", this build reads version " + std::to_string(kVersion) +
           (version < kVersion ? " (recompile it with this gptc)" : ""));
  json doc;
  try {
    doc = json::from_cbor(data + sizeof(kMagic) + 4,
                          data + size); // strict: no trailing bytes
  } catch (const json::exception &e) {
    r.fail(std::string("truncated or corrupt gptc program (") + e.what() +
           ")");
  }

  Program p;
  p.meta = r.get<std::map<std::string, std::string>>(doc, "meta", "program");
  const json &params = r.field(doc, "params", "program");
  if (!params.is_array())
    r.fail("field 'program.params' is not an array");
  for (size_t i = 0; i < params.size(); ++i) {
    std::string path = "params[" + std::to_string(i) + "]";
    train::ParamSpec s;
    s.name = r.get<std::string>(params[i], "name", path);
    s.shape = r.get<std::vector<int64_t>>(params[i], "shape", path);
    s.init = r.enumOf<train::ParamSpec::Init>(params[i], "init", path, 3);
    s.std = r.get<double>(params[i], "std", path);
    p.params.push_back(std::move(s));
  }

  const json &buffers = r.field(doc, "buffers", "program");
  if (!buffers.is_array())
    r.fail("field 'program.buffers' is not an array");
  int numBuffers = int(buffers.size());
  for (int i = 0; i < numBuffers; ++i) {
    std::string path = "buffers[" + std::to_string(i) + "]";
    const json &j = buffers[i];
    Buffer b;
    b.name = r.get<std::string>(j, "name", path);
    b.dtype = r.enumOf<DType>(j, "dtype", path, 4);
    b.shape = r.get<std::vector<int64_t>>(j, "shape", path);
    for (int64_t d : b.shape)
      if (d < 0)
        r.fail("field '" + path + ".shape' has a negative dimension");
    b.role = r.enumOf<Role>(j, "role", path, 10);
    b.binding = r.get<std::string>(j, "binding", path);
    b.viewOf = r.get<int>(j, "view_of", path);
    // A view follows its base (so views never form a cycle).
    if (b.viewOf < -1 || b.viewOf >= i)
      r.fail("field '" + path + ".view_of' names no earlier buffer");
    if (b.viewOf >= 0 && b.bytes() > p.buffers[b.viewOf].bytes())
      r.fail("buffer '" + path + "' is a view of " +
             std::to_string(p.buffers[b.viewOf].bytes()) + " bytes but has " +
             std::to_string(b.bytes()));
    b.offset = r.get<int64_t>(j, "offset", path);
    b.init = r.bytes(j, "init", path);
    if (b.role == Role::Constant && int64_t(b.init.size()) != b.bytes())
      r.fail("constant '" + path + "' has " + std::to_string(b.init.size()) +
             " bytes of data for " + std::to_string(b.bytes()));
    p.buffers.push_back(std::move(b));
  }

  const json &kernels = r.field(doc, "kernels", "program");
  if (!kernels.is_array())
    r.fail("field 'program.kernels' is not an array");
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::string path = "kernels[" + std::to_string(i) + "]";
    DeviceKernel k;
    k.name = r.get<std::string>(kernels[i], "name", path);
    k.source = r.get<std::string>(kernels[i], "source", path);
    k.fuses = r.get<std::vector<std::string>>(kernels[i], "fuses", path);
    k.arch = r.get<std::string>(kernels[i], "arch", path);
    k.scratchBytes = r.get<int64_t>(kernels[i], "scratch_bytes", path);
    if (k.scratchBytes < 0)
      r.fail("field '" + path + ".scratch_bytes' is negative");
    k.cubin = r.bytes(kernels[i], "cubin", path);
    p.kernels.push_back(std::move(k));
  }

  auto checkIds = [&](const std::vector<int> &v, const std::string &what) {
    for (int id : v)
      if (id < 0 || id >= numBuffers)
        r.fail("field '" + what + "' names buffer " + std::to_string(id) +
               " of " + std::to_string(numBuffers));
  };
  const json &functions = r.field(doc, "functions", "program");
  if (!functions.is_array())
    r.fail("field 'program.functions' is not an array");
  for (size_t i = 0; i < functions.size(); ++i) {
    std::string path = "functions[" + std::to_string(i) + "]";
    const json &fj = functions[i];
    Function f;
    f.name = r.get<std::string>(fj, "name", path);
    f.arguments = r.get<std::vector<int>>(fj, "arguments", path);
    checkIds(f.arguments, path + ".arguments");
    f.results = r.get<std::vector<int>>(fj, "results", path);
    checkIds(f.results, path + ".results");
    f.normLaunches = r.get<int>(fj, "norm_launches", path);
    const json &launches = r.field(fj, "launches", path);
    if (!launches.is_array())
      r.fail("field '" + path + ".launches' is not an array");
    if (f.normLaunches < -1 || f.normLaunches > int(launches.size()))
      r.fail("field '" + path + ".norm_launches' is out of range");
    for (size_t k = 0; k < launches.size(); ++k) {
      std::string lp = path + ".launches[" + std::to_string(k) + "]";
      const json &lj = launches[k];
      Launch l;
      l.kernel = r.get<std::string>(lj, "kernel", lp);
      l.inputs = r.get<std::vector<int>>(lj, "inputs", lp);
      checkIds(l.inputs, lp + ".inputs");
      l.outputs = r.get<std::vector<int>>(lj, "outputs", lp);
      checkIds(l.outputs, lp + ".outputs");
      l.ints = r.get<std::map<std::string, int64_t>>(lj, "ints", lp);
      l.floats = r.get<std::map<std::string, double>>(lj, "floats", lp);
      l.lists =
          r.get<std::map<std::string, std::vector<int64_t>>>(lj, "lists", lp);
      // Optional: programs written before float arrays existed have none.
      if (lj.contains("float_lists"))
        l.floatLists = r.get<std::map<std::string, std::vector<double>>>(
            lj, "float_lists", lp);
      l.body = bodyFromJson(r, r.field(lj, "body", lp), lp + ".body");
      l.loc = r.get<std::string>(lj, "loc", lp);
      // The launch's own kernel, then its variants, each a kernel of the
      // program (the own one may be -1: cuBLASLt).
      auto kernelChoice = [&](const json &j, const char *labelKey,
                              const std::string &at, int lowest) {
        LaunchVariant v;
        v.label = r.get<std::string>(j, labelKey, at);
        v.deviceKernel = r.get<int>(j, "device_kernel", at);
        if (v.deviceKernel < lowest || v.deviceKernel >= int(p.kernels.size()))
          r.fail("field '" + at + ".device_kernel' names no kernel");
        auto grid = r.get<std::vector<uint32_t>>(j, "grid", at);
        auto block = r.get<std::vector<uint32_t>>(j, "block", at);
        if (grid.size() != 3 || block.size() != 3)
          r.fail("'" + at + "' needs 3 grid and 3 block dimensions");
        for (int d = 0; d < 3; ++d) {
          v.grid[d] = grid[d];
          v.block[d] = block[d];
        }
        v.sharedBytes = r.get<uint32_t>(j, "shared_bytes", at);
        v.cluster = r.get<uint32_t>(j, "cluster", at);
        if (v.cluster < 1 || v.cluster > 8 || v.grid[0] % v.cluster != 0)
          r.fail("field '" + at + ".cluster' is " + std::to_string(v.cluster) +
                 ": clusters of 1 to 8 blocks that divide the grid's x (" +
                 std::to_string(v.grid[0]) + ")");
        return v;
      };
      setOwnVariant(l, kernelChoice(lj, "variant", lp, -1));
      const json &variants = r.field(lj, "variants", lp);
      if (!variants.is_array())
        r.fail("field '" + lp + ".variants' is not an array");
      if (!variants.empty() && l.deviceKernel < 0)
        r.fail("'" + lp + "' has variants but no kernel of its own");
      for (size_t v = 0; v < variants.size(); ++v)
        l.variants.push_back(
            kernelChoice(variants[v], "label",
                         lp + ".variants[" + std::to_string(v) + "]", 0));
      // A side-stream launch joins the main stream at a later launch of
      // its function, or at its end.
      l.stream = r.get<int>(lj, "stream", lp);
      l.join = r.get<int>(lj, "join", lp);
      if (l.stream != 0 && l.stream != 1)
        r.fail("field '" + lp + ".stream' is " + std::to_string(l.stream) +
               ", not 0 or 1");
      if (l.stream == 1 &&
          (l.join <= int(k) || l.join > int(launches.size())))
        r.fail("field '" + lp + ".join' is " + std::to_string(l.join) +
               ": a side-stream launch joins at a later launch of its "
               "function, or at its end (" +
               std::to_string(launches.size()) + ")");
      f.launches.push_back(std::move(l));
    }
    p.functions.push_back(std::move(f));
  }
  p.arenaBytes = r.get<int64_t>(doc, "arena_bytes", "program");
  return p;
}

} // namespace gptc::rt
