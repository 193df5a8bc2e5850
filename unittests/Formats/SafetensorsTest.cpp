//===- SafetensorsTest.cpp - Tests for the safetensors reader/writer ------===//

#include "gptc/Formats/Safetensors.h"
#include "TestUtil.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

using namespace gptc;
using namespace gptc::test;

namespace {

using SafetensorsTest = TempDirTest;

/// A safetensors file from its parts: u64 header length, header, data.
std::string safetensorsBytes(const std::string &header,
                             const std::string &data = "") {
  return bytesOf(uint64_t(header.size())) + header + data;
}

template <typename T> std::vector<uint8_t> rawBytes(const std::vector<T> &v) {
  const auto *p = reinterpret_cast<const uint8_t *>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(T));
}

std::vector<uint8_t> rawBytes(const SafetensorsFile &file,
                              const TensorInfo &t) {
  const auto *p = static_cast<const uint8_t *>(file.data(t));
  return std::vector<uint8_t>(p, p + t.nbytes);
}

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3800};  // 1, -2, 0.5
  std::vector<uint16_t> bf16 = {0x3F80, 0x4049, 0xBF00}; // 1, 3.140625, -0.5
  std::vector<double> f64 = {0.1, -1e3};
  std::vector<int32_t> i32 = {-7, 2147483647};
  std::vector<int64_t> i64 = {-1, int64_t(1) << 40, 3};
  std::vector<uint16_t> u16 = {65535};
  std::vector<uint8_t> u8 = {1, 2, 3};
  float scalar = 42.0f;

  SafetensorsWriter writer;
  // Odd-sized small tensors first: the writer must still align the rest.
  writer.add("u8", DType::U8, {3}, u8.data());
  writer.add("f16", DType::F16, {3}, f16.data());
  writer.add("h.0.attn.c_attn.weight", DType::F32, {2, 3}, f32.data());
  writer.add("bf16", DType::BF16, {1, 3}, bf16.data());
  writer.add("f64", DType::F64, {2}, f64.data());
  writer.add("i32", DType::I32, {2}, i32.data());
  writer.add("i64", DType::I64, {3}, i64.data());
  writer.add("u16", DType::U16, {1}, u16.data());
  writer.add("scalar", DType::F32, {}, &scalar);
  writer.add("empty", DType::F32, {0, 3}, nullptr);
  writer.setMetadata("format", "pt");
  writer.setMetadata("step", "12");
  std::string path = pathOf("model.safetensors");
  writer.write(path);

  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{
                                 {"format", "pt"}, {"step", "12"}}));
  ASSERT_EQ(file.tensors().size(), 10u);

  const TensorInfo *w = file.find("h.0.attn.c_attn.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::F32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->numel(), 6);
  EXPECT_EQ(w->nbytes, 24u);
  EXPECT_EQ(file.toFloat(*w), f32);

  auto expectTensor = [&](const char *name, DType dtype,
                          std::vector<int64_t> shape,
                          std::vector<uint8_t> bytes) {
    SCOPED_TRACE(name);
    const TensorInfo *t = file.find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->name, name);
    EXPECT_EQ(t->dtype, dtype);
    EXPECT_EQ(t->shape, shape);
    EXPECT_EQ(rawBytes(file, *t), bytes);
    // Aligned to the element size, so the data can be used in place.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(file.data(*t)) % dtypeSize(dtype),
              0u);
  };
  expectTensor("u8", DType::U8, {3}, u8);
  expectTensor("f16", DType::F16, {3}, rawBytes(f16));
  expectTensor("bf16", DType::BF16, {1, 3}, rawBytes(bf16));
  expectTensor("f64", DType::F64, {2}, rawBytes(f64));
  expectTensor("i32", DType::I32, {2}, rawBytes(i32));
  expectTensor("i64", DType::I64, {3}, rawBytes(i64));
  expectTensor("u16", DType::U16, {1}, rawBytes(u16));
  expectTensor("scalar", DType::F32, {}, rawBytes(std::vector<float>{42}));
  expectTensor("empty", DType::F32, {0, 3}, {});
  EXPECT_EQ(file.find("scalar")->numel(), 1);
  EXPECT_EQ(file.find("empty")->numel(), 0);
  EXPECT_EQ(file.find("missing"), nullptr);

  EXPECT_EQ(file.toFloat(*file.find("f16")),
            (std::vector<float>{1.0f, -2.0f, 0.5f}));
  EXPECT_EQ(file.toFloat(*file.find("bf16")),
            (std::vector<float>{1.0f, 3.140625f, -0.5f}));
  EXPECT_EQ(file.toFloat(*file.find("f64")), (std::vector<float>{0.1f, -1e3f}));

  // tensors() is in data order: largest element size first, add() order
  // within a size.
  std::vector<std::string> order;
  size_t end = 0;
  for (const TensorInfo &t : file.tensors()) {
    order.push_back(t.name);
    EXPECT_EQ(t.offset, end) << t.name;
    end = t.offset + t.nbytes;
  }
  EXPECT_EQ(order, (std::vector<std::string>{
                       "f64", "i64", "h.0.attn.c_attn.weight", "i32", "scalar",
                       "empty", "f16", "bf16", "u16", "u8"}));
}

