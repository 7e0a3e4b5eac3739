#include "hotloop/interop/safetensors.h"

#include "hotloop/core/error.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

namespace hotloop::interop {
namespace {

using ::hotloop::testing::TempDir;
using ::testing::HasSubstr;

// A safetensors file from its parts: the header text as given (unpadded,
// unless the text has its own spaces), then `data`.
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string write(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("model.safetensors");
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The bytes of `values` as stored (little-endian, the host's order here).
template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string out;
  for (const T v : values) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  return out;
}

TEST(Safetensors, EveryOneOfTheTenDtypesRoundTripsExactly) {
  TempDir dir;
  NamedTensors tensors;
  tensors.add("f64", at::tensor({1.0 / 3, -2.5e300, 0.0}, at::kDouble));
  tensors.add("f32", at::arange(12, at::kFloat).view({3, 4}).div(7));
  tensors.add("f16", at::tensor({0.5, -65504.0, 1e-3}).to(at::kHalf));
  tensors.add("bf16", at::tensor({1.0, -3.0e38, 0.1}).to(at::kBFloat16));
  tensors.add("i64", at::tensor({INT64_MIN, int64_t{0}, INT64_MAX}));
  tensors.add("i32", at::tensor({INT32_MIN, 7, INT32_MAX}, at::kInt));
  tensors.add("i16", at::tensor({-32768, 1, 32767}, at::kShort));
  tensors.add("i8", at::tensor({-128, 0, 127}, at::kChar));
  tensors.add("u8", at::tensor({0, 128, 255}, at::kByte));
  tensors.add("bool", at::tensor({1, 0, 1}).to(at::kBool));
  // A view that is not contiguous, a scalar and an empty tensor.
  tensors.add("transposed", at::arange(6, at::kFloat).view({2, 3}).t());
  tensors.add("scalar", at::scalar_tensor(4.25, at::kFloat));
  tensors.add("empty", at::empty({0, 5}, at::kFloat));
  tensors.metadata = {{"format", "pt"}, {"model", "{\"n\": 1}"}};
  const std::string path = dir.file("all.safetensors");
  save_safetensors(path, tensors);

  const SafetensorsFile file(path);
  EXPECT_EQ(file.metadata(), tensors.metadata);
  ASSERT_EQ(file.entries().size(), tensors.size());
  for (const auto& [name, expected] : tensors.tensors) {
    const at::Tensor got = file.tensor(name);
    EXPECT_EQ(got.scalar_type(), expected.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), expected.sizes()) << name;
    EXPECT_TRUE(got.is_contiguous()) << name;
    EXPECT_TRUE(at::equal(got, expected)) << name;
    // Laid out largest element first after a header padded to 8 bytes:
    // every tensor is read in place.
    EXPECT_TRUE(file.zero_copy(name)) << name;
  }
  EXPECT_EQ(file.entry("f32").shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(file.entry("f32").dtype, at::kFloat);
  // Same-sized elements keep the given order: f64, i64 first.
  EXPECT_EQ(file.entries().front().name, "f64");
  EXPECT_EQ(file.entries()[1].name, "i64");
  const NamedTensors all = file.read_all();
  EXPECT_EQ(all.size(), tensors.size());
  EXPECT_EQ(all.metadata, tensors.metadata);
}

TEST(Safetensors, ReadsTheFormatsOwnExampleByteForByte) {
  // The layout of the format's specification, written out by hand: an I32
  // [2, 2] tensor and metadata, the header padded with spaces as the
  // format allows.
  TempDir dir;
  const std::string header =
      R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("__metadata__":{"foo":"bar"}}   )";
  const std::string path =
      write(dir, file_bytes(header, raw<int32_t>({0, 1, -2, 3})));
  const SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("foo"), "bar");
  const at::Tensor t = file.tensor("test");
  EXPECT_TRUE(at::equal(t, at::tensor({0, 1, -2, 3}, at::kInt).view({2, 2})));
  // 8 + 92 bytes of header: the data starts 4-aligned, so no copy.
  EXPECT_EQ((8 + header.size()) % 4, 0u);
  EXPECT_TRUE(file.zero_copy("test"));
}

TEST(Safetensors, ATensorReadInPlaceSharesTheMappingAndNeverWritesTheFile) {
  TempDir dir;
  NamedTensors tensors;
  tensors.add("w", at::arange(16, at::kFloat));
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path, tensors);
  const std::string before = read_file(path);
  at::Tensor a;
  at::Tensor b;
  {
    const SafetensorsFile file(path);
    a = file.tensor("w");
    b = file.tensor("w");
  }
  // Both views of the same mapped bytes, alive after the file object.
  EXPECT_EQ(a.data_ptr(), b.data_ptr());
  a.mul_(2); // copy-on-write: the pages of this process
  EXPECT_TRUE(at::equal(b, at::arange(16, at::kFloat) * 2));
  EXPECT_EQ(read_file(path), before);
  EXPECT_TRUE(
      at::equal(SafetensorsFile(path).tensor("w"), at::arange(16, at::kFloat)));
}

