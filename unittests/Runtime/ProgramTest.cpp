//===- ProgramTest.cpp - Program's binary form and memory plan ------------===//
//
// writeProgram/readProgram round-trip the gpt2-tiny kernel program exactly
// and turn damaged bytes into one FormatError line; planMemory never lets
// two buffers that are alive at once share a byte (checked by brute force
// over every pair), views share their base's offset, offsets are aligned;
// launchCost counts what the profile's floors are made of.
//
//===----------------------------------------------------------------------===//

#include "gptc/Conversion/LowerToKernels.h"
#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Formats/Error.h"
#include "gptc/Runtime/Program.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>

using namespace gptc;
using namespace gptc::rt;

namespace {

/// gpt2-tiny with one block, B=2, T=8, bf16 (with --overlap-weight-grads
/// where `overlap`).
Program compileTiny(bool overlap) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect>();
  models::GPT2Config cfg = *models::gpt2Preset("gpt2-tiny");
  cfg.nLayer = 1;
  OptimizerOptions opts;
  opts.precision = "bf16";
  opts.overlapWeightGrads = overlap;
  mlir::FailureOr<Program> p = compileKernelProgram(ctx, cfg, 2, 8, opts);
  if (mlir::failed(p))
    throw std::runtime_error("compileKernelProgram failed");
  return std::move(*p);
}

/// Every op kind of the step.
const Program &tinyProgram() {
  static Program program = compileTiny(false);
  return program;
}

std::string formatErrorOf(const std::vector<uint8_t> &bytes) {
  try {
    readProgram(bytes.data(), bytes.size(), "prog.bin");
  } catch (const FormatError &e) {
    return e.what();
  }
  return "";
}

TEST(ProgramTest, TinyProgramHasTheThreeFunctions) {
  const Program &p = tinyProgram();
  ASSERT_NE(p.function("forward"), nullptr);
  ASSERT_NE(p.function("grads"), nullptr);
  ASSERT_NE(p.function("update"), nullptr);
  EXPECT_EQ(p.function("nothing"), nullptr);
  EXPECT_GT(p.function("update")->normLaunches, 0);
  EXPECT_EQ(p.function("forward")->normLaunches, -1);
  EXPECT_EQ(p.meta.at("precision"), "bf16");
  EXPECT_EQ(p.meta.at("n_layer"), "1");
  EXPECT_EQ(p.params.size(), 16u);
  int wte = p.find(Role::Param, "wte.weight");
  ASSERT_GE(wte, 0);
  EXPECT_EQ(p.buffers[wte].shape, (std::vector<int64_t>{50257, 128}));
  EXPECT_EQ(p.buffers[wte].bytes(), 50257 * 128 * 4);
  // Update writes the parameters in place: its results are its arguments'.
  const Function &update = *p.function("update");
  EXPECT_TRUE(std::find(update.results.begin(), update.results.end(), wte) !=
              update.results.end());
  EXPECT_GE(p.find(Role::Grad, "wte.weight"), 0);
  EXPECT_GE(p.find(Role::Output, "grad_norm"), 0);
  EXPECT_EQ(p.find(Role::Grad, "no.such"), -1);
}