// Checks the bytes against the format description, independently of our
// reader: u64 length, space-padded JSON, offsets from the end of the header.
TEST_F(SafetensorsTest, WriterFollowsTheFormatByteForByte) {
  std::vector<float> a = {1.0f, 2.0f};
  std::vector<uint16_t> b = {7};
  SafetensorsWriter writer;
  writer.add("b", DType::U16, {1}, b.data());
  writer.add("a", DType::F32, {2}, a.data());
  writer.setMetadata("k", "v");
  std::string path = pathOf("w.safetensors");
  writer.write(path);

  std::string bytes = readBytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - 1 - last, 8u) << "more padding than needed";

  auto json = nlohmann::json::parse(header);
  EXPECT_EQ(json["__metadata__"], (nlohmann::json{{"k", "v"}}));
  EXPECT_EQ(json["a"]["dtype"], "F32");
  EXPECT_EQ(json["a"]["shape"], (nlohmann::json{2}));
  EXPECT_EQ(json["a"]["data_offsets"], (nlohmann::json{0, 8}));
  EXPECT_EQ(json["b"]["dtype"], "U16");
  EXPECT_EQ(json["b"]["data_offsets"], (nlohmann::json{8, 10}));
  std::string data = bytes.substr(8 + n);
  EXPECT_EQ(data, bytesOf(1.0f) + bytesOf(2.0f) + bytesOf(uint16_t(7)));
}

TEST_F(SafetensorsTest, ReadsHandBuiltFileWithoutPadding) {
  // As another writer might produce it: no padding, keys in any order,
  // an unknown field (ignored, as the reference reader does).
  std::string header =
      R"({"y":{"data_offsets":[4,6],"shape":[],"dtype":"BF16"},)"
      R"("x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})";
  std::string path = pathOf("hand.safetensors");
  writeBytes(path, safetensorsBytes(header,
                                    bytesOf(2.5f) + bytesOf(uint16_t(0xC040))));
  SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "x");
  EXPECT_EQ(file.tensors()[1].name, "y");
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_EQ(file.toFloat(file.tensors()[0]), std::vector<float>{2.5f});
  EXPECT_EQ(file.toFloat(file.tensors()[1]), std::vector<float>{-3.0f});
}

TEST_F(SafetensorsTest, EmptyWriterWritesValidFile) {
  std::string path = pathOf("empty.safetensors");
  SafetensorsWriter().write(path);
  EXPECT_EQ(readBytes(path), safetensorsBytes("{}      "));
  EXPECT_TRUE(SafetensorsFile::open(path).tensors().empty());
}

