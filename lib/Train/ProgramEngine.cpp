//===- ProgramEngine.cpp - the training step as a kernel schedule ---------===//

#include "gptc/Train/ProgramEngine.h"

#include "gptc/Executor/Precision.h"
#include "gptc/Runtime/CudaBackend.h"
#include "gptc/Runtime/MemoryPlan.h"
#include "gptc/Support/Format.h"
#include "gptc/Train/Trainer.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string_view>

using gptc::exec::HostTensor;
using gptc::rt::Role;

namespace gptc::train {

namespace {

class ProgramEngine : public Engine {
public:
  ProgramEngine(const rt::Program &p, rt::Backend &backend)
      : p_(p), backend_(backend) {
    forward_ = function("forward");
    grads_ = function("grads");
    update_ = function("update");
    // Gradient accumulation on the device (the lowering adds it beside
    // grads); checked when a step has a second micro-batch, so a program
    // without it still trains with one.
    gradsAccumulate_ = p_.function("grads_accumulate");
    if (update_->normLaunches < 0 ||
        size_t(update_->normLaunches) > update_->launches.size())
      fail("its update function does not say which launches compute "
           "grad_norm (normLaunches)");
    for (const ParamSpec &spec : p_.params) {
      Slots s;
      s.param = floatBuffer(Role::Param, spec);
      s.grad = floatBuffer(Role::Grad, spec);
      s.adamM = floatBuffer(Role::AdamM, spec);
      s.adamV = floatBuffer(Role::AdamV, spec);
      s.copy = p_.find(Role::ParamCopy, spec.name);
      slots_.push_back(s);
    }
    checkCopies();
    tokens_ = buffer(Role::Input, "tokens", rt::DType::I32);
    targets_ = buffer(Role::Input, "targets", rt::DType::I32);
    lr_ = buffer(Role::Hyper, "lr", rt::DType::F32);
    step_ = buffer(Role::Hyper, "step", rt::DType::F32);
    gradScale_ = buffer(Role::Hyper, "grad_scale", rt::DType::F32);
    lossScale_ = p_.find(Role::Hyper, "loss_scale");
    if (lossScale_ >= 0)
      buffer(Role::Hyper, "loss_scale", rt::DType::F32); // checks its type
    for (const rt::Buffer &b : p_.buffers)
      if (b.role == Role::Hyper && b.binding != "lr" && b.binding != "step" &&
          b.binding != "grad_scale" && b.binding != "loss_scale")
        fail("it takes the hyper-parameter '" + b.binding +
             "', which the trainer does not know");
    forwardLoss_ = result(*forward_, Role::Output, "loss");
    gradsLoss_ = result(*grads_, Role::Output, "loss");
    gradNorm_ = result(*update_, Role::Output, "grad_norm");
    backend_.load(p_);
  }

  const std::vector<ParamSpec> &parameters() const override {
    return p_.params;
  }
  bool lossScaling() const override { return lossScale_ >= 0; }

  void setWeights(TensorMap params, TensorMap adamM, TensorMap adamV) override {
    for (size_t i = 0; i < slots_.size(); ++i) {
      const std::string &name = p_.params[i].name;
      backend_.upload(slots_[i].param, params.at(name).data());
      backend_.upload(slots_[i].adamM, adamM.at(name).data());
      backend_.upload(slots_[i].adamV, adamV.at(name).data());
      // The weights' copies follow the weights; from here on the update
      // writes them.
      if (int copy = slots_[i].copy; copy >= 0)
        backend_.upload(copy, rt::paramCopyBytes(p_.buffers[copy],
                                                 params.at(name).data(),
                                                 p_.params[i].shape)
                                  .data());
    }
  }

  void getWeights(TensorMap &params, TensorMap &adamM,
                  TensorMap &adamV) override {
    backend_.synchronize();
    for (size_t i = 0; i < slots_.size(); ++i) {
      const ParamSpec &spec = p_.params[i];
      params[spec.name] = download(slots_[i].param, spec.shape);
      adamM[spec.name] = download(slots_[i].adamM, spec.shape);
      adamV[spec.name] = download(slots_[i].adamV, spec.shape);
    }
  }