TEST(ProgramTest, TinyProgramAccumulatesGradientsOnTheDevice) {
  const Program &p = tinyProgram();
  const Function &grads = *p.function("grads");
  const Function *acc = p.function("grads_accumulate");
  ASSERT_NE(acc, nullptr);
  EXPECT_EQ(p.function("stash_grads"), nullptr);
  EXPECT_EQ(acc->normLaunches, -1);
  // grads' launches, then the add.
  ASSERT_EQ(acc->launches.size(), grads.launches.size() + 1);
  EXPECT_EQ(acc->results, grads.results);
  const Launch &add = acc->launches.back();
  EXPECT_EQ(add.kernel, "multi_tensor_elementwise");
  // grad + the micro-batch's gradient, written over grad.
  ASSERT_EQ(add.body.code.size(), 1u);
  EXPECT_EQ(add.body.code[0].op, exec::Opcode::Add);
  EXPECT_EQ(add.body.results, std::vector<int>{2});
  size_t n = size_t(add.ints.at("num_tensors"));
  ASSERT_EQ(add.inputs.size(), 2 * n);
  ASSERT_EQ(add.outputs.size(), n);
  // Each gradient is summed one way: by the add, from a temp of its own
  // that no other function touches; or by the one launch that writes it,
  // which reads it last (accumulate): the GEMMs of the block's c_attn,
  // attn c_proj, c_fc and mlp c_proj weights, and the embedding gradients
  // of wte and wpe (at T=8 its positions are gathered).
  std::set<int> gradsTemps;
  for (const Launch &l : grads.launches)
    for (const std::vector<int> *ids : {&l.inputs, &l.outputs})
      for (int id : *ids)
        if (p.buffers[p.root(id)].role == Role::Temp)
          gradsTemps.insert(p.root(id));
  // The gradient of a parameter as the functions read it (for wte a view
  // of the padded buffer its GEMM writes), which grads returns.
  auto gradOf = [&](const std::string &name) {
    const int grad = p.gradient(name);
    EXPECT_TRUE(llvm::is_contained(grads.results, grad)) << name;
    return grad;
  };
  size_t inPlace = 0;
  for (const train::ParamSpec &spec : p.params) {
    const std::string &name = spec.name;
    int grad = gradOf(name);
    EXPECT_EQ(p.root(grad), p.find(Role::Grad, name)) << name;
    EXPECT_TRUE(std::find(acc->arguments.begin(), acc->arguments.end(),
                          grad) != acc->arguments.end())
        << name;
    auto inAdd = std::find(add.outputs.begin(), add.outputs.end(), grad);
    int writers = 0;
    for (size_t i = 0; i + 1 < acc->launches.size(); ++i) {
      const Launch &l = acc->launches[i];
      if (!l.outputs.empty() && l.outputs[0] == grad) {
        ++writers;
        EXPECT_TRUE(l.kernel == "matmul" || l.kernel == "matmul_bias_grad" ||
                    l.kernel == "embedding_grad")
            << name;
        EXPECT_EQ(l.ints.at("accumulate"), 1) << name;
        EXPECT_EQ(l.inputs.back(), grad) << name;
        EXPECT_EQ(l.inputs.size(), grads.launches[i].inputs.size() + 1)
            << name;
      }
    }
    if (inAdd == add.outputs.end()) {
      EXPECT_EQ(writers, 1) << name << " is summed neither way";
      EXPECT_NE(name.find(".weight"), std::string::npos) << name;
      ++inPlace;
      continue;
    }
    EXPECT_EQ(writers, 0) << name << " is summed twice";
    size_t t = size_t(inAdd - add.outputs.begin());
    EXPECT_EQ(add.inputs[t], grad) << name;
    const Buffer &b = p.buffers[add.inputs[n + t]];
    EXPECT_EQ(b.role, Role::Temp) << name;
    EXPECT_EQ(b.viewOf, -1) << name;
    EXPECT_EQ(b.dtype, DType::F32) << name;
    EXPECT_EQ(b.shape, spec.shape) << name;
    EXPECT_EQ(gradsTemps.count(add.inputs[n + t]), 0u) << name;
  }
  EXPECT_EQ(inPlace, 6u);
  EXPECT_EQ(n + inPlace, p.params.size());
  // Launch by launch the same work as grads, on the same bound buffers but
  // on temps of its own (planMemory keeps a temp two functions touch for
  // the whole run); but for the tied wte's gradient. In grads its GEMM
  // writes the lm_head's [50304, 128] product into the gradient, padded to
  // those rows (writeTableGradientInPlace), and the scatter-add adds its
  // sums to the leading rows' view in place; grads_accumulate keeps the
  // addend form, its scatter-add adding its GEMM's temp's leading rows and
  // its sums to the sum in place.
  const int gwte = gradOf("wte.weight"), padded = p.root(gwte);
  EXPECT_EQ(p.buffers[padded].shape, (std::vector<int64_t>{50304, 128}));
  EXPECT_EQ(p.buffers[padded].role, Role::Grad);
  std::vector<size_t> wteWriters;
  for (size_t i = 0; i < grads.launches.size(); ++i)
    if (p.root(grads.launches[i].outputs.at(0)) == padded)
      wteWriters.push_back(i);
  ASSERT_EQ(wteWriters.size(), 2u);
  {
    const Launch &gemm = grads.launches[wteWriters[0]],
                 &scatter = grads.launches[wteWriters[1]],
                 &accScatter = acc->launches[wteWriters[1]];
    EXPECT_EQ(gemm.kernel, "matmul");
    EXPECT_EQ(gemm.outputs[0], padded);
    EXPECT_EQ(scatter.kernel, "embedding_grad");
    EXPECT_TRUE(accumulates(scatter));
    ASSERT_EQ(scatter.inputs.size(), 3u);
    EXPECT_EQ(scatter.inputs[2], gwte);
    EXPECT_EQ(scatter.outputs[0], gwte);
    ASSERT_EQ(accScatter.inputs.size(), 4u);
    EXPECT_EQ(accScatter.inputs[3], gwte);
    const Buffer &product = p.buffers[p.root(accScatter.inputs[2])];
    EXPECT_EQ(product.role, Role::Temp);
    EXPECT_EQ(product.shape, (std::vector<int64_t>{50304, 128}));
  }
  for (size_t i = 0; i < grads.launches.size(); ++i) {
    if (llvm::is_contained(wteWriters, i))
      continue;
    const Launch &a = grads.launches[i], &b = acc->launches[i];
    EXPECT_EQ(a.kernel, b.kernel) << i;
    std::map<std::string, int64_t> ints = b.ints;
    ints.erase("accumulate");
    EXPECT_EQ(a.ints, ints) << i;
    ASSERT_GE(b.inputs.size(), a.inputs.size()) << i;
    ASSERT_EQ(a.outputs.size(), b.outputs.size()) << i;
    for (const auto &[x, y] : {std::pair{&a.inputs, &b.inputs},
                               std::pair{&a.outputs, &b.outputs}})
      for (size_t k = 0; k < x->size(); ++k) {
        const Buffer &bx = p.buffers[(*x)[k]], &by = p.buffers[(*y)[k]];
        EXPECT_EQ(bx.shape, by.shape) << i;
        EXPECT_EQ(bx.dtype, by.dtype) << i;
        Role rx = p.buffers[p.root((*x)[k])].role;
        if (rx == Role::Temp || (rx == Role::Grad && (*x)[k] != (*y)[k])) {
          EXPECT_EQ(p.buffers[p.root((*y)[k])].role, Role::Temp) << i;
          EXPECT_EQ(gradsTemps.count(p.root((*y)[k])), 0u) << i;
        } else {
          EXPECT_EQ((*x)[k], (*y)[k]) << i;
        }
      }
  }
}