TEST(SafetensorsConversion, HalfBitPatterns) {
  EXPECT_EQ(halfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(halfToFloat(0xC000), -2.0f);
  EXPECT_EQ(halfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.0f);              // largest finite
  EXPECT_EQ(halfToFloat(0x0400), std::ldexp(1.0f, -14)); // smallest normal
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24)); // smallest subnormal
  EXPECT_EQ(halfToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(halfToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(halfToFloat(0x8000)));
  EXPECT_EQ(halfToFloat(0x8000), 0.0f);
  EXPECT_EQ(halfToFloat(0x7C00), INFINITY);
  EXPECT_EQ(halfToFloat(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(halfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(halfToFloat(0x7C01)));
}

TEST(SafetensorsConversion, Bf16BitPatterns) {
  EXPECT_EQ(bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(bf16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(bf16ToFloat(0x4049), 3.140625f);
  EXPECT_EQ(bf16ToFloat(0x7F7F), 0x1.FEp127f);            // largest finite
  EXPECT_EQ(bf16ToFloat(0x0001), std::ldexp(1.0f, -133)); // subnormal
  EXPECT_EQ(bf16ToFloat(0x7F80), INFINITY);
  EXPECT_EQ(bf16ToFloat(0xFF80), -INFINITY);
  EXPECT_TRUE(std::isnan(bf16ToFloat(0x7FC0)));
}

TEST_F(SafetensorsTest, ToFloatRejectsIntegerDtypes) {
  std::vector<int32_t> v = {1, 2};
  SafetensorsWriter writer;
  writer.add("ids", DType::I32, {2}, v.data());
  std::string path = pathOf("ints.safetensors");
  writer.write(path);
  SafetensorsFile file = SafetensorsFile::open(path);
  expectFormatError([&] { (void)file.toFloat(*file.find("ids")); }, path,
                    {"\"ids\"", "cannot convert I32 to float"});
}

TEST_F(SafetensorsTest, WriterRejectsBadTensors) {
  SafetensorsWriter writer;
  float x = 0;
  writer.add("x", DType::F32, {1}, &x);
  EXPECT_THROW(writer.add("x", DType::F32, {1}, &x), std::invalid_argument);
  EXPECT_THROW(writer.add("__metadata__", DType::F32, {1}, &x),
               std::invalid_argument);
  EXPECT_THROW(writer.add("neg", DType::F32, {-1}, &x), std::invalid_argument);
  EXPECT_THROW(writer.add("huge", DType::F32, {1LL << 62, 8}, &x),
               std::invalid_argument);
}

TEST_F(SafetensorsTest, WriteIntoMissingDirectoryLeavesNothing) {
  std::string path = pathOf("missing-dir/model.safetensors");
  expectFormatError([&] { SafetensorsWriter().write(path); }, path,
                    {"cannot create"});
  EXPECT_TRUE(listDir().empty());
}

//===----------------------------------------------------------------------===//
// Validation: each malformed file gets one line naming the file and problem.
//===----------------------------------------------------------------------===//

class SafetensorsErrorTest : public TempDirTest {
protected:
  /// Writes `bytes` and expects open() to fail with `words` in the message.
  void expectOpenError(const std::string &bytes,
                       std::initializer_list<std::string> words) {
    std::string path = pathOf("bad.safetensors");
    writeBytes(path, bytes);
    expectFormatError([&] { (void)SafetensorsFile::open(path); }, path, words);
  }
  /// A one-tensor header with the given entry body.
  void expectEntryError(const std::string &entry, const std::string &data,
                        std::initializer_list<std::string> words) {
    expectOpenError(safetensorsBytes(R"({"w":)" + entry + "}", data), words);
  }
};

TEST_F(SafetensorsErrorTest, MissingFile) {
  std::string path = pathOf("nope.safetensors");
  expectFormatError([&] { (void)SafetensorsFile::open(path); }, path,
                    {"cannot open", "No such file or directory"});
}

TEST_F(SafetensorsErrorTest, ShorterThanEightBytes) {
  expectOpenError("", {"0 bytes", "too short"});
  expectOpenError(std::string("\x02\0\0\0", 4), {"4 bytes", "too short"});
}

TEST_F(SafetensorsErrorTest, HeaderLengthLargerThanFile) {
  expectOpenError(bytesOf(uint64_t(100)) + "{}",
                  {"truncated: header length 100", "larger than the file (10 bytes)"});
  expectOpenError(bytesOf(~uint64_t(0)),
                  {"header length 18446744073709551615", "larger"});
}

TEST_F(SafetensorsErrorTest, HeaderNotJson) {
  expectOpenError(safetensorsBytes("{\"w\": nope}"),
                  {"header is not valid JSON", "column"});
  expectOpenError(safetensorsBytes("{\"w\": \"\xff\"}"),
                  {"header is not valid JSON", "UTF-8"});
}

TEST_F(SafetensorsErrorTest, HeaderNotObject) {
  expectOpenError(safetensorsBytes("[1, 2]"),
                  {"header is not a JSON object", "array"});
}

TEST_F(SafetensorsErrorTest, DuplicateTensorName) {
  expectOpenError(safetensorsBytes(
                      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                      R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                      "ab"),
                  {"\"w\"", "more than once"});
}

TEST_F(SafetensorsErrorTest, EntryNotObject) {
  expectEntryError("[1]", "", {"tensor \"w\"", "must be an object", "array"});
}

TEST_F(SafetensorsErrorTest, MissingFields) {
  expectEntryError(R"({"shape":[1],"data_offsets":[0,1]})", "a",
                   {"tensor \"w\"", "missing \"dtype\""});
  expectEntryError(R"({"dtype":"U8","data_offsets":[0,1]})", "a",
                   {"tensor \"w\"", "missing \"shape\""});
  expectEntryError(R"({"dtype":"U8","shape":[1]})", "a",
                   {"tensor \"w\"", "missing \"data_offsets\""});
}

TEST_F(SafetensorsErrorTest, WrongFieldTypes) {
  expectEntryError(R"({"dtype":4,"shape":[1],"data_offsets":[0,1]})", "a",
                   {"tensor \"w\"", "\"dtype\" must be a string"});
  expectEntryError(R"({"dtype":"U8","shape":"1","data_offsets":[0,1]})", "a",
                   {"tensor \"w\"", "\"shape\" must be an array"});
  expectEntryError(R"({"dtype":"U8","shape":[1.5],"data_offsets":[0,1]})", "a",
                   {"tensor \"w\"", "not a 64-bit integer", "1.5"});
  for (const char *offsets :
       {"[0]", "[0,1,2]", "[0,\"1\"]", "[-1,1]", "[0,1.0]", "{\"a\":1}"})
    expectEntryError(
        std::string(R"({"dtype":"U8","shape":[1],"data_offsets":)") + offsets +
            "}",
        "a", {"tensor \"w\"", "\"data_offsets\" must be"});
}

TEST_F(SafetensorsErrorTest, UnknownDtype) {
  expectEntryError(R"({"dtype":"Q4","shape":[1],"data_offsets":[0,1]})", "a",
                   {"tensor \"w\"", "unknown dtype \"Q4\""});
}

TEST_F(SafetensorsErrorTest, NegativeDimension) {
  expectEntryError(R"({"dtype":"U8","shape":[2,-3],"data_offsets":[0,1]})", "a",
                   {"tensor \"w\"", "negative dimension -3"});
}

TEST_F(SafetensorsErrorTest, EndBeforeBegin) {
  expectEntryError(R"({"dtype":"U8","shape":[0],"data_offsets":[4,2]})", "",
                   {"tensor \"w\"", "[4,2]", "end is before begin"});
}

TEST_F(SafetensorsErrorTest, SizeDisagreesWithShape) {
  expectEntryError(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,8]})",
                   std::string(8, '\0'),
                   {"tensor \"w\"", "hold 8 bytes", "F32 needs 16"});
  expectEntryError(
      R"({"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]})",
      std::string(8, '\0'), {"tensor \"w\"", "too large"});
}