TEST(Safetensors, MisalignedTensorsAreCopiedWithTheSameValues) {
  TempDir dir;
  // A U8 first, then an F32 at offset 1 of data that starts at 8 + 104.
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  const std::string path = write(
      dir, file_bytes(header, std::string(1, '\7') + raw<float>({1.5f, -2.f})));
  const SafetensorsFile file(path);
  EXPECT_TRUE(file.zero_copy("a"));
  EXPECT_FALSE(file.zero_copy("b"));
  EXPECT_TRUE(at::equal(file.tensor("b"), at::tensor({1.5f, -2.f})));
  EXPECT_EQ(file.tensor("a").item<uint8_t>(), 7);
}

TEST(Safetensors, EntriesAreOrderedByTheirBytesNotByTheHeader) {
  TempDir dir;
  const std::string header =
      R"({"z":{"dtype":"I8","shape":[1],"data_offsets":[1,2]},)"
      R"("y":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})";
  const SafetensorsFile file(write(dir, file_bytes(header, "\1\2")));
  ASSERT_EQ(file.entries().size(), 2u);
  EXPECT_EQ(file.entries()[0].name, "y");
  EXPECT_EQ(file.tensor("z").item<int8_t>(), 2);
}

// Each malformed file gets one line naming the file and, where there is
// one, the tensor.
void expect_refused(
    const std::string& bytes, const std::vector<std::string>& parts) {
  TempDir dir;
  const std::string path = write(dir, bytes);
  try {
    SafetensorsFile file(path);
    ADD_FAILURE() << "accepted: " << parts.front();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_THAT(what, HasSubstr(path + ": ")) << what;
    for (const std::string& part : parts) {
      EXPECT_THAT(what, HasSubstr(part));
    }
  }
}

const std::string kF32x2 =
    R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST(Safetensors, RefusesEachKindOfMalformedFileNamingFileAndTensor) {
  const std::string eight(8, '\0');
  expect_refused("abc", {"3 bytes, too short"});
  // The header length past the file, and past the format's limit.
  std::string past = file_bytes(kF32x2, eight);
  const uint64_t too_long = past.size();
  std::memcpy(past.data(), &too_long, 8);
  expect_refused(past, {"header length says", "only", "truncated"});
  std::string huge(8, '\0');
  const uint64_t n = 100'000'001;
  std::memcpy(huge.data(), &n, 8);
  expect_refused(huge + "{}", {"over the format's limit of 100 MB"});
  // The data cut short.
  expect_refused(
      file_bytes(kF32x2, std::string(4, '\0')),
      {"tensor 'w'", "[0, 8] run past the end", "truncated"});
  // Bytes after the last tensor.
  expect_refused(
      file_bytes(kF32x2, std::string(12, '\0')),
      {"the tensors hold 8 bytes of data, but 12 follow"});
  // Overlap, a gap, offsets backwards.
  expect_refused(
      file_bytes(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          eight),
      {"tensor 'b'", "overlap those of tensor 'a' [0, 8]"});
  expect_refused(
      file_bytes(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
      {"tensor 'a'", "leaving bytes 0 to 4 of the data in no tensor"});
  expect_refused(
      file_bytes(
          R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight),
      {"tensor 'a'", "[8, 0] end before they begin"});
  // Shape x dtype against the byte length.
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
      {"tensor 'w'", "F32 [3] is 12 bytes, but data_offsets [0, 8] hold 8"});
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],)"
          R"("data_offsets":[0,8]}})",
          eight),
      {"tensor 'w'", "too large"});
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F32","shape":[0,18446744073709551615],)"
          R"("data_offsets":[0,0]}})",
          ""),
      {"tensor 'w'", "too large"});
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
      {"tensor 'w'", "holds -2, not a size"});
  // Names and fields given twice.
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
          R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          eight),
      {"names 'w' twice"});
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],)"
          R"("data_offsets":[0,8]}})",
          eight),
      {"names 'dtype' twice"});
  // Dtypes.
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", eight),
      {"tensor 'w'", "unknown dtype 'F31'", "F64, F32, F16, BF16"});
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"U16","shape":[4],"data_offsets":[0,8]}})", eight),
      {"tensor 'w'", "dtype U16 is not one hotloop can hold"});
  // JSON: malformed, not UTF-8, not an object, fields missing or extra.
  expect_refused(
      file_bytes(R"({"w":{"dtype":"F32",}})", eight), {"not valid UTF-8 JSON"});
  expect_refused(file_bytes("{\"w\xff\":1}", ""), {"not valid UTF-8 JSON"});
  expect_refused(file_bytes("[1, 2]", ""), {"does not start with '{'"});
  expect_refused(
      file_bytes(R"({"w":{"dtype":"F32","shape":[2]}})", eight),
      {"tensor 'w'", "no 'data_offsets' field"});
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})",
          eight),
      {"tensor 'w'", "unexpected field 'x'"});
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight),
      {"tensor 'w'", "is not [begin, end]"});
  expect_refused(
      file_bytes(R"({"__metadata__":{"n":1}})", ""),
      {"__metadata__ 'n' is not a string"});
}

