//===- EvalCommand.cpp - gptc eval: the loss of weights on a batch --------===//

#include "Command.h"

#include "gptc/Executor/Bindings.h"
#include "gptc/Executor/Executor.h"
#include "gptc/Formats/Error.h"
#include "gptc/Formats/TokenFile.h"
#include "gptc/Pipeline/Pipeline.h"

#include "mlir/IR/Verifier.h"

#include <cstdio>

using namespace mlir;

namespace gptc::cli {

int runEval(int argc, char **argv) {
  ModelOptions model;
  llvm::cl::opt<std::string> initFrom(
      "init-from",
      llvm::cl::desc("Weights: safetensors (Hugging Face names) or an llm.c "
                     "model_*.bin"),
      llvm::cl::Required, llvm::cl::cat(gptcCategory));
  llvm::cl::opt<std::string> data(
      "data", llvm::cl::desc("Tokens: an llm.c shard or a nanoGPT .bin"),
      llvm::cl::Required, llvm::cl::cat(gptcCategory));
  llvm::cl::opt<std::string> device("device",
                                    llvm::cl::desc("Where to run: cpu"),
                                    llvm::cl::init("cpu"),
                                    llvm::cl::cat(gptcCategory));
  llvm::cl::opt<std::string> logitsOut(
      "logits-out",
      llvm::cl::desc("Also write the logits [B, T, V] as safetensors"),
      llvm::cl::cat(gptcCategory));
  llvm::cl::opt<std::string> gradsOut(
      "grads-out",
      llvm::cl::desc("Also write the gradient of the loss for every "
                     "parameter as safetensors (runs the backward pass)"),
      llvm::cl::cat(gptcCategory));
  parseCommandLine(argc, argv,
                   "gptc eval: the loss of a model on the first batch of a "
                   "token file\n",
                   /*withMLIROptions=*/true);

  if (device != "cpu")
    fail("unknown device '" + device + "' (gptc eval runs on: cpu)");
  models::GPT2Config config = model.config();
  int64_t B = model.batch, T = model.seqLength();

  std::unique_ptr<MLIRContext> ctx = makeContext();
  FailureOr<TrainingProgram> program =
      compileTrainingProgram(*ctx, config, B, T, model.compileOptions(),
                             model.padMultiple);
  if (failed(program))
    return 1;
  func::FuncOp func = program->forward;
  std::vector<exec::ArgumentInfo> argInfo = exec::describeArguments(func);

  // The gradient function takes more than the forward under autocast: the
  // weights' bf16 copies (gpt-weight-copies), made from the same weights.
  std::vector<exec::HostTensor> args, gradArgs;
  try {
    TokenFile tokens = readTokenFile(data);
    exec::Batch batch =
        exec::batchAt(tokens.tokens, 0, B, T, config.vocabSize, data);
    std::map<std::string, exec::HostTensor> params =
        exec::loadParametersFromFile(argInfo, initFrom);
    args = exec::bindArguments(argInfo, params, batch);
    if (!gradsOut.empty())
      gradArgs = exec::bindArguments(
          exec::describeArguments(program->grads), params, batch);
  } catch (const FormatError &e) {
    fail(e.what());
  }

  FailureOr<std::vector<exec::HostTensor>> results =
      exec::runFunction(func, args);
  if (failed(results))
    return 1;
  const exec::HostTensor &loss = (*results)[0];
  const exec::HostTensor &logits = (*results)[1];

  SafetensorsWriter grads;
  if (!gradsOut.empty()) {
    FailureOr<std::vector<exec::HostTensor>> gradResults =
        exec::runFunction(program->grads, gradArgs);
    if (failed(gradResults))
      return 1;
    for (unsigned i = 0; i < program->grads.getNumResults(); ++i)
      if (auto name =
              program->grads.getResultAttrOfType<StringAttr>(i, "gpt.grad"))
        grads.add(name.str(), DType::F32, (*gradResults)[i].shape,
                  (*gradResults)[i].data());
  }
  try {
    if (!logitsOut.empty()) {
      SafetensorsWriter writer;
      writer.add("logits", DType::F32, logits.shape, logits.data());
      writer.write(logitsOut);
    }
    if (!gradsOut.empty())
      grads.write(gradsOut);
  } catch (const FormatError &e) {
    fail(e.what());
  }
  std::printf("loss %.6f\n", loss.f32[0]);
  return 0;
}

} // namespace gptc::cli
