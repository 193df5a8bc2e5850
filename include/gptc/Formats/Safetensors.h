//===- Safetensors.h - Read and write .safetensors files --------*- C++ -*-===//
//
// The safetensors format (https://github.com/huggingface/safetensors):
//
//   u64 little-endian N | N bytes of JSON header | data region
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]}, offsets relative to the first byte after the header, plus an
// optional "__metadata__" string-to-string map. The tensors must cover the
// data region exactly: no overlaps, no holes, no trailing bytes.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_FORMATS_SAFETENSORS_H
#define GPTC_FORMATS_SAFETENSORS_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gptc {

enum class DType { F32, F16, BF16, F64, I32, I64, U16, U8 };

size_t dtypeSize(DType dtype);
/// The safetensors name: "F32", "F16", "BF16", ...
const char *dtypeName(DType dtype);

/// IEEE half and bfloat16 bit patterns to float (exact; NaN stays NaN).
float halfToFloat(uint16_t bits);
float bf16ToFloat(uint16_t bits);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  size_t offset; ///< from the start of the data region
  size_t nbytes;
  int64_t numel() const;
};

/// A whole safetensors file read into memory and validated.
class SafetensorsFile {
public:
  /// Reads and validates `path`; throws FormatError naming the file and,
  /// where it applies, the tensor.
  static SafetensorsFile open(const std::string &path);

  /// In data-region order.
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  /// nullptr if there is no tensor of that name.
  const TensorInfo *find(const std::string &name) const;
  /// The tensor's bytes. Aligned to its element size when the writer padded
  /// the header to 8 bytes as the reference writer does, not otherwise.
  const void *data(const TensorInfo &tensor) const;
  /// F32/F16/BF16/F64 converted to float; other dtypes throw FormatError.
  std::vector<float> toFloat(const TensorInfo &tensor) const;
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }
  const std::string &path() const { return path_; }

private:
  std::string path_;
  std::vector<uint8_t> bytes_; ///< the whole file
  size_t dataStart_ = 0;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> byName_;
  std::map<std::string, std::string> metadata_;
};

/// Collects tensors and writes them as one safetensors file.
class SafetensorsWriter {
public:
  /// Copies numel(shape) * dtypeSize(dtype) bytes from `data`. Throws
  /// std::invalid_argument for a repeated or reserved name or a bad shape.
  void add(std::string name, DType dtype, std::vector<int64_t> shape,
           const void *data);
  void setMetadata(std::string key, std::string value);
  /// Writes atomically (see AtomicFile). Tensors are laid out largest element
  /// size first, in add() order within a size, so every tensor is aligned to
  /// its element size; the header is padded with spaces to a multiple of 8.
  void write(const std::string &path) const;

private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
  std::unordered_set<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

} // namespace gptc

#endif // GPTC_FORMATS_SAFETENSORS_H
