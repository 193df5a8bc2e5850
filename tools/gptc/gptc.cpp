//===- gptc.cpp - the gptc command-line driver ----------------------------===//
//
//   gptc emit --model=gpt2 --stage=graph     print IR after a stage
//   gptc eval --model=M --init-from=W --data=D --batch=B --seq=T
//   gptc train --model=M --data=D --steps=N ...   train (CPU or GPU)
//   gptc compile --model=M -o train               the training program
//   gptc sample --init-from=CKPT --prompt=TEXT    generate text
//   gptc tokenize IN.txt... -o OUT.bin            GPT-2 BPE token shards
//
//===----------------------------------------------------------------------===//

#include "Command.h"

#include "llvm/Support/InitLLVM.h"

#include <cstring>
#include <string>

// LLVM registers its own --stats when the command line is first parsed;
// `gptc emit --stats` means ours. Register LLVM's early and drop it.
namespace llvm {
void initStatisticOptions();
} // namespace llvm

using namespace gptc::cli;

namespace {
const char *kUsage = "usage: gptc <command> [options]\n"
                     "commands:\n"
                     "  compile   the training program (-o FILE) or its "
                     "memory report\n"
                     "  emit      print gptc's IR for a model after a stage\n"
                     "  eval      loss of a model on a batch of a token file\n"
                     "  train     train a model on a token file (CPU or GPU)\n"
                     "  sample    generate text from a checkpoint\n"
                     "  tokenize  text files to GPT-2 token shards\n"
                     "run 'gptc <command> --help' for its options\n";

struct CommandEntry {
  const char *name;
  int (*run)(int, char **);
};
const CommandEntry kCommands[] = {{"compile", runCompile},
                                  {"emit", runEmit},
                                  {"eval", runEval},
                                  {"train", runTrain},
                                  {"sample", runSample},
                                  {"tokenize", runTokenize}};
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::initStatisticOptions();
  if (llvm::cl::Option *stats = llvm::cl::getRegisteredOptions().lookup("stats"))
    stats->removeArgument();
  if (argc < 2 || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    llvm::outs() << kUsage;
    return argc < 2 ? 2 : 0;
  }
  for (const CommandEntry &cmd : kCommands) {
    if (std::strcmp(argv[1], cmd.name))
      continue;
    // "gptc emit" is the program name the subcommand's parser reports.
    std::string progName = std::string("gptc ") + cmd.name;
    argv[1] = progName.data();
    return cmd.run(argc - 1, argv + 1);
  }
  llvm::errs() << "gptc: error: unknown command '" << argv[1]
               << "' (commands: compile, emit, eval, train, "
               << "sample, tokenize)\n";
  return 2;
}
