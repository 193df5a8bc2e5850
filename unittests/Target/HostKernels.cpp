//===- HostKernels.cpp - generated CUDA kernels compiled for the CPU ------===//

#include "HostKernels.h"

#include "gptc/Target/CUDA/EmitCUDA.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace gptc::test {

namespace {

struct EmbeddedHeader {
  const char *name, *text;
};
/// The CUDA built-ins the kernels use, on the host, and types.cuh's
/// replacement: emulation/*.h, embedded by EmbedKernels.cmake.
#include "Emulation.inc" // kEmulationParts[]

/// The emulation's parts joined in the order they build on each other.
std::string emulation() {
  std::string all;
  for (const char *part :
       {"threads.h", "builtins.h", "wgmma.h", "mbarrier.h", "tma.h"}) {
    const EmbeddedHeader *h = nullptr;
    for (const EmbeddedHeader &e : kEmulationParts)
      if (std::string(e.name) == part)
        h = &e;
    if (!h)
      throw std::logic_error(std::string("no embedded emulation part ") + part);
    all += h->text;
  }
  return all;
}

/// A declaration's type and its declarators' names and bounds (what
/// follows `__shared__ ` up to its `;`): `T a[2], b` is T with {a, [2]}
/// and {b, ""}.
struct Declaration {
  std::string type;
  std::vector<std::pair<std::string, std::string>> declarators;
};
Declaration parseDeclaration(const std::string &decl) {
  Declaration d;
  int depth = 0;
  for (size_t i = 0, piece = 0; i <= decl.size(); ++i) {
    char c = i < decl.size() ? decl[i] : ',';
    if (c == '<' || c == '[' || c == '(')
      ++depth;
    else if (c == '>' || c == ']' || c == ')')
      --depth;
    else if (c == ',' && depth == 0) {
      // The declarator: its name, the last identifier before any bounds.
      const std::string p = decl.substr(piece, i - piece);
      const size_t bounds = std::min(p.find('['), p.size());
      const size_t e = p.find_last_not_of(" \t", bounds - 1) + 1;
      const size_t b = p.find_last_not_of("abcdefghijklmnopqrstuvwxyz"
                                          "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_",
                                          e - 1) +
                       1;
      if (d.declarators.empty())
        d.type = p.substr(0, b);
      d.declarators.push_back({p.substr(b, e - b), p.substr(bounds)});
      piece = i + 1;
    }
  }
  return d;
}

/// The names a declaration (what follows `__shared__ ` up to its `;`)
/// declares: `T a[2], b` has a and b.
std::vector<std::string> declaredNames(const std::string &decl) {
  std::vector<std::string> names;
  for (const auto &[name, bounds] : parseDeclaration(decl).declarators)
    names.push_back(name);
  return names;
}

/// A kernel source with its memory made known to the race checker, on the
/// same lines. Each `__shared__ T a[2];` becomes the running block's copy
/// of a static: `struct alignas(16) a_cta { T v[2]; }; static a_cta
/// a_ctas[emu::kMaxCtas]; auto &a = a_ctas[emu::cta].v;
/// emu::race::declare(&a, sizeof a, "a");`, where it is declared (a copy
/// for each block of a cluster, as each block of a GPU has its own); each
/// module-scope `__device__ T x[n];` (scratch) is declared when the
/// library loads. (Only declarations that start a line.) The dynamic
/// shared memory, `extern __shared__ T a[];`, becomes `T *a`, the running
/// block's row of `static T a_ctas[kMaxCtas][n]`: each copy at least
/// `dynamicBytes` (the most the kernel's launches ask for) and a multiple
/// of 1,024 bytes, so that a swizzled tile lies alike in each; declared as
/// that many bytes. (mapa reaches the dynamic copies only.)
std::string declareMemory(const std::string &source, uint32_t dynamicBytes) {
  std::string out;
  size_t done = 0;
  for (size_t line = 0; line < source.size();) {
    size_t next = source.find('\n', line);
    next = next == std::string::npos ? source.size() : next + 1;
    size_t at = source.find_first_not_of(" \t", line);
    if (at == std::string::npos)
      break;
    bool shared = source.compare(at, 11, "__shared__ ") == 0;
    bool device = source.compare(at, 11, "__device__ ") == 0;
    bool dynamic = source.compare(at, 18, "extern __shared__ ") == 0;
    size_t end = source.find(';', at);
    line = next;
    if (dynamic && end != std::string::npos) {
      std::string decl = source.substr(at + 18, end - at - 18);
      std::string name = declaredNames(decl).front();
      std::string type = decl.substr(0, decl.rfind(name));
      std::string bytes = std::to_string(dynamicBytes);
      const std::string ctas = name + "_ctas";
      out += source.substr(done, at - done) + "alignas(16) static " + type +
             ctas + "[emu::kMaxCtas][(" + bytes + " + sizeof(" + type +
             ") + 1023) / 1024 * 1024 / sizeof(" + type + ")]; " + type +
             "*const " + name + " = " + ctas + "[emu::ctaShared(" + ctas +
             ", sizeof " + ctas + "[0])]; emu::race::declare(" + name + ", " +
             bytes + ", \"" + name + "\");";
      done = line = end + 1;
      continue;
    }
    if (!(shared || device) || end == std::string::npos)
      continue;
    std::string decl = source.substr(at + 11, end - at - 11);
    if (device && (decl.find('(') != std::string::npos ||
                   decl.find('{') != std::string::npos))
      continue; // a function
    std::string declares;
    if (shared) {
      const Declaration d = parseDeclaration(decl);
      for (const auto &[name, bounds] : d.declarators)
        declares += "struct alignas(16) " + name + "_cta { " + d.type + "v" +
                    bounds + "; }; static " + name + "_cta " + name +
                    "_ctas[emu::kMaxCtas]; auto &" + name + " = " + name +
                    "_ctas[emu::cta].v; emu::race::declare(&" + name +
                    ", sizeof " + name + ", \"" + name + "\"); ";
    } else {
      declares = "__device__ " + decl + ";";
      for (const std::string &name : declaredNames(decl))
        declares += " static const bool declared_" + name +
                    " = (emu::race::declareScratch(&" + name + ", sizeof " +
                    name + ", \"" + name + "\"), true);";
    }
    out += source.substr(done, at - done) + declares;
    done = line = end + 1;
  }
  return out + source.substr(done);
}

std::string dims(const uint32_t (&d)[3]) {
  return std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " +
         std::to_string(d[2]);
}

} // namespace