  void accumulate(const exec::Batch &batch, float lossScale,
                  bool first) override {
    // From the second micro-batch on, grads_accumulate computes the
    // gradients into temps and adds them to the Grad buffers: grad = sum +
    // g_k, the float32 sum += g_k of the executor to the bit. All on the
    // device: nothing crosses to the host but the loss, and that without
    // a wait (downloadLater), so the host queues the next micro-batch while
    // this one runs.
    if (!first)
      checkAccumulation();
    uploadBatch(batch);
    if (lossScale_ >= 0)
      backend_.upload(lossScale_, &lossScale);
    const rt::Function &f = first ? *grads_ : *gradsAccumulate_;
    backend_.run(f, 0, f.launches.size());
    pendingLosses_.emplace_back();
    backend_.downloadLater(gradsLoss_, &pendingLosses_.back());
  }

  std::vector<double> takeLosses() override {
    backend_.synchronize();
    std::vector<double> losses(pendingLosses_.begin(), pendingLosses_.end());
    pendingLosses_.clear();
    return losses;
  }

  double prepareUpdate(const UpdateHypers &h) override {
    backend_.upload(lr_, &h.lr);
    backend_.upload(step_, &h.step);
    backend_.upload(gradScale_, &h.gradScale);
    backend_.run(*update_, 0, size_t(update_->normLaunches));
    return scalar(gradNorm_);
  }

  void applyUpdate() override {
    backend_.run(*update_, size_t(update_->normLaunches),
                 update_->launches.size());
  }

  double loss(const exec::Batch &batch) override {
    uploadBatch(batch);
    backend_.run(*forward_, 0, forward_->launches.size());
    return scalar(forwardLoss_);
  }

private:
  struct Slots {
    int param, grad, adamM, adamV;
    int copy; ///< its low-precision copy (gpt-weight-copies), or -1
  };

  [[noreturn]] void fail(const std::string &why) const {
    auto it = p_.meta.find("model");
    throw TrainError("cannot train the program" +
                     (it == p_.meta.end() ? "" : " of " + it->second) + ": " +
                     why);
  }

  /// Every ParamCopy buffer is a 16-bit float copy of a parameter of the
  /// program, at least as large in each dimension: what setWeights can
  /// make.
  void checkCopies() const {
    for (const rt::Buffer &b : p_.buffers) {
      if (b.role != Role::ParamCopy || b.viewOf >= 0)
        continue;
      auto spec = std::find_if(
          p_.params.begin(), p_.params.end(),
          [&](const ParamSpec &s) { return s.name == b.binding; });
      std::string what = "its param_copy buffer '" + b.binding + "'";
      if (spec == p_.params.end())
        fail(what + " copies no parameter of the program");
      if (b.dtype != rt::DType::BF16 && b.dtype != rt::DType::F16)
        fail(what + " is " + rt::dtypeName(b.dtype) + ", expected bf16 or f16");
      bool fits = b.shape.size() == spec->shape.size();
      for (size_t d = 0; fits && d < b.shape.size(); ++d)
        fits = b.shape[d] >= spec->shape[d];
      if (!fits)
        fail(what + " has shape " + exec::shapeString(b.shape) +
             ", which cannot hold the parameter's " +
             exec::shapeString(spec->shape));
    }
  }

  /// grads_accumulate exists, returns what grads returns and reads every
  /// Grad buffer it writes (checked once).
  void checkAccumulation() {
    if (accumulationChecked_)
      return;
    if (!gradsAccumulate_)
      fail("it has no grads_accumulate function, so it cannot accumulate "
           "gradients (--grad-accum)");
    if (gradsAccumulate_->results != grads_->results)
      fail("its grads_accumulate function does not return what grads "
           "returns");
    for (const ParamSpec &spec : p_.params) {
      int grad = p_.gradient(spec.name);
      const std::vector<int> &args = gradsAccumulate_->arguments;
      if (std::find(args.begin(), args.end(), grad) == args.end())
        fail("its grads_accumulate function does not add to the gradient "
             "of '" + spec.name + "'");
    }
    accumulationChecked_ = true;
  }