TEST(ProgramTest, RoundTripIsExact) {
  Program p = tinyProgram();
  // Fields the lowering leaves empty, as the CUDA emitter fills them.
  p.kernels.push_back({"k0", "extern \"C\" __global__ void k0() {}",
                       {"gpt.layernorm at models/gpt2.cpp:40"}, "sm_90a",
                       {0, 1, 2, 255, 7}, 4104});
  Launch &l = p.functions[0].launches[0];
  l.deviceKernel = 0;
  l.grid[0] = 12;
  l.block[1] = 256;
  l.sharedBytes = 4096;
  // A second kernel as the launch's variant (--attention-*=auto).
  p.kernels.push_back({"k1", "extern \"C\" __global__ void k1() {}",
                       {"gpt.layernorm at models/gpt2.cpp:40"}, "sm_90a",
                       {3, 4}, 0});
  l.variant = "one";
  LaunchVariant other;
  other.label = "two";
  other.deviceKernel = 1;
  other.grid[0] = 8;
  other.grid[1] = 3;
  other.block[0] = 128;
  other.sharedBytes = 65536;
  other.cluster = 4; // (the loss gradient's cluster forms)
  l.variants.push_back(other);
  // A side-stream launch (planStreams) and where it joins.
  Launch &sideLaunch = p.functions[1].launches[3];
  sideLaunch.stream = 1;
  sideLaunch.join = 5;

  std::vector<uint8_t> bytes = writeProgram(p);
  ASSERT_GT(bytes.size(), 12u);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "GPTCPROG");
  Program q = readProgram(bytes.data(), bytes.size(), "prog.bin");
  EXPECT_EQ(printProgram(p), printProgram(q));
  EXPECT_EQ(writeProgram(q), bytes);

  EXPECT_EQ(q.arenaBytes, p.arenaBytes);
  EXPECT_EQ(q.meta, p.meta);
  ASSERT_EQ(q.params.size(), p.params.size());
  for (size_t i = 0; i < p.params.size(); ++i) {
    EXPECT_EQ(q.params[i].name, p.params[i].name);
    EXPECT_EQ(q.params[i].shape, p.params[i].shape);
    EXPECT_EQ(q.params[i].init, p.params[i].init);
    EXPECT_EQ(q.params[i].std, p.params[i].std);
  }
  ASSERT_EQ(q.buffers.size(), p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    EXPECT_EQ(q.buffers[i].init, p.buffers[i].init) << i;
    EXPECT_EQ(q.buffers[i].viewOf, p.buffers[i].viewOf) << i;
    EXPECT_EQ(q.buffers[i].offset, p.buffers[i].offset) << i;
    EXPECT_EQ(q.buffers[i].role, p.buffers[i].role) << i;
    EXPECT_EQ(q.buffers[i].binding, p.buffers[i].binding) << i;
  }
  // So does ParamCopy, and the view by which the update writes the padded
  // lm_head copy's leading rows (format version 8 on).
  int copy = q.find(Role::ParamCopy, "wte.weight");
  ASSERT_GE(copy, 0);
  EXPECT_EQ(copy, p.find(Role::ParamCopy, "wte.weight"));
  EXPECT_EQ(q.buffers[copy].dtype, DType::BF16);
  bool leadingRows = false;
  for (const Buffer &b : q.buffers)
    leadingRows |= b.viewOf == copy && b.role == Role::ParamCopy &&
                   b.shape[0] < q.buffers[copy].shape[0];
  EXPECT_TRUE(leadingRows);
  EXPECT_EQ(bytes[8], 12);
  EXPECT_NE(q.function("grads_accumulate"), nullptr);
  ASSERT_EQ(q.functions.size(), p.functions.size());
  for (size_t f = 0; f < p.functions.size(); ++f) {
    const Function &a = p.functions[f], &b = q.functions[f];
    EXPECT_EQ(a.arguments, b.arguments);
    EXPECT_EQ(a.results, b.results);
    EXPECT_EQ(a.normLaunches, b.normLaunches);
    ASSERT_EQ(a.launches.size(), b.launches.size());
    for (size_t k = 0; k < a.launches.size(); ++k) {
      const Launch &x = a.launches[k], &y = b.launches[k];
      EXPECT_EQ(x.floats, y.floats); // exact doubles, not their text
      EXPECT_EQ(x.lists, y.lists);
      EXPECT_EQ(x.floatLists, y.floatLists);
      ASSERT_EQ(x.body.code.size(), y.body.code.size());
      for (size_t c = 0; c < x.body.code.size(); ++c)
        EXPECT_EQ(x.body.code[c].value, y.body.code[c].value);
    }
  }
  // The update's AdamW carries its weight decay per tensor, exactly.
  bool sawPerTensor = false;
  for (const Launch &l : q.function("update")->launches)
    if (auto it = l.floatLists.find("per_tensor"); it != l.floatLists.end()) {
      sawPerTensor = true;
      EXPECT_EQ(it->second.size(), size_t(l.ints.at("num_tensors")));
      EXPECT_NE(std::find(it->second.begin(), it->second.end(),
                          double(0.1f)),
                it->second.end());
    }
  EXPECT_TRUE(sawPerTensor);
  EXPECT_EQ(q.kernels[0].cubin, p.kernels[0].cubin);
  EXPECT_EQ(q.kernels[0].scratchBytes, 4104);
  EXPECT_EQ(q.functions[0].launches[0].block[1], 256u);
  EXPECT_EQ(q.functions[0].launches[0].sharedBytes, 4096u);
  // The variant, and its line in the text form.
  const Launch &ql = q.functions[0].launches[0];
  EXPECT_EQ(ql.variant, "one");
  ASSERT_EQ(ql.variants.size(), 1u);
  EXPECT_EQ(ql.variants[0].label, "two");
  EXPECT_EQ(ql.variants[0].deviceKernel, 1);
  EXPECT_EQ(ql.variants[0].grid[1], 3u);
  EXPECT_EQ(ql.variants[0].block[0], 128u);
  EXPECT_EQ(ql.variants[0].sharedBytes, 65536u);
  EXPECT_EQ(ql.variants[0].cluster, 4u);
  EXPECT_EQ(ql.cluster, 1u);
  EXPECT_EQ(q.functions[1].launches[3].stream, 1);
  EXPECT_EQ(q.functions[1].launches[3].join, 5);
  EXPECT_EQ(q.functions[1].launches[2].stream, 0);
  EXPECT_NE(printProgram(q).find(" [side stream, joined before launch 5]"),
            std::string::npos);
  EXPECT_EQ(dynamicSharedBytes(q), (std::vector<uint32_t>{4096, 65536}));
  EXPECT_NE(printProgram(q).find(
                " => one: k0<<<(12,1,1), (1,256,1), 4096>>>"),
            std::string::npos);
  EXPECT_NE(printProgram(q).find("\n      or two: k1<<<(8,3,1), (128,1,1), "
                                 "65536>>> in clusters of 4\n"),
            std::string::npos);
  // A constant carries its bytes: grads' seed 1.0f.
  bool sawConstant = false;
  for (const Buffer &b : q.buffers)
    if (b.role == Role::Constant) {
      sawConstant = true;
      EXPECT_EQ(int64_t(b.init.size()), b.bytes());
    }
  EXPECT_TRUE(sawConstant);
}