TEST(Safetensors, MessagesStayOneLineWhateverTheFileHolds) {
  // A name with an escaped newline, a dtype of control characters.
  expect_refused(
      file_bytes(
          R"({"a\nb":{"dtype":"\u0001","shape":[1],"data_offsets":[0,1]}})",
          "x"),
      {"tensor 'a?b': unknown dtype '?'"});
  // A shape nested 100,000 deep is named by its size, not written out.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_refused(
      file_bytes(
          R"({"w":{"dtype":"F32","shape":)" + deep +
              R"(,"data_offsets":[0,4]}})",
          "0000"),
      {"tensor 'w': shape a list of 1 holds a list of 1, not a size"});
}

TEST(Safetensors, ABoolTensorHoldsOnlyZerosAndOnes) {
  TempDir dir;
  const std::string path = write(
      dir,
      file_bytes(
          R"({"mask":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
          std::string("\1\0\2", 3)));
  const SafetensorsFile file(path);
  EXPECT_THROWS_WITH(
      Error,
      file.tensor("mask"),
      "tensor 'mask': BOOL byte 2 is 2, not 0 or 1");
  EXPECT_THROWS_WITH(Error, file.tensor("other"), "no tensor 'other'");
}

TEST(Safetensors, AMissingFileIsNamed) {
  EXPECT_THROWS_WITH(
      Error,
      SafetensorsFile("/nonexistent/model.safetensors"),
      "/nonexistent/model.safetensors: cannot open");
}

TEST(Safetensors, TheWriterRefusesWhatTheFormatCannotHold) {
  NamedTensors repeated;
  repeated.add("w", at::ones({1}));
  repeated.add("w", at::ones({1}));
  EXPECT_THROWS_WITH(Error, safetensors_bytes(repeated), "'w' is given twice");
  NamedTensors reserved;
  reserved.add("__metadata__", at::ones({1}));
  EXPECT_THROWS_WITH(Error, safetensors_bytes(reserved), "is reserved");
  NamedTensors complex;
  complex.add("c", at::ones({1}, at::kComplexFloat));
  EXPECT_THROWS_WITH(
      Error,
      safetensors_bytes(complex),
      "safetensors has no dtype for ComplexFloat");
  // Nothing is written when the tensors are refused.
  TempDir dir;
  EXPECT_THROW(save_safetensors(dir.file("x.safetensors"), complex), Error);
  EXPECT_FALSE(std::ifstream(dir.file("x.safetensors")).good());
}

TEST(Safetensors, TheHeaderIsPaddedToEightBytesWithSpaces) {
  NamedTensors tensors;
  tensors.add("a", at::ones({3}, at::kByte));
  tensors.metadata = {{"k", "v"}};
  const std::string bytes = safetensors_bytes(tensors);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 3);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(
      header.substr(0, header.find_last_not_of(' ') + 1),
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"U8","shape":[3],)"
      R"("data_offsets":[0,3]}})");
}

} // namespace
} // namespace hotloop::interop