  const rt::Function *function(const char *name) const {
    const rt::Function *f = p_.function(name);
    if (!f)
      fail(std::string("it has no ") + name + " function");
    return f;
  }

  int buffer(Role role, const std::string &binding, rt::DType dtype) const {
    int id = p_.find(role, binding);
    if (id < 0)
      fail(std::string("it has no ") + rt::roleName(role) + " buffer '" +
           binding + "'");
    if (p_.buffers[id].dtype != dtype)
      fail(std::string(rt::roleName(role)) + " buffer '" + binding + "' is " +
           rt::dtypeName(p_.buffers[id].dtype) + ", expected " +
           rt::dtypeName(dtype));
    return id;
  }

  /// The parameter's buffer of `role`, of its shape; a gradient may have
  /// more rows (a tied table's, which its GEMM writes padded:
  /// LowerToKernels.h), read through a view of its leading rows.
  int floatBuffer(Role role, const ParamSpec &spec) const {
    int id = buffer(role, spec.name, rt::DType::F32);
    const std::vector<int64_t> &shape = p_.buffers[id].shape;
    if (shape != spec.shape &&
        !(role == Role::Grad && exec::isLeadingRows(spec.shape, shape)))
      fail(std::string(rt::roleName(role)) + " buffer '" + spec.name +
           "' has shape " + exec::shapeString(p_.buffers[id].shape) +
           ", the parameter " + exec::shapeString(spec.shape));
    return id;
  }

  /// The f32 scalar that `f` returns with this role and binding.
  int result(const rt::Function &f, Role role, const char *binding) const {
    for (int id : f.results) {
      const rt::Buffer &b = p_.buffers[id];
      if (b.role == role && b.binding == binding) {
        if (b.dtype != rt::DType::F32 || b.numel() != 1)
          fail("its " + f.name + " function's " + binding +
               " is not an f32 scalar");
        return id;
      }
    }
    fail("its " + f.name + " function returns no " + binding);
  }

  void uploadBatch(const exec::Batch &batch) {
    for (auto [id, t] : {std::pair{tokens_, &batch.tokens},
                         std::pair{targets_, &batch.targets}}) {
      if (t->shape != p_.buffers[id].shape)
        fail("its " + p_.buffers[id].binding + " are " +
             exec::shapeString(p_.buffers[id].shape) + ", the batch " +
             exec::shapeString(t->shape));
      backend_.upload(id, t->i32.data());
    }
  }

  HostTensor download(int id, const std::vector<int64_t> &shape) {
    HostTensor t = HostTensor::floats(shape);
    backend_.download(id, t.data());
    return t;
  }

  /// A scalar result of the launches so far: one wait for the device (a
  /// download after synchronize() would be a second round trip).
  double scalar(int id) {
    float x = 0.0f;
    backend_.downloadLater(id, &x);
    backend_.synchronize();
    return x;
  }