TEST(ProgramTest, DamagedBytesAreOneFormatError) {
  std::vector<uint8_t> bytes = writeProgram(tinyProgram());
  for (size_t cut : {size_t(0), size_t(5), size_t(8), size_t(11), size_t(12),
                     size_t(40), bytes.size() / 2, bytes.size() - 1}) {
    std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + cut);
    std::string msg = formatErrorOf(truncated);
    EXPECT_EQ(msg.rfind("prog.bin: ", 0), 0u) << "cut at " << cut << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
  std::vector<uint8_t> magic = bytes;
  magic[0] = 'X';
  EXPECT_NE(formatErrorOf(magic).find("bad magic"), std::string::npos);
  std::vector<uint8_t> version = bytes;
  version[8] = 99;
  EXPECT_NE(formatErrorOf(version).find("version 99"), std::string::npos);
  // A version 1 program (before gradient accumulation) is refused in one
  // line that says what to do.
  version[8] = 1;
  EXPECT_EQ(formatErrorOf(version),
            "prog.bin: gptc program version 1, this build reads version 12 "
            "(recompile it with this gptc)");
  std::vector<uint8_t> garbage = bytes;
  garbage[12] = 0xff; // a CBOR "break" where the document should start
  EXPECT_NE(formatErrorOf(garbage).find("corrupt"), std::string::npos);
  std::vector<uint8_t> trailing = bytes;
  trailing.push_back(0);
  EXPECT_NE(formatErrorOf(trailing), "");
}

