//===- SampleCommand.cpp - gptc sample: generate text from weights --------===//
//
// The forward function has static shapes, so it is built once for B = 1 and
// T = min(block_size, prompt + new tokens). Each new token comes from the
// logits row of the last real position: causal attention makes the padding
// after it irrelevant. Once the text outgrows T, the newest T tokens are the
// context.
//
//===----------------------------------------------------------------------===//

#include "Command.h"

#include "gptc/Executor/Bindings.h"
#include "gptc/Executor/Executor.h"
#include "gptc/Formats/Error.h"
#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Tokenizer/Tokenizer.h"
#include "gptc/Train/Checkpoint.h"
#include "gptc/Train/Sampling.h"
#include "gptc/Train/StepFunction.h"
#include "gptc/Train/TrainState.h"


#include <cstdio>
#include <filesystem>

using namespace mlir;
using namespace gptc::train;
using llvm::cl::cat;
using llvm::cl::desc;
using llvm::cl::init;

namespace gptc::cli {

namespace {
void print(const std::string &bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::fflush(stdout);
}
} // namespace

int runSample(int argc, char **argv) {
  ModelOptions model;
  llvm::cl::opt<std::string> initFrom(
      "init-from",
      desc("A checkpoint folder (step_<N>/, its model read from its state) "
           "or weights in safetensors (model from --model and overrides)"),
      llvm::cl::Required, cat(gptcCategory));
  llvm::cl::opt<std::string> prompt("prompt", desc("Text to continue"),
                                    cat(gptcCategory));
  llvm::cl::opt<int64_t> maxNew("max-new-tokens", desc("Tokens to generate"),
                                init(64), cat(gptcCategory));
  llvm::cl::opt<double> temperature(
      "temperature", desc("Softmax temperature; 0 picks the likeliest token"),
      init(1.0), cat(gptcCategory));
  llvm::cl::opt<int> topK("top-k",
                          desc("Sample among the k likeliest tokens (0: all)"),
                          init(0), cat(gptcCategory));
  llvm::cl::opt<uint64_t> seed("seed", desc("Seed of the sampling"), init(1337),
                               cat(gptcCategory));
  model.batch.setHiddenFlag(llvm::cl::ReallyHidden);
  model.seq.setHiddenFlag(llvm::cl::ReallyHidden);
  parseCommandLine(argc, argv,
                   "gptc sample: continue a prompt with a trained model\n",
                   /*withMLIROptions=*/true);

  if (model.batch.getNumOccurrences() || model.seq.getNumOccurrences())
    fail("gptc sample takes no --batch or --seq (it uses 1 and the length "
         "of the text)");
  if (maxNew < 1)
    fail("--max-new-tokens must be at least 1");
  if (!(temperature >= 0) || topK < 0)
    fail("--temperature and --top-k must be non-negative");

  try {
    models::GPT2Config config;
    std::map<std::string, exec::HostTensor> params;
    bool folder = std::filesystem::is_directory(initFrom.getValue());
    if (folder) {
      if (model.model.getNumOccurrences() || model.nLayer.getNumOccurrences() ||
          model.nHead.getNumOccurrences() || model.nEmbd.getNumOccurrences() ||
          model.blockSize.getNumOccurrences() ||
          model.vocabSize.getNumOccurrences())
        fail("--model and the size overrides do not apply to a checkpoint "
             "folder: its state records the model");
      Checkpoint ckpt = loadCheckpoint(initFrom);
      config = configOf(ckpt, initFrom);
      std::string problem = models::validateGPT2(config, 1, 1);
      if (!problem.empty())
        fail(initFrom + ": " + problem);
      params = std::move(ckpt.params);
    } else {
      config = model.config();
    }

    Tokenizer tokenizer(tokenizerDir());
    std::vector<int> ids = tokenizer.encode(prompt, /*allowSpecial=*/true);
    if (ids.empty())
      ids.push_back(Tokenizer::kEndOfText); // GPT-2 starts texts after EOT
    for (int id : ids)
      if (id >= config.vocabSize)
        fail("the prompt holds token " + llvm::Twine(id) +
             ", outside the model's vocabulary of " +
             llvm::Twine(config.vocabSize));

    int64_t T = std::min<int64_t>(config.blockSize,
                                  int64_t(ids.size()) + int64_t(maxNew));
    // The forward function as training compiles it, so --precision and
    // --pad-multiple mean here what they mean for train and eval.
    if (model.padMultiple < 0)
      fail("--pad-multiple must be 0 (off) or positive, got " +
           llvm::Twine(int64_t(model.padMultiple)));
    std::unique_ptr<MLIRContext> ctx = makeContext();
    FailureOr<TrainingProgram> program = compileTrainingProgram(
        *ctx, config, 1, T, model.compileOptions(), model.padMultiple);
    if (failed(program))
      return 1;
    func::FuncOp forward = program->forward;
    std::vector<exec::ArgumentInfo> argInfo = exec::describeArguments(forward);
    if (!folder)
      params = exec::loadParametersFromFile(argInfo, initFrom);
    FailureOr<StepFunction> fn = StepFunction::get(forward);
    if (failed(fn))
      return 1;
    int logitsIndex = fn->resultIndex(Slot::Role::Output, "logits");

    Rng rng(seed);
    exec::Batch batch{exec::HostTensor::ids({1, T}),
                      exec::HostTensor::ids({1, T})};
    print(prompt);
    for (int64_t n = 0; n < maxNew; ++n) {
      size_t first = ids.size() > size_t(T) ? ids.size() - T : 0;
      int64_t len = int64_t(ids.size() - first);
      std::fill(batch.tokens.i32.begin(), batch.tokens.i32.end(), 0);
      std::copy(ids.begin() + first, ids.end(), batch.tokens.i32.begin());
      FailureOr<std::vector<exec::HostTensor>> out = exec::runFunction(
          forward, exec::bindArguments(argInfo, params, batch));
      if (failed(out))
        return 1;
      const float *row =
          (*out)[logitsIndex].data() + (len - 1) * config.vocabSize;
      int next =
          sampleToken({row, size_t(config.vocabSize)}, temperature, topK, rng);
      ids.push_back(next);
      print(tokenizer.tokenBytes(next));
    }
    print("\n");
  } catch (const FormatError &e) {
    fail(e.what());
  } catch (const TokenizerError &e) {
    fail(e.what());
  }
  return 0;
}

} // namespace gptc::cli