  const rt::Program &p_;
  rt::Backend &backend_;
  const rt::Function *forward_, *grads_, *update_;
  const rt::Function *gradsAccumulate_; ///< null if absent
  std::vector<Slots> slots_; ///< per parameter, as p_.params
  int tokens_, targets_, lr_, step_, gradScale_, lossScale_;
  int forwardLoss_, gradsLoss_, gradNorm_;
  bool accumulationChecked_ = false;
  /// The queued micro-batches' losses, as downloadLater fills them (a
  /// deque: its elements stay where they are as it grows).
  std::deque<float> pendingLosses_;
};

} // namespace

std::unique_ptr<Engine> makeProgramEngine(const rt::Program &program,
                                          rt::Backend &backend) {
  return std::make_unique<ProgramEngine>(program, backend);
}

CompiledSettings compiledSettings(const rt::Program &program) {
  auto text = [&](const char *key) -> const std::string & {
    auto it = program.meta.find(key);
    if (it == program.meta.end())
      throw TrainError(std::string("the program records no '") + key +
                       "' in its meta");
    return it->second;
  };
  auto integer = [&](const char *key) {
    const std::string &s = text(key);
    int64_t value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size())
      throw TrainError(std::string("the program's meta '") + key + "' = '" + s +
                       "' is not an integer");
    return value;
  };
  auto real = [&](const char *key) {
    const std::string &s = text(key);
    char *end = nullptr;
    double value = std::strtod(s.c_str(), &end);
    if (s.empty() || *end)
      throw TrainError(std::string("the program's meta '") + key + "' = '" + s +
                       "' is not a number");
    return value;
  };
  CompiledSettings c;
  c.model.name = text("model");
  c.model.nLayer = integer("n_layer");
  c.model.nHead = integer("n_head");
  c.model.nEmbd = integer("n_embd");
  c.model.blockSize = integer("block_size");
  c.model.vocabSize = integer("vocab_size");
  c.batch = integer("batch");
  c.seq = integer("seq");
  c.padMultiple = integer("pad_multiple");
  c.optimizer.precision = text("precision");
  c.optimizer.beta1 = real("beta1");
  c.optimizer.beta2 = real("beta2");
  c.optimizer.eps = real("eps");
  c.optimizer.weightDecay = real("weight_decay");
  c.optimizer.clip = real("clip");
  // Programs compiled before gpt-recompute existed record none.
  if (auto it = program.meta.find("recompute");
      it != program.meta.end() && it->second != "none") {
    std::string_view list = it->second;
    while (!list.empty()) {
      size_t comma = list.find(',');
      c.optimizer.recompute.emplace_back(list.substr(0, comma));
      list = comma == std::string_view::npos ? "" : list.substr(comma + 1);
    }
  }
  return c;
}

double flopsPerToken(const models::GPT2Config &config, int64_t parameters,
                     int64_t seq) {
  return 6.0 * double(parameters) +
         6.0 * double(config.nLayer) * double(config.nEmbd) * double(seq);
}

void setMfu(TrainOptions &opts, rt::Backend &backend,
            const models::GPT2Config &config, int64_t parameters) {
  if (rt::CudaBackend *cuda = rt::asCudaBackend(&backend)) {
    opts.peakFlops = cuda->peakBf16Flops();
    opts.flopsPerToken = flopsPerToken(config, parameters, opts.seq);
  }
}

std::string programMemoryLine(const rt::Program &program, bool withKernels) {
  rt::MemoryPlanSummary plan = rt::summarizePlan(program);
  auto bound = [&](std::initializer_list<Role> roles) {
    int64_t bytes = 0;
    for (Role role : roles)
      if (auto it = plan.bound.find(role); it != plan.bound.end())
        bytes += it->second;
    return mebibytes(bytes);
  };
  auto it = program.meta.find("precision");
  // The CUDA kernels' module-scope scratch, beside the arena.
  int64_t scratchBytes = 0;
  for (const rt::DeviceKernel &k : program.kernels)
    scratchBytes += withKernels ? k.scratchBytes : 0;
  std::string scratch =
      scratchBytes ? " | kernel scratch " + mebibytes(scratchBytes) : "";
  std::string copies = plan.bound.count(Role::ParamCopy)
                           ? " | weight copies " + bound({Role::ParamCopy})
                           : "";
  return "memory (" + (it == program.meta.end() ? "?" : it->second) +
         "): params " + bound({Role::Param}) + " | grads " +
         bound({Role::Grad}) + " | adam m+v " +
         bound({Role::AdamM, Role::AdamV}) + copies + " | io " +
         bound({Role::Input, Role::Hyper, Role::Output, Role::Constant}) +
         " | temporaries " + mebibytes(plan.temps) + " | arena " +
         mebibytes(plan.arena) + scratch;
}

} // namespace gptc::train