/// The CBOR document of a valid program, to damage field by field.
nlohmann::json documentOf(const Program &p) {
  std::vector<uint8_t> bytes = writeProgram(p);
  return nlohmann::json::from_cbor(bytes.begin() + 12, bytes.end());
}

std::string formatErrorOf(const nlohmann::json &doc) {
  // This build's magic and version.
  std::vector<uint8_t> bytes = writeProgram(tinyProgram());
  bytes.resize(12);
  nlohmann::json::to_cbor(doc, bytes);
  return formatErrorOf(bytes);
}

TEST(ProgramTest, MissingOrBadFieldsAreNamed) {
  const Program &p = tinyProgram();
  EXPECT_EQ(formatErrorOf(documentOf(p)), "");

  nlohmann::json doc = documentOf(p);
  doc.erase("buffers");
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: missing field 'program.buffers'");

  doc = documentOf(p);
  doc["buffers"][3].erase("dtype");
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: missing field 'buffers[3].dtype'");

  doc = documentOf(p);
  doc["buffers"][3]["role"] = 42;
  EXPECT_NE(formatErrorOf(doc).find("'buffers[3].role' is out of range"),
            std::string::npos);

  doc = documentOf(p);
  doc["functions"][1]["launches"][0]["inputs"][0] = 100000;
  EXPECT_NE(formatErrorOf(doc).find("functions[1].launches[0].inputs"),
            std::string::npos);

  doc = documentOf(p);
  doc["buffers"][3]["view_of"] = 5;
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: field 'buffers[3].view_of' names no earlier buffer");

  // A view may be shorter than its buffer (a prefix slice), not longer.
  size_t big = 1;
  while (p.buffers[big].bytes() <= p.buffers[0].bytes())
    ++big;
  doc = documentOf(p);
  doc["buffers"][big]["view_of"] = 0;
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: buffer 'buffers[" + std::to_string(big) +
                "]' is a view of " + std::to_string(p.buffers[0].bytes()) +
                " bytes but has " + std::to_string(p.buffers[big].bytes()));

  // A variant must name a kernel, and a launch with variants have its own.
  Program withVariant = tinyProgram();
  withVariant.kernels.push_back({"k0", "", {}, "", {}, 0});
  LaunchVariant v;
  v.label = "atomic";
  v.deviceKernel = 0;
  withVariant.functions[1].launches[2].deviceKernel = 0;
  withVariant.functions[1].launches[2].variants.push_back(v);
  EXPECT_EQ(formatErrorOf(documentOf(withVariant)), "");
  doc = documentOf(withVariant);
  doc["functions"][1]["launches"][2]["variants"][0]["device_kernel"] = 1;
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: field 'functions[1].launches[2].variants[0]."
            "device_kernel' names no kernel");
  doc = documentOf(withVariant);
  doc["functions"][1]["launches"][2]["device_kernel"] = -1;
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: 'functions[1].launches[2]' has variants but no kernel "
            "of its own");
  doc = documentOf(withVariant);
  doc["functions"][1]["launches"][2]["variants"][0].erase("label");
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: missing field 'functions[1].launches[2].variants[0]."
            "label'");

  // A cluster is 1 to 8 blocks, and divides the grid's x.
  doc = documentOf(withVariant);
  doc["functions"][1]["launches"][2]["variants"][0]["cluster"] = 0;
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: field 'functions[1].launches[2].variants[0].cluster' "
            "is 0: clusters of 1 to 8 blocks that divide the grid's x (1)");
  doc = documentOf(withVariant);
  doc["functions"][1]["launches"][2]["grid"] = {6, 1, 1};
  doc["functions"][1]["launches"][2]["cluster"] = 4;
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: field 'functions[1].launches[2].cluster' is 4: "
            "clusters of 1 to 8 blocks that divide the grid's x (6)");
  doc["functions"][1]["launches"][2]["cluster"] = 2;
  EXPECT_EQ(formatErrorOf(doc), "");

  // A launch runs on stream 0 or 1, and a side one joins later.
  doc = documentOf(p);
  doc["functions"][1]["launches"][2]["stream"] = 2;
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: field 'functions[1].launches[2].stream' is 2, not 0 or 1");
  doc = documentOf(p);
  doc["functions"][1]["launches"][2]["stream"] = 1;
  doc["functions"][1]["launches"][2]["join"] = 2;
  const size_t grads = p.functions[1].launches.size();
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: field 'functions[1].launches[2].join' is 2: a "
            "side-stream launch joins at a later launch of its function, or "
            "at its end (" + std::to_string(grads) + ")");
  doc["functions"][1]["launches"][2]["join"] = grads;
  EXPECT_EQ(formatErrorOf(doc), "");
  doc["functions"][1]["launches"][2]["join"] = grads + 1;
  EXPECT_NE(formatErrorOf(doc), "");

  doc = documentOf(p);
  doc["functions"][0]["name"] = 7;
  EXPECT_EQ(formatErrorOf(doc),
            "prog.bin: field 'functions[0].name' has the wrong type");
}

