//===- Safetensors.cpp - Read and write .safetensors files ----------------===//

#include "gptc/Formats/Safetensors.h"
#include "ReadFile.h"
#include "gptc/Formats/AtomicFile.h"
#include "gptc/Formats/Error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <unordered_set>

// The header length and the tensor bytes are little-endian; we copy them
// straight into host integers and floats.
static_assert(std::endian::native == std::endian::little,
              "gptcFormats assumes a little-endian host");
static_assert(sizeof(size_t) == sizeof(uint64_t));

namespace gptc {

using json = nlohmann::json;

namespace {

struct DTypeDesc {
  const char *name;
  size_t size;
};
// Indexed by DType.
constexpr DTypeDesc kDTypes[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2},
                                 {"F64", 8}, {"I32", 4}, {"I64", 8},
                                 {"U16", 2}, {"U8", 1}};
constexpr size_t kNumDTypes = sizeof(kDTypes) / sizeof(kDTypes[0]);
static_assert(kNumDTypes == static_cast<size_t>(DType::U8) + 1);

const DTypeDesc &desc(DType dtype) {
  return kDTypes[static_cast<size_t>(dtype)];
}

std::optional<DType> parseDType(const std::string &name) {
  for (size_t i = 0; i < kNumDTypes; ++i)
    if (name == kDTypes[i].name)
      return static_cast<DType>(i);
  return std::nullopt;
}

/// numel(shape) * elemSize, or nullopt on overflow.
std::optional<size_t> byteSize(const std::vector<int64_t> &shape,
                               size_t elemSize) {
  size_t n = elemSize;
  for (int64_t dim : shape)
    if (__builtin_mul_overflow(n, static_cast<size_t>(dim), &n))
      return std::nullopt;
  return n;
}

/// A JSON string literal, so names with odd characters stay on one line.
std::string quote(const std::string &s) {
  return json(s).dump(-1, ' ', /*ensure_ascii=*/false,
                      json::error_handler_t::replace);
}

/// nlohmann's message without its "[json.exception.xxx.nnn] " prefix.
std::string jsonMessage(const json::exception &e) {
  std::string what = e.what();
  size_t close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
}

/// Parses the header, rejecting duplicate top-level keys (nlohmann would
/// silently keep the last one).
json parseHeader(const std::string &path, const uint8_t *text, size_t size) {
  std::optional<std::string> duplicate;
  std::unordered_set<std::string> seen;
  auto onEvent = [&](int depth, json::parse_event_t event, json &parsed) {
    if (event == json::parse_event_t::key && depth == 1 &&
        !seen.insert(parsed.get<std::string>()).second && !duplicate)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(text, text + size, onEvent);
  } catch (const json::parse_error &e) {
    throw FormatError(path + ": header is not valid JSON: " + jsonMessage(e));
  }
  if (!header.is_object())
    throw FormatError(path + ": header is not a JSON object (it is " +
                      std::string(header.type_name()) + ")");
  if (duplicate)
    throw FormatError(path + ": header names " + quote(*duplicate) +
                      " more than once");
  return header;
}

std::map<std::string, std::string> parseMetadata(const std::string &path,
                                                 const json &value) {
  if (!value.is_object())
    throw FormatError(path + ": \"__metadata__\" must be an object, not " +
                      std::string(value.type_name()));
  std::map<std::string, std::string> metadata;
  for (const auto &[key, v] : value.items()) {
    if (!v.is_string())
      throw FormatError(path + ": \"__metadata__\" value for " + quote(key) +
                        " must be a string, not " + v.type_name());
    metadata[key] = v.get<std::string>();
  }
  return metadata;
}

TensorInfo parseTensor(const std::string &path, const std::string &name,
                       const json &entry) {
  auto error = [&](const std::string &what) {
    return FormatError(path + ": tensor " + quote(name) + ": " + what);
  };
  if (!entry.is_object())
    throw error("entry must be an object, not " +
                std::string(entry.type_name()));
  for (const char *field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field))
      throw error(std::string("missing \"") + field + "\"");

  TensorInfo info;
  info.name = name;

  const json &dtype = entry["dtype"];
  if (!dtype.is_string())
    throw error("\"dtype\" must be a string, not " +
                std::string(dtype.type_name()));
  std::optional<DType> parsed = parseDType(dtype.get<std::string>());
  if (!parsed)
    throw error("unknown dtype " + dtype.dump() +
                " (expected F32, F16, BF16, F64, I32, I64, U16 or U8)");
  info.dtype = *parsed;

