//===- Flags.cpp - the training program's command line --------------------===//

#include "Flags.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace gptc::runtime {

void Flags::parse(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-')
      throw UsageError("unexpected argument '" + arg +
                       "' (flags are --name=value)");
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    size_t eq = body.find('=');
    std::string name = body.substr(0, eq);
    const Spec *spec = find(name);
    if (!spec)
      throw UsageError("unknown flag '" + arg + "' (--help lists them)");
    std::string value;
    if (eq != std::string::npos)
      value = body.substr(eq + 1);
    else if (spec->kind == Kind::Bool)
      value = "true";
    else if (i + 1 < argc)
      value = argv[++i];
    else
      throw UsageError("--" + name + " needs a value");
    given_[name] = value;
  }
}

std::vector<std::string> Flags::given() const {
  std::vector<std::string> names;
  for (const auto &[name, value] : given_)
    names.push_back(name);
  return names;
}

const Flags::Spec *Flags::find(const std::string &name) const {
  for (const Spec &s : specs_)
    if (s.name == name)
      return &s;
  return nullptr;
}

std::string Flags::text(const std::string &name,
                        const std::string &fallback) const {
  auto it = given_.find(name);
  return it == given_.end() ? fallback : it->second;
}

int64_t Flags::integer(const std::string &name, int64_t fallback) const {
  auto it = given_.find(name);
  if (it == given_.end())
    return fallback;
  const std::string &s = it->second;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    throw UsageError("--" + name + "='" + s + "' is not an integer");
  return value;
}

uint64_t Flags::unsignedInteger(const std::string &name,
                                uint64_t fallback) const {
  auto it = given_.find(name);
  if (it == given_.end())
    return fallback;
  const std::string &s = it->second;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    throw UsageError("--" + name + "='" + s +
                     "' is not a non-negative integer");
  return value;
}

double Flags::real(const std::string &name, double fallback) const {
  auto it = given_.find(name);
  if (it == given_.end())
    return fallback;
  const std::string &s = it->second;
  char *end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  if (s.empty() || *end)
    throw UsageError("--" + name + "='" + s + "' is not a number");
  return value;
}

bool Flags::boolean(const std::string &name) const {
  auto it = given_.find(name);
  if (it == given_.end())
    return false;
  const std::string &s = it->second;
  if (s == "true" || s == "1")
    return true;
  if (s == "false" || s == "0")
    return false;
  throw UsageError("--" + name + "='" + s + "' is not true or false");
}

std::string Flags::help() const {
  std::string out;
  for (const Spec &s : specs_) {
    if (s.help.empty())
      continue;
    std::string left = "  --" + s.name + (s.kind == Kind::Value ? "=X" : "");
    left.resize(std::max<size_t>(left.size() + 1, 24), ' ');
    out += left + s.help + "\n";
  }
  return out;
}

} // namespace gptc::runtime