/// Brute force over every pair of buffers: storage alive at the same time
/// never overlaps.
void expectPlanIsSound(const Program &p) {
  auto root = [&](int id) {
    while (p.buffers[id].viewOf >= 0)
      id = p.buffers[id].viewOf;
    return id;
  };
  size_t n = p.buffers.size();
  // Per function, the launches during which each root buffer is alive.
  std::vector<std::vector<std::pair<int, int>>> live(
      p.functions.size(), std::vector<std::pair<int, int>>(n, {1 << 30, -1}));
  // (A side-stream launch may run until its join: its buffers are alive
  // until the launch before it.)
  for (size_t f = 0; f < p.functions.size(); ++f)
    for (size_t l = 0; l < p.functions[f].launches.size(); ++l) {
      const Launch &launch = p.functions[f].launches[l];
      const int until = launch.stream == 1 ? launch.join - 1 : int(l);
      for (const std::vector<int> *ids : {&launch.inputs, &launch.outputs})
        for (int id : *ids) {
          auto &iv = live[f][root(id)];
          iv.first = std::min(iv.first, int(l));
          iv.second = std::max(iv.second, until);
        }
    }
  auto alive = [&](int a, int b) {
    if (p.buffers[a].role != Role::Temp || p.buffers[b].role != Role::Temp)
      return true; // bound buffers live for the whole run
    for (size_t f = 0; f < p.functions.size(); ++f) {
      auto x = live[f][a], y = live[f][b];
      if (x.second >= 0 && y.second >= 0 && x.first <= y.second &&
          y.first <= x.second)
        return true;
    }
    return false;
  };
  for (size_t i = 0; i < n; ++i) {
    const Buffer &b = p.buffers[i];
    EXPECT_EQ(b.offset % 256, 0) << "buffer " << i;
    EXPECT_GE(b.offset, 0) << "buffer " << i;
    EXPECT_LE(b.offset + b.bytes(), p.arenaBytes) << "buffer " << i;
    if (b.viewOf >= 0)
      EXPECT_EQ(b.offset, p.buffers[root(int(i))].offset) << "view " << i;
  }
  int overlaps = 0;
  for (size_t i = 0; i < n; ++i) {
    if (p.buffers[i].viewOf >= 0)
      continue;
    for (size_t j = i + 1; j < n; ++j) {
      if (p.buffers[j].viewOf >= 0 || !alive(int(i), int(j)))
        continue;
      const Buffer &a = p.buffers[i], &b = p.buffers[j];
      bool disjoint = a.offset + a.bytes() <= b.offset ||
                      b.offset + b.bytes() <= a.offset;
      if (!disjoint && ++overlaps < 10)
        ADD_FAILURE() << "buffers " << i << " (" << a.name << ") and " << j
                      << " (" << b.name << ") are alive together and overlap";
    }
  }
  EXPECT_EQ(overlaps, 0);
}

TEST(ProgramTest, PlanOfTinyStepIsSound) {
  const Program &p = tinyProgram();
  expectPlanIsSound(p);
  // Reuse happened: the temps need less than their sum.
  int64_t persistent = 0, temps = 0;
  for (const Buffer &b : p.buffers)
    if (b.viewOf < 0)
      (b.role == Role::Temp ? temps : persistent) += (b.bytes() + 255) / 256 * 256;
  EXPECT_LT(p.arenaBytes, persistent + temps);
  EXPECT_GE(p.arenaBytes, persistent);
}

Buffer temp(int64_t floats) {
  Buffer b;
  b.shape = {floats};
  return b;
}

/// A launch of `kernel` from buffers `in` to `out`, for hand-made plans.
Launch launchOf(const char *kernel, std::vector<int> in, std::vector<int> out) {
  Launch l;
  l.kernel = kernel;
  l.inputs = std::move(in);
  l.outputs = std::move(out);
  return l;
}

TEST(ProgramTest, PlanReusesDeadTempsAndKeepsViewsBasesAlive) {
  Program p;
  Buffer param = temp(10);
  param.role = Role::Param;
  param.binding = "w";
  p.buffers = {param,     temp(64), temp(64), temp(64),
               temp(64),  temp(64)};
  Buffer view = temp(64);
  view.viewOf = 1;
  p.buffers.push_back(view); // %6 views %1
  Function f;
  f.name = "forward";
  auto launch = [](std::vector<int> in, std::vector<int> out) {
    return launchOf("k", std::move(in), std::move(out));
  };
  // %1 lives 0..4 through its view; %2 1..2; %3 2..3; %4 3..4; %5 4.
  f.launches = {launch({0}, {1}), launch({0}, {2}), launch({2}, {3}),
                launch({3}, {4}), launch({6, 4}, {5})};
  p.functions = {f};
  planMemory(p);
  expectPlanIsSound(p);
  EXPECT_EQ(p.buffers[0].offset, 0);
  EXPECT_EQ(p.buffers[6].offset, p.buffers[1].offset);
  // At most three temps of 256 bytes are alive at once (%1 and two more).
  EXPECT_EQ(p.arenaBytes, 256 + 3 * 256);

  // A second function's temps may share the first one's bytes.
  Program q = p;
  Function g = f;
  g.name = "grads";
  q.buffers.push_back(temp(64)); // %7
  g.launches = {launch({0}, {7})};
  q.functions.push_back(g);
  planMemory(q);
  expectPlanIsSound(q);
  EXPECT_EQ(q.arenaBytes, p.arenaBytes);
}