  const json &shape = entry["shape"];
  if (!shape.is_array())
    throw error("\"shape\" must be an array, not " +
                std::string(shape.type_name()));
  for (const json &dim : shape) {
    if (!dim.is_number_integer() ||
        (dim.is_number_unsigned() &&
         dim.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())))
      throw error("\"shape\" has a dimension that is not a 64-bit integer: " +
                  dim.dump());
    if (dim.get<int64_t>() < 0)
      throw error("negative dimension " + dim.dump() + " in shape " +
                  shape.dump());
    info.shape.push_back(dim.get<int64_t>());
  }

  const json &offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 ||
      !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
    throw error("\"data_offsets\" must be [begin, end] with non-negative "
                "integers, not " +
                offsets.dump());
  size_t begin = offsets[0].get<uint64_t>();
  size_t end = offsets[1].get<uint64_t>();
  if (end < begin)
    throw error("data_offsets " + offsets.dump() + ": end is before begin");
  info.offset = begin;
  info.nbytes = end - begin;

  std::optional<size_t> expected = byteSize(info.shape, desc(info.dtype).size);
  if (!expected)
    throw error("shape " + shape.dump() + " is too large");
  if (*expected != info.nbytes)
    throw error("data_offsets " + offsets.dump() + " hold " +
                std::to_string(info.nbytes) + " bytes but shape " +
                shape.dump() + " of " + desc(info.dtype).name + " needs " +
                std::to_string(*expected));
  return info;
}

std::string range(const TensorInfo &t) {
  return "[" + std::to_string(t.offset) + ", " +
         std::to_string(t.offset + t.nbytes) + "]";
}

/// Sorts the tensors into data order and checks that they tile the data
/// region exactly, as the reference implementation requires (no overlaps,
/// no holes that could hide other content, nothing after the last tensor).
void checkLayout(const std::string &path, std::vector<TensorInfo> &tensors,
                 size_t dataSize) {
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const TensorInfo &a, const TensorInfo &b) {
                     return std::pair(a.offset, a.nbytes) <
                            std::pair(b.offset, b.nbytes);
                   });
  size_t covered = 0;
  const TensorInfo *previous = nullptr;
  for (const TensorInfo &t : tensors) {
    if (t.offset < covered)
      throw FormatError(path + ": tensors " + quote(previous->name) + " " +
                        range(*previous) + " and " + quote(t.name) + " " +
                        range(t) + " overlap");
    if (t.offset > covered && t.offset + t.nbytes > dataSize)
      throw FormatError(path + ": tensor " + quote(t.name) + ": data_offsets " +
                        range(t) + " are out of range: the data region has " +
                        std::to_string(dataSize) + " bytes");
    if (t.offset > covered)
      throw FormatError(path + ": bytes [" + std::to_string(covered) + ", " +
                        std::to_string(t.offset) +
                        ") of the data region belong to no tensor (a hole "
                        "before tensor " +
                        quote(t.name) + ")");
    covered = t.offset + t.nbytes;
    previous = &t;
  }
  if (covered > dataSize)
    throw FormatError(path + ": truncated: header says " +
                      std::to_string(covered) + " bytes of data, file has " +
                      std::to_string(dataSize));
  if (covered < dataSize)
    throw FormatError(path + ": " + std::to_string(dataSize - covered) +
                      " bytes after the last tensor belong to no tensor");
}

} // namespace

size_t dtypeSize(DType dtype) { return desc(dtype).size; }
const char *dtypeName(DType dtype) { return desc(dtype).name; }

float halfToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) // infinity or NaN (payload kept)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  // Rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) |
                              (mantissa << 13));
}

float bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(uint32_t(bits) << 16);
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t dim : shape)
    n *= dim;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string &path) {
  SafetensorsFile file;
  file.path_ = path;
  file.bytes_ = readWholeFile(path);
  const std::vector<uint8_t> &bytes = file.bytes_;

  if (bytes.size() < 8)
    throw FormatError(path + ": file is " + std::to_string(bytes.size()) +
                      " bytes, too short for a safetensors file (its header "
                      "length alone takes 8)");
  uint64_t headerSize;
  std::memcpy(&headerSize, bytes.data(), 8);
  if (headerSize > bytes.size() - 8)
    throw FormatError(path + ": truncated: header length " +
                      std::to_string(headerSize) +
                      " is larger than the file (" +
                      std::to_string(bytes.size()) + " bytes)");
  file.dataStart_ = 8 + headerSize;

  json header = parseHeader(path, bytes.data() + 8, headerSize);
  for (const auto &[key, value] : header.items()) {
    if (key == "__metadata__")
      file.metadata_ = parseMetadata(path, value);
    else
      file.tensors_.push_back(parseTensor(path, key, value));
  }
  checkLayout(path, file.tensors_, bytes.size() - file.dataStart_);
  for (size_t i = 0; i < file.tensors_.size(); ++i)
    file.byName_[file.tensors_[i].name] = i;
  return file;
}

const TensorInfo *SafetensorsFile::find(const std::string &name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &tensors_[it->second];
}

const void *SafetensorsFile::data(const TensorInfo &tensor) const {
  return bytes_.data() + dataStart_ + tensor.offset;
}

std::vector<float> SafetensorsFile::toFloat(const TensorInfo &tensor) const {
  const auto *bytes = static_cast<const uint8_t *>(data(tensor));
  size_t n = tensor.nbytes / dtypeSize(tensor.dtype);
  std::vector<float> out(n);
  // memcpy per element: the data need not be aligned.
  auto convert = [&](auto element, auto decode) {
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&element, bytes + i * sizeof(element), sizeof(element));
      out[i] = decode(element);
    }
  };
  switch (tensor.dtype) {
  case DType::F32:
    convert(float(), [](float f) { return f; });
    break;
  case DType::F16:
    convert(uint16_t(), halfToFloat);
    break;
  case DType::BF16:
    convert(uint16_t(), bf16ToFloat);
    break;
  case DType::F64:
    convert(double(), [](double d) { return static_cast<float>(d); });
    break;
  default:
    throw FormatError(path_ + ": tensor " + quote(tensor.name) +
                      ": cannot convert " + dtypeName(tensor.dtype) +
                      " to float");
  }
  return out;
}

void SafetensorsWriter::add(std::string name, DType dtype,
                            std::vector<int64_t> shape, const void *data) {
  if (name == "__metadata__")
    throw std::invalid_argument(
        "safetensors: \"__metadata__\" is reserved and cannot name a tensor");
  if (names_.count(name))
    throw std::invalid_argument("safetensors: duplicate tensor name " +
                                quote(name));
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; }))
    throw std::invalid_argument("safetensors: tensor " + quote(name) +
                                " has a negative dimension");
  std::optional<size_t> nbytes = byteSize(shape, dtypeSize(dtype));
  if (!nbytes)
    throw std::invalid_argument("safetensors: tensor " + quote(name) +
                                " is too large");
  const auto *begin = static_cast<const uint8_t *>(data);
  names_.insert(name);
  entries_.push_back({std::move(name), dtype, std::move(shape),
                      std::vector<uint8_t>(begin, begin + *nbytes)});
}

void SafetensorsWriter::setMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

void SafetensorsWriter::write(const std::string &path) const {
  // Largest elements first keeps every tensor aligned to its element size,
  // given a data region that starts 8-aligned.
  std::vector<const Entry *> order;
  for (const Entry &e : entries_)
    order.push_back(&e);
  std::stable_sort(order.begin(), order.end(),
                   [](const Entry *a, const Entry *b) {
                     return dtypeSize(a->dtype) > dtypeSize(b->dtype);
                   });

  // ordered_json keeps the metadata first and tensors in data order, which
  // is what a person reading the header expects.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty())
    header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const Entry *e : order) {
    size_t end = offset + e->bytes.size();
    header[e->name] = {{"dtype", dtypeName(e->dtype)},
                       {"shape", e->shape},
                       {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception &e) {
    throw FormatError(path + ": cannot write the header: " + jsonMessage(e));
  }
  // Pad with spaces so the data region starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile file(path);
  uint64_t headerSize = text.size();
  file.write(&headerSize, sizeof(headerSize));
  file.write(text.data(), text.size());
  for (const Entry *e : order)
    file.write(e->bytes.data(), e->bytes.size());
  file.commit();
}

} // namespace gptc
