//===- ProgramText.cpp - the text form of a kernel-level Program ----------===//
//
// What `gptc emit --stage=kernels` prints. The format is stable (tests and
// people read it):
//
//   // gptc kernel program
//   meta: batch=2 beta1=0.9 ... (every meta key, sorted)
//   arena: 179836928 bytes (171.51 MiB) = persistent 113018112 + temps 66818816
//   buffers: 468
//           id  role       dtype[shape]                  offset       bytes  name
//           %2  param    f32[50257x128]                   512    25731584  wte.weight
//          %55  temp     f32[2x64x4x32]             113608960       65536  %18 (view of %52)
//         %121  constant f32[]                       56530944           4  %0 = 1
//   func forward: 80 launches, 30 arguments, 2 results
//     arguments: %0 %1 ...
//     results: %30 %31
//       %47 = layernorm(%46, %4, %5) {epsilon=1e-05} : f32[2x64x128] @ models/gpt2.cpp:40:19
//       %52, %53, %54 = split(%51) {axis=2} : f32[2x64x128], f32[2x64x128], f32[2x64x128] @ ...
//       // %55 = view of %52 : f32[2x64x4x32]
//       %56 = transpose(%55) {permutation=[0,2,1,3]} : f32[2x4x64x32] @ ...
//       %46 = fused_elementwise(%42, %45) : f32[2x64x128] @ ...
//           body(r0, r1) { r2 = add r0, r1; yield r2 }
//   func update: ..., norm launches [0, 18)
//   kernels: ... (once the CUDA emitter filled Program::kernels)
//
// Launch lines: outputs = kernel(inputs) {attributes} : output types
// [=> device kernel<<<grid, block, shared bytes>>>] [@ file:line:col]; a
// fused body follows on the next line; a view is a comment where it is
// first read. The persistent part of the arena line is where the temps
// start (bound buffers sit below them, planMemory).
// Buffers are `%<id>` everywhere; the table names them (the binding of a
// bound buffer, else the SSA name of the value in the fused-stage IR).
// Attributes are sorted by name; floats print as the shortest decimal that
// reads back to the same float (or double, where the value is no float).
//
//===----------------------------------------------------------------------===//

#include "gptc/Runtime/Program.h"

#include <charconv>
#include <cstring>
#include <cstdio>
#include <sstream>

namespace gptc::rt {

namespace {

std::string number(double v) {
  char buf[64];
  float f = float(v);
  std::to_chars_result r = double(f) == v
                               ? std::to_chars(buf, buf + sizeof(buf), f)
                               : std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string ids(const std::vector<int> &v, const char *sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? sep : "") + ("%" + std::to_string(v[i]));
  return s;
}

std::string pad(std::string s, size_t width, bool right = false) {
  if (s.size() >= width)
    return s;
  return right ? std::string(width - s.size(), ' ') + s
               : s + std::string(width - s.size(), ' ');
}

/// " = [1, 2, 3]" for a small f32, bf16 or i32 constant, else its size.
std::string constantText(const Buffer &b) {
  int64_t n = b.numel();
  if (n > 8 || b.dtype == DType::F16 ||
      int64_t(b.init.size()) != n * dtypeBytes(b.dtype))
    return " (" + std::to_string(b.init.size()) + " bytes of data)";
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = 0;
    int64_t size = dtypeBytes(b.dtype);
    for (int64_t k = 0; k < size; ++k)
      bits |= uint32_t(b.init[i * size + k]) << (8 * k);
    if (b.dtype == DType::BF16)
      bits <<= 16; // bf16 is the high half of an f32
    std::string v;
    if (b.dtype == DType::I32) {
      v = std::to_string(int32_t(bits));
    } else {
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      v = number(f);
    }
    s += (i ? ", " : "") + v;
  }
  return b.shape.empty() ? " = " + s : " = [" + s + "]";
}

void printBody(const exec::ScalarProgram &body, std::ostream &os) {
  os << "        body(";
  for (int r = 0; r < body.numArgs; ++r)
    os << (r ? ", " : "") << 'r' << r;
  os << ") {";
  for (const exec::Instruction &in : body.code) {
    os << " r" << in.dst << " = " << exec::opcodeName(in.op);
    switch (in.op) {
    case exec::Opcode::Const:
      os << ' ' << number(in.value);
      break;
    case exec::Opcode::Neg:
    case exec::Opcode::Exp:
    case exec::Opcode::Log:
    case exec::Opcode::Tanh:
    case exec::Opcode::Sqrt:
    case exec::Opcode::Rsqrt:
    case exec::Opcode::Erf:
      os << " r" << in.a;
      break;
    default:
      os << " r" << in.a << ", r" << in.b;
    }
    os << ';';
  }
  os << " yield";
  for (size_t i = 0; i < body.results.size(); ++i)
    os << (i ? ", r" : " r") << body.results[i];
  os << " }\n";
}

void printLaunch(const Program &p, const Function &f, const Launch &l,
                 std::ostream &os, std::vector<bool> &viewShown) {
  // A view is no launch; say what it is where it is first read.
  for (int id : l.inputs)
    if (id >= 0 && size_t(id) < p.buffers.size() &&
        p.buffers[id].viewOf >= 0 && !viewShown[id]) {
      viewShown[id] = true;
      os << "    // %" << id << " = view of %" << p.buffers[id].viewOf << " : "
         << bufferType(p.buffers[id]) << '\n';
    }
  os << "    ";
  if (!l.outputs.empty())
    os << ids(l.outputs, ", ") << " = ";
  os << l.kernel << '(' << ids(l.inputs, ", ") << ')';
  // One sorted attribute list, whichever map holds each.
  std::map<std::string, std::string> attrs;
  for (const auto &[k, v] : l.ints)
    attrs[k] = std::to_string(v);
  for (const auto &[k, v] : l.floats)
    attrs[k] = number(v);
  for (const auto &[k, v] : l.lists) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i)
      s += (i ? "," : "") + std::to_string(v[i]);
    attrs[k] = s + "]";
  }
  for (const auto &[k, v] : l.floatLists) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i)
      s += (i ? "," : "") + number(v[i]);
    attrs[k] = s + "]";
  }
  if (!attrs.empty()) {
    os << " {";
    bool first = true;
    for (const auto &[k, v] : attrs) {
      os << (first ? "" : ", ") << k << '=' << v;
      first = false;
    }
    os << '}';
  }
  if (!l.outputs.empty()) {
    os << " : ";
    for (size_t i = 0; i < l.outputs.size(); ++i) {
      int id = l.outputs[i];
      os << (i ? ", " : "")
         << (id >= 0 && size_t(id) < p.buffers.size()
                 ? bufferType(p.buffers[id])
                 : "?");
    }
  }
  // `kernel<<<grid, block, shared>>>`, labelled when there are variants.
  auto kernel = [&](const LaunchVariant &v) {
    if (!v.label.empty() && !l.variants.empty())
      os << v.label << ": ";
    if (size_t(v.deviceKernel) < p.kernels.size())
      os << p.kernels[v.deviceKernel].name;
    else
      os << "kernel#" << v.deviceKernel;
    os << "<<<(" << v.grid[0] << ',' << v.grid[1] << ',' << v.grid[2]
       << "), (" << v.block[0] << ',' << v.block[1] << ',' << v.block[2]
       << "), " << v.sharedBytes << ">>>";
    if (v.cluster > 1)
      os << " in clusters of " << v.cluster;
  };
  if (l.deviceKernel >= 0) {
    os << " => ";
    kernel(ownVariant(l));
  }
  // (Launches count from 0 in their function, as the runtime's labels do.)
  if (l.stream == 1) {
    os << " [side stream, joined ";
    if (l.join >= int(f.launches.size()))
      os << "at the end]";
    else
      os << "before launch " << l.join << ']';
  }
  if (!l.loc.empty())
    os << " @ " << l.loc;
  os << '\n';
  for (const LaunchVariant &v : l.variants) {
    os << "      or ";
    kernel(v);
    os << '\n';
  }
  if (!l.body.code.empty() || !l.body.results.empty())
    printBody(l.body, os);
}

} // namespace