HostKernels::HostKernels(const rt::Program &p, HostTarget target) {
  std::string src = std::string("#define GPTC_WGMMA ") +
                    (target == HostTarget::Sm90a ? "1" : "0") + "\n" +
                    emulation();
  const std::string types = cuda::kernelTemplate("types.cuh");
  const std::vector<uint32_t> dynamicBytes = rt::dynamicSharedBytes(p);
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    std::string s = p.kernels[k].source;
    size_t at = s.find(types);
    if (at == std::string::npos) {
      error = "kernel " + p.kernels[k].name + " has no emitted source";
      return;
    }
    s.replace(at, types.size(), "");
    // Unnamed, so that its names are this library's alone: g++ would make
    // a template's static locals (the dynamic shared memory) unique across
    // the process, and a later library with the same kernel would use an
    // earlier one's, which its race checker never declared.
    src += "namespace { namespace k" + std::to_string(k) + " {\n" +
           declareMemory(s, dynamicBytes[k]) + "} }\n";
  }
  // The GEMM-epilogue fallbacks, which no launch names: call_NAME(args,
  // grid x, grid y, cluster) with 1-D blocks of rt::gemmFallbackThreads,
  // in clusters of `cluster` along x.
  src += "static const unsigned long long *fallbackArgs;\n";
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const std::string &name = p.kernels[k].name;
    if (int n = rt::gemmFallbackArgCount(name)) {
      const std::string threads = std::to_string(rt::gemmFallbackThreads(name));
      src += "static void body_" + name + "() {\n  k" + std::to_string(k) +
             "::" + name + "(";
      for (int j = 0; j < n; ++j)
        src += (j ? ", " : "") + std::string("AnyArg{fallbackArgs[") +
               std::to_string(j) + "]}";
      src += ");\n}\n";
      src += "extern \"C\" void call_" + name +
             "(const unsigned long long *a, unsigned gx, unsigned gy,"
             " unsigned cluster, unsigned lastFirst) {\n"
             "  fallbackArgs = a;\n  emu::body = body_" +
             name +
             ";\n"
             "  emu::race::launchOutputs(nullptr, nullptr, 0);\n"
             "  gridSize = {gx, gy, 1};\n  blockSize = {" +
             threads +
             ", 1, 1};\n"
             "  blockIndex.z = 0;\n"
             "  for (blockIndex.y = 0; blockIndex.y < gy; ++blockIndex.y)\n"
             "  for (unsigned x = 0; x < gx; x += cluster) {\n"
             "    blockIndex.x = lastFirst ? gx - cluster - x : x;\n"
             "    emu::runCluster(" +
             threads + ", int(cluster));\n  }\n}\n";
    }
  }
  // Per launch: its body (the kernel call) and a runner over the blocks,
  // run_F_I for launch I of function F, in clusters of `cluster` along x.
  src += "static void **args;\n";
  for (size_t f = 0; f < p.functions.size(); ++f)
    for (size_t i = 0; i < p.functions[f].launches.size(); ++i) {
      const rt::Launch &l = p.functions[f].launches[i];
      if (l.deviceKernel < 0)
        continue; // cuBLASLt
      size_t n = l.inputs.size() + l.outputs.size();
      std::string id = std::to_string(f) + "_" + std::to_string(i);
      src += "static void body_" + id + "() {\n  k" +
             std::to_string(l.deviceKernel) +
             "::" + p.kernels[l.deviceKernel].name + "(";
      for (size_t j = 0; j < n; ++j)
        src += (j ? ", " : "") + std::string("AnyPointer{args[") +
               std::to_string(j) + "]}";
      src += ");\n}\n";
      std::string bytes;
      for (int b : l.outputs)
        bytes += std::to_string(p.buffers.at(b).bytes()) + ", ";
      src += "static const long long bytes_" + id + "[] = {" + bytes + "0};\n";
      src += "extern \"C\" void run_" + id +
             "(void **a, unsigned cluster) {\n  args = a;\n"
             "  if (cluster == 0)\n    cluster = " +
             std::to_string(l.cluster) +
             ";\n"
             "  emu::body = body_" +
             id +
             ";\n"
             "  emu::race::launchOutputs(a + " +
             std::to_string(l.inputs.size()) + ", bytes_" + id + ", " +
             std::to_string(l.outputs.size()) +
             ");\n"
             "  gridSize = {" +
             dims(l.grid) +
             "};\n"
             "  blockSize = {" +
             dims(l.block) +
             "};\n"
             "  for (blockIndex.z = 0; blockIndex.z < gridSize.z; "
             "++blockIndex.z)\n"
             "  for (blockIndex.y = 0; blockIndex.y < gridSize.y; "
             "++blockIndex.y)\n"
             "  for (blockIndex.x = 0; blockIndex.x < gridSize.x;"
             " blockIndex.x += cluster)\n"
             "    emu::runCluster(blockSize.x, int(cluster));\n}\n";
    }
  char tmpl[] = "/tmp/gptc-host-kernels-XXXXXX";
  if (!mkdtemp(tmpl)) {
    error = "cannot create a temporary directory";
    return;
  }
  dir = tmpl;
  std::ofstream(dir + "/kernels.cpp") << src;
  // -fsanitize=thread only instruments (the race checker implements the
  // hooks); linking without it keeps ThreadSanitizer's runtime out.
  std::string cxx = GPTC_HOST_CXX;
  std::string cmd = cxx +
                    " -std=c++17 -O1 -ffp-contract=off -fPIC -fsanitize=thread"
                    " -c -o " + dir + "/kernels.o " + dir + "/kernels.cpp 2> " +
                    dir + "/errors.txt && " + cxx + " -shared -o " + dir +
                    "/kernels.so " + dir + "/kernels.o 2>> " + dir +
                    "/errors.txt";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(dir + "/errors.txt");
    error = std::string(std::istreambuf_iterator<char>(in), {});
    return;
  }
  handle = dlopen((dir + "/kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    error = dlerror();
}

HostKernels::~HostKernels() {
  if (handle)
    dlclose(handle);
  if (!dir.empty())
    std::filesystem::remove_all(dir);
}

void *HostKernels::symbol(const std::string &name) const {
  void *fn = handle ? dlsym(handle, name.c_str()) : nullptr;
  if (!fn)
    throw std::runtime_error("no host kernel runner " + name);
  return fn;
}

void HostKernels::run(size_t function, size_t launch,
                      std::vector<void *> pointers, unsigned cluster) {
  auto fn = reinterpret_cast<void (*)(void **, unsigned)>(
      symbol("run_" + std::to_string(function) + "_" + std::to_string(launch)));
  fn(pointers.data(), cluster);
  throwOnRaces();
}

void HostKernels::call(const std::string &name, std::vector<uint64_t> args,
                       unsigned gx, unsigned gy, unsigned cluster,
                       bool lastFirst) {
  if (cluster == 0 || gx % cluster)
    throw std::invalid_argument("a grid of " + std::to_string(gx) +
                                " blocks in clusters of " +
                                std::to_string(cluster));
  auto fn =
      reinterpret_cast<void (*)(const uint64_t *, unsigned, unsigned, unsigned,
                                unsigned)>(symbol("call_" + name));
  fn(args.data(), gx, gy, cluster, lastFirst);
  throwOnRaces();
}

uint64_t HostKernels::tensorMap(const void *base,
                                const rt::WgmmaOperandMap &map) {
  auto encode = reinterpret_cast<int (*)(
      void *, const void *, uint64_t, uint64_t, uint64_t, unsigned, unsigned)>(
      symbol("gptcEmuEncodeTensorMap"));
  MapBytes &m = maps.emplace_back();
  if (encode(&m, base, uint64_t(map.inner), uint64_t(map.outer),
             uint64_t(map.inner) * 2, 64, map.boxRows) != 0)
    throw std::invalid_argument("a tensor map the driver would refuse");
  return reinterpret_cast<uint64_t>(&m);
}

void HostKernels::throwOnRaces() {
  auto take = reinterpret_cast<int (*)(char *, int)>(symbol("gptcEmuTakeRaces"));
  char first[512];
  if (int n = take(first, sizeof(first)))
    throw std::runtime_error(std::string(first) + " (" + std::to_string(n) +
                             " race" + (n > 1 ? "s" : "") + " in all)");
}

cuda::AttentionForward hostForward(cuda::AttentionForward chosen,
                                   HostTarget target) {
  using Fwd = cuda::AttentionForward;
  const bool wide = chosen == Fwd::Mma128 || chosen == Fwd::Wgmma128;
  const bool wgmma =
      cuda::attentionAlgorithmNeedsSm90a(cuda::attentionAlgorithmLabel(chosen));
  if (target == HostTarget::Sm90a && !wgmma)
    return wide ? Fwd::Wgmma128 : Fwd::Wgmma;
  if (target == HostTarget::Sm80 && wgmma)
    return wide ? Fwd::Mma128 : Fwd::Mma;
  return chosen;
}

cuda::EmitOptions withBackward(cuda::EmitOptions opts,
                               AttentionBackward backward) {
  opts.attentionBackward = backward;
  return opts;
}

rt::Program &emitForHost(rt::Program &p, HostTarget target,
                         AttentionBackward backward) {
  return emitForHost(p, target, withBackward({}, backward));
}

rt::Program &emitForHost(rt::Program &p, HostTarget target,
                         cuda::EmitOptions opts) {
  opts.attentionForward = hostForward(opts.attentionForward, target);
  cuda::emitCUDA(p, target == HostTarget::Sm90a ? "sm_90a" : "sm_80", opts);
  return p;
}

namespace {

class HostKernelBackend : public rt::Backend {
public:
  explicit HostKernelBackend(HostTarget target) : target_(target) {}
  std::string name() const override { return "host-compiled CUDA"; }

  void load(const rt::Program &p) override {
    p_ = &p;
    kernels_ = std::make_unique<HostKernels>(p, target_);
    if (!kernels_->ok())
      throw rt::DeviceError("the kernels do not compile for the host: " +
                            kernels_->error.substr(0, 2000));
    size_t bytes = (size_t(p.arenaBytes) + 255) / 256 * 256;
    arena_.reset(static_cast<uint8_t *>(std::aligned_alloc(256, bytes ? bytes : 256)));
    std::memset(arena_.get(), 0, bytes);
    for (size_t i = 0; i < p.buffers.size(); ++i) {
      const rt::Buffer &b = p.buffers[i];
      if (b.role == rt::Role::Constant && b.viewOf < 0)
        std::memcpy(at(int(i)), b.init.data(), b.init.size());
    }
    gemms_ = rt::makeCpuBackend();
    gemms_->load(p);
  }

  void upload(int buffer, const void *host) override {
    std::memcpy(at(buffer), host, size_t(p_->buffers.at(buffer).bytes()));
  }
  void download(int buffer, void *host) override {
    std::memcpy(host, at(buffer), size_t(p_->buffers.at(buffer).bytes()));
  }

  void run(const rt::Function &f, size_t begin, size_t end) override {
    const size_t function = size_t(&f - p_->functions.data());
    for (size_t i = begin; i < end && i < f.launches.size(); ++i) {
      const rt::Launch &l = f.launches[i];
      if (l.deviceKernel >= 0) {
        std::vector<void *> pointers;
        for (int id : l.inputs)
          pointers.push_back(at(id));
        for (int id : l.outputs)
          pointers.push_back(at(id));
        try {
          kernels_->run(function, i, std::move(pointers));
        } catch (const std::runtime_error &e) {
          throw rt::DeviceError(f.name + " launch " + std::to_string(i) +
                                ": " + e.what());
        }
      } else if (rt::isGemm(l.kernel)) {
        for (int id : l.inputs)
          gemms_->upload(id, at(id));
        gemms_->run(f, i, i + 1);
        for (int id : l.outputs)
          gemms_->download(id, at(id));
      } else {
        throw rt::DeviceError(f.name + " launch " + std::to_string(i) + ": " +
                              l.kernel + " has no kernel");
      }
    }
  }

  void synchronize() override {}

private:
  uint8_t *at(int id) const {
    int base = id;
    while (p_->buffers.at(base).viewOf >= 0)
      base = p_->buffers[base].viewOf;
    return arena_.get() + p_->buffers[base].offset;
  }

  struct Free {
    void operator()(uint8_t *p) const { std::free(p); }
  };
  HostTarget target_;
  const rt::Program *p_ = nullptr;
  std::unique_ptr<HostKernels> kernels_;
  std::unique_ptr<uint8_t[], Free> arena_;
  std::unique_ptr<rt::Backend> gemms_;
};

} // namespace

std::unique_ptr<rt::Backend> makeHostKernelBackend(HostTarget target) {
  return std::make_unique<HostKernelBackend>(target);
}

} // namespace gptc::test
