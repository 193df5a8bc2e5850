//===- TrainState.cpp - a run's options and its resumable state -----------===//

#include "gptc/Train/TrainState.h"

#include "gptc/Formats/Error.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gptc::train {

namespace {
const char *const kFormatKey = "gptc.train_state";
const char *const kFormatVersion = "1";

std::string exact(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  return buf;
}

/// Reads the metadata of one checkpoint, naming it in every error.
struct MetadataReader {
  const Checkpoint &ckpt;
  const std::string &folder;

  const std::string &text(const std::string &key) const {
    auto it = ckpt.metadata.find(key);
    if (it == ckpt.metadata.end())
      throw FormatError(folder + ": state.safetensors has no '" + key +
                        "' in its metadata");
    return it->second;
  }
  int64_t integer(const std::string &key) const {
    const std::string &s = text(key);
    int64_t value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size())
      throw FormatError(folder + ": metadata '" + key + "' = '" + s +
                        "' is not an integer");
    return value;
  }
};
} // namespace

Checkpoint toCheckpoint(const TrainState &state,
                        const models::GPT2Config &config,
                        const TrainOptions &opts) {
  Checkpoint ckpt{state.params, state.adamM, state.adamV, {}};
  auto &m = ckpt.metadata;
  m[kFormatKey] = kFormatVersion;
  m["model"] = config.name;
  m["n_layer"] = std::to_string(config.nLayer);
  m["n_head"] = std::to_string(config.nHead);
  m["n_embd"] = std::to_string(config.nEmbd);
  m["block_size"] = std::to_string(config.blockSize);
  m["vocab_size"] = std::to_string(config.vocabSize);

  m["step"] = std::to_string(state.step);
  m["adam_updates"] = std::to_string(state.updates);
  m["consecutive_skips"] = std::to_string(state.skips);
  char scale[32];
  std::snprintf(scale, sizeof(scale), "%.17g", state.lossScale);
  m["loss_scale"] = scale;
  m["loss_scale_good_steps"] = std::to_string(state.goodSteps);
  m["data_epoch"] = std::to_string(state.data.epoch);
  m["data_window"] = std::to_string(state.data.window);
  m["seed"] = std::to_string(opts.seed);

  // For the record: what the run was asked to do.
  m["batch"] = std::to_string(opts.batch);
  m["seq"] = std::to_string(opts.seq);
  m["grad_accum"] = std::to_string(opts.gradAccum);
  m["steps"] = std::to_string(opts.steps);
  m["lr"] = exact(opts.schedule.lr);
  m["min_lr"] = exact(opts.schedule.minLr);
  m["warmup"] = std::to_string(opts.schedule.warmup);
  m["lr_schedule"] = scheduleKindName(opts.schedule.kind);
  m["beta1"] = exact(opts.optimizer.beta1);
  m["beta2"] = exact(opts.optimizer.beta2);
  m["eps"] = exact(opts.optimizer.eps);
  m["weight_decay"] = exact(opts.optimizer.weightDecay);
  m["clip"] = exact(opts.optimizer.clip);
  m["shuffle"] = opts.shuffle ? "1" : "0";
  m["data"] = opts.data;
  m["val_data"] = opts.valData;
  return ckpt;
}

models::GPT2Config configOf(const Checkpoint &ckpt, const std::string &folder) {
  MetadataReader r{ckpt, folder};
  if (r.text(kFormatKey) != kFormatVersion)
    throw FormatError(folder + ": unsupported training-state version '" +
                      r.text(kFormatKey) + "' (expected " + kFormatVersion +
                      ")");
  models::GPT2Config c;
  c.name = r.text("model");
  c.nLayer = r.integer("n_layer");
  c.nHead = r.integer("n_head");
  c.nEmbd = r.integer("n_embd");
  c.blockSize = r.integer("block_size");
  c.vocabSize = r.integer("vocab_size");
  return c;
}

TrainState fromCheckpoint(Checkpoint ckpt, const std::string &folder,
                          const models::GPT2Config &config,
                          const TrainOptions &opts) {
  models::GPT2Config saved = configOf(ckpt, folder);
  MetadataReader r{ckpt, folder};
  std::string diffs;
  auto compare = [&](const char *key, int64_t had, int64_t want) {
    if (had != want)
      diffs += std::string(diffs.empty() ? "" : ", ") + key + "=" +
               std::to_string(had) + " (this run: " + std::to_string(want) +
               ")";
  };
  compare("n_layer", saved.nLayer, config.nLayer);
  compare("n_head", saved.nHead, config.nHead);
  compare("n_embd", saved.nEmbd, config.nEmbd);
  compare("block_size", saved.blockSize, config.blockSize);
  compare("vocab_size", saved.vocabSize, config.vocabSize);
  compare("batch", r.integer("batch"), opts.batch);
  compare("seq", r.integer("seq"), opts.seq);
  if (!diffs.empty())
    throw FormatError(folder +
                      ": checkpoint is for another configuration: " + diffs);

  TrainState state;
  state.step = r.integer("step");
  state.updates = r.integer("adam_updates");
  state.skips = r.integer("consecutive_skips");
  // Absent from checkpoints written before fp16 loss scaling: scale 1.
  if (ckpt.metadata.count("loss_scale")) {
    state.lossScale = std::strtod(ckpt.metadata["loss_scale"].c_str(), nullptr);
    state.goodSteps = r.integer("loss_scale_good_steps");
    if (!(state.lossScale > 0.0) || !std::isfinite(state.lossScale))
      throw FormatError(folder + ": loss_scale must be a positive number");
  }
  state.data = {r.integer("data_epoch"), r.integer("data_window")};
  state.params = std::move(ckpt.params);
  state.adamM = std::move(ckpt.adamM);
  state.adamV = std::move(ckpt.adamV);
  return state;
}

} // namespace gptc::train