std::string bufferType(const Buffer &b) {
  std::string s = dtypeName(b.dtype);
  s += '[';
  for (size_t i = 0; i < b.shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(b.shape[i]);
  return s + ']';
}

std::string printProgram(const Program &p) {
  std::ostringstream os;
  os << "// gptc kernel program\n";
  os << "meta:";
  for (const auto &[k, v] : p.meta)
    os << ' ' << k << '=' << v;
  os << '\n';

  char mib[32];
  std::snprintf(mib, sizeof(mib), "%.2f", double(p.arenaBytes) / (1 << 20));
  os << "arena: " << p.arenaBytes << " bytes (" << mib << " MiB)";
  if (p.arenaBytes > 0) {
    // Persistent buffers sit below the temps (planMemory).
    int64_t persistentTop = 0;
    for (const Buffer &b : p.buffers)
      if (b.viewOf < 0 && b.role != Role::Temp && b.offset >= 0)
        persistentTop = std::max(persistentTop, (b.offset + b.bytes() + 255) /
                                                    256 * 256);
    os << " = persistent " << persistentTop << " + temps "
       << p.arenaBytes - persistentTop;
  }
  os << '\n';

  os << "buffers: " << p.buffers.size() << '\n';
  os << "  " << pad("id", 8, true) << "  " << pad("role", 11)
     << pad("dtype[shape]", 24) << pad("offset", 12, true)
     << pad("bytes", 12, true) << "  name\n";
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer &b = p.buffers[i];
    std::string name = b.binding.empty() ? b.name : b.binding;
    if (b.viewOf >= 0)
      name += " (view of %" + std::to_string(b.viewOf) + ")";
    if (b.role == Role::Constant)
      name += constantText(b);
    os << "  " << pad("%" + std::to_string(i), 8, true) << "  "
       << pad(roleName(b.role), 11) << pad(bufferType(b), 24) << ' '
       << pad(std::to_string(b.offset), 11, true)
       << pad(std::to_string(b.bytes()), 12, true) << "  " << name << '\n';
  }

  for (const Function &f : p.functions) {
    os << "func " << f.name << ": " << f.launches.size() << " launches, "
       << f.arguments.size() << " arguments, " << f.results.size()
       << " results";
    if (f.normLaunches >= 0)
      os << ", norm launches [0, " << f.normLaunches << ')';
    os << '\n';
    os << "  arguments: " << ids(f.arguments, " ") << '\n';
    os << "  results: " << ids(f.results, " ") << '\n';
    std::vector<bool> viewShown(p.buffers.size(), false);
    for (const Launch &l : f.launches)
      printLaunch(p, f, l, os, viewShown);
  }

  if (!p.kernels.empty()) {
    os << "kernels: " << p.kernels.size() << '\n';
    for (const DeviceKernel &k : p.kernels) {
      os << "  " << k.name << ": " << k.source.size() << " bytes of CUDA C++";
      if (!k.cubin.empty())
        os << ", cubin " << k.cubin.size() << " bytes for " << k.arch;
      if (k.scratchBytes)
        os << ", scratch " << k.scratchBytes << " bytes";
      os << '\n';
      for (const std::string &f : k.fuses)
        os << "    fuses " << f << '\n';
    }
  }
  return os.str();
}

} // namespace gptc::rt