/// tinyProgram compiled with --overlap-weight-grads.
const Program &overlappedProgram() {
  static Program program = compileTiny(true);
  return program;
}

// The block's four weight gradients (c_attn, the attention's c_proj, c_fc,
// the MLP's c_proj) go on the side stream, each joined later; the tied
// lm_head's does not (embedding_grad reads it); nor anything else but the
// embedding gradients' sorts of their ids; and the plan keeps every side
// launch's bytes until its join. In grads_accumulate
// three of them do (each adds to its gradient in place): c_fc's also
// writes its bias gradient's temp, which the add reads.
TEST(ProgramTest, WeightGradientsRunOnTheSideStream) {
  const Program &p = overlappedProgram(), &plain = tinyProgram();
  EXPECT_EQ(p.meta.at("overlap"), "weight-grads");
  EXPECT_EQ(plain.meta.count("overlap"), 0u);
  ASSERT_EQ(p.functions.size(), plain.functions.size());
  std::map<std::string, int> side, sorts;
  for (size_t f = 0; f < p.functions.size(); ++f) {
    const Function &fn = p.functions[f];
    ASSERT_EQ(fn.launches.size(), plain.functions[f].launches.size());
    for (size_t i = 0; i < fn.launches.size(); ++i) {
      const Launch &l = fn.launches[i];
      EXPECT_EQ(l.kernel, plain.functions[f].launches[i].kernel);
      if (l.stream == 0)
        continue;
      EXPECT_GT(l.join, int(i) + 1);
      EXPECT_LE(l.join, int(fn.launches.size()));
      if (l.kernel == "sort_ids") { // joined before its reader at the latest
        ++sorts[fn.name];
        for (int k = int(i) + 1; k < l.join; ++k)
          EXPECT_EQ(std::count(fn.launches[size_t(k)].inputs.begin(),
                               fn.launches[size_t(k)].inputs.end(),
                               l.outputs[0]),
                    0)
              << "launch " << k << " reads the keys before their join";
        continue;
      }
      ++side[fn.name];
      EXPECT_TRUE(isGemm(l.kernel)) << l.kernel;
      for (int out : l.outputs)
        EXPECT_EQ(p.buffers[p.root(out)].role, Role::Grad) << l.loc;
    }
  }
  EXPECT_EQ(side, (std::map<std::string, int>{{"grads", 4},
                                              {"grads_accumulate", 3}}));
  // The ids' sorts (wte's tokens and, at T = 8 padded to 64, wpe's
  // positions) go there too, in each function.
  EXPECT_EQ(sorts, (std::map<std::string, int>{{"grads", 2},
                                               {"grads_accumulate", 2}}));
  expectPlanIsSound(p);
  EXPECT_NE(printProgram(p).find("[side stream, joined "), std::string::npos);
}

// planStreams' rules on a hand-made function, and planMemory keeping a side
// launch's bytes until its join.
TEST(ProgramTest, SideLaunchesJoinBeforeWhatNeedsThem) {
  Program p;
  Buffer x = temp(64), w = temp(64), g1 = temp(64), g2 = temp(64),
         g3 = temp(64), g4 = temp(64);
  x.role = w.role = Role::Param;
  x.binding = "x";
  w.binding = "w";
  g1.role = g2.role = g3.role = g4.role = Role::Grad;
  g1.binding = "g1";
  g2.binding = "g2";
  g3.binding = "g3";
  g4.binding = "g4";
  // %0 x, %1 w, %2..%5 temps t2..t5, %6..%9 gradients g1..g4.
  p.buffers = {x, w, temp(64), temp(64), temp(64), temp(64), g1, g2, g3, g4};
  const auto launch = launchOf;
  Function f;
  f.name = "grads";
  f.launches = {
      launch("matmul", {0, 1}, {2}), // 0: t2
      launch("matmul", {2, 0}, {6}), // 1: g1, the last read of t2: side
      launch("matmul", {0, 1}, {3}), // 2: t3, beside 1
      launch("k", {3}, {4}),         // 3: t4, beside 1
      launch("matmul", {3, 0}, {7}), // 4: g2: side; 1 joins here
      launch("k", {4}, {5}),         // 5: beside 4
      launch("k", {5}, {3}),         // 6: writes t3, which 4 reads
      launch("matmul", {4, 1}, {8}), // 7: g3, but 8 writes t4 at once
      launch("k", {1}, {4}),         // 8
      launch("matmul", {0, 1}, {5}), // 9: t5, which 10 reads: stays
      launch("k", {5}, {5}),         // 10
      launch("matmul", {5, 0}, {9}), // 11: g4: side, to the end
      launch("k", {0}, {4})};        // 12: beside 11
  p.functions = {f};
  EXPECT_EQ(planStreams(p), 3);
  const std::vector<Launch> &l = p.functions[0].launches;
  EXPECT_EQ(l[1].stream, 1);
  EXPECT_EQ(l[1].join, 4); // the next launch moved
  EXPECT_EQ(l[4].stream, 1);
  EXPECT_EQ(l[4].join, 6); // launch 6 writes what it reads
  EXPECT_EQ(l[11].stream, 1);
  EXPECT_EQ(l[11].join, 13); // the end
  for (int i : {0, 2, 3, 5, 6, 7, 8, 9, 10, 12})
    EXPECT_EQ(l[i].stream, 0) << i;
  EXPECT_NE(printProgram(p).find("[side stream, joined at the end]"),
            std::string::npos);

  // t2 is last read by launch 1, which may run until launch 4: t3 and t4,
  // written meanwhile, get other bytes than t2's.
  planMemory(p);
  expectPlanIsSound(p);
  for (int t : {3, 4})
    EXPECT_NE(p.buffers[t].offset, p.buffers[2].offset) << t;
  // Without the side stream, t3 reuses t2's bytes.
  Program q = p;
  for (Launch &launch : q.functions[0].launches)
    launch.stream = 0, launch.join = -1;
  planMemory(q);
  EXPECT_EQ(q.buffers[3].offset, q.buffers[2].offset);
}

} // namespace