TEST_F(SafetensorsErrorTest, OffsetsOutOfRange) {
  expectOpenError(
      safetensorsBytes(
          R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
          R"("b":{"dtype":"U8","shape":[2],"data_offsets":[1000,1002]}})",
          "ab"),
      {"tensor \"b\"", "[1000, 1002]", "out of range", "2 bytes"});
}

TEST_F(SafetensorsErrorTest, OverlappingTensors) {
  expectOpenError(safetensorsBytes(
                      R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                      "abcdef"),
                  {"\"a\" [0, 4]", "\"b\" [2, 6]", "overlap"});
}

TEST_F(SafetensorsErrorTest, HoleBetweenTensors) {
  expectOpenError(safetensorsBytes(
                      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                      R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                      "abcdef"),
                  {"bytes [2, 4)", "belong to no tensor", "\"b\""});
}

TEST_F(SafetensorsErrorTest, TruncatedData) {
  expectEntryError(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})",
                   std::string(10, '\0'),
                   {"truncated: header says 16 bytes of data, file has 10"});
}

TEST_F(SafetensorsErrorTest, TrailingBytes) {
  expectEntryError(R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})", "abc",
                   {"2 bytes after the last tensor"});
}

TEST_F(SafetensorsErrorTest, MetadataNotStrings) {
  expectOpenError(safetensorsBytes(R"({"__metadata__":{"step":12}})"),
                  {"\"__metadata__\"", "\"step\"", "must be a string"});
  expectOpenError(safetensorsBytes(R"({"__metadata__":[]})"),
                  {"\"__metadata__\" must be an object"});
}

} // namespace