// The profile's floors (GPTC_PROFILE=1) come from these: gpt2-tiny with one
// block, B=2, C=128, 4 heads of 32, T=8 padded to 64 and the vocabulary to
// 50304.
TEST(ProgramTest, LaunchCostsCountOperandsAndProducts) {
  const Program &p = tinyProgram();
  std::map<std::string, int> seen;
  for (const Function &f : p.functions)
    for (const Launch &l : f.launches) {
      LaunchCost c = launchCost(p, l);
      int64_t bytes = 0;
      for (int id : l.inputs)
        bytes += p.buffers[id].bytes();
      for (int id : l.outputs)
        bytes += p.buffers[id].bytes();
      if (l.kernel == "attention_bias_grad") {
        // c_attn's bias gradient reads the first third of dq|dk|dv (bf16
        // [B, T, 3C]) and dout, and writes [3C].
        const Buffer &x = p.buffers[l.inputs[0]];
        ASSERT_EQ(x.shape.size(), 3u);
        EXPECT_EQ(c.bytes, bytes - x.bytes() + x.bytes() / 3)
            << "dq's bytes, not dqkv's";
        EXPECT_EQ(c.flops, 0);
        ++seen["dq"];
        continue;
      }
      ++seen[l.kernel];
      if (l.kernel == "embedding_grad" && accumulates(l) &&
          l.inputs.size() == 3) {
        // In place (dy, ids, the table): at most a row of the table read
        // and written a position.
        const Buffer &table = p.buffers[l.outputs[0]];
        const int64_t positions = p.buffers[l.inputs[1]].numel();
        ASSERT_LT(positions, table.shape[0]);
        EXPECT_EQ(c.bytes,
                  bytes - 2 * (table.shape[0] - positions) * table.shape[1] * 4)
            << l.kernel;
        ++seen["scatter in place"];
        continue;
      }
      EXPECT_EQ(c.bytes, bytes) << l.kernel;
      if (l.kernel == "flash_attention_qkv") {
        // 4 · (B·H = 8) · T · T · D / 2 (causal).
        EXPECT_EQ(c.flops, 4.0 * 8 * 64 * 64 * 32 / 2);
      } else if (l.kernel == "flash_attention_qkv_grad") {
        EXPECT_EQ(c.flops, 2.5 * 4.0 * 8 * 64 * 64 * 32 / 2);
      } else if (isGemm(l.kernel)) {
        const Buffer &out = p.buffers[l.outputs[0]];
        if (out.shape.back() == 50304) // the lm head: B·T rows, K = C
          EXPECT_EQ(c.flops, 2.0 * 128 * 50304 * 128);
        EXPECT_GT(c.flops, 0) << l.kernel;
      } else {
        EXPECT_EQ(c.flops, 0) << l.kernel << " is bound by its bytes";
      }
    }
  EXPECT_GT(seen["flash_attention_qkv"], 0);
  EXPECT_GT(seen["flash_attention_qkv_grad"], 0);
  EXPECT_GT(seen["matmul_epilogue"], 0);
  // One block's c_attn bias gradient, in grads and grads_accumulate.
  EXPECT_EQ(seen["dq"], 2);
  // wpe's (gathered at T=8) in grads_accumulate, and wte's in grads (into
  // its gradient padded to the vocabulary's 50304 rows); grads_accumulate's
  // wte keeps its addend.
  EXPECT_EQ(seen["scatter in place"], 2);
}
