#include "hotloop/log/tensorboard.h"
#include "hotloop/core/error.h"
#include "hotloop/log/tensorboard_logger.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hotloop::log {
namespace {

namespace fs = std::filesystem;
using ::hotloop::testing::TempDir;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// An event-file reader written apart from the writer: a bit-at-a-time
// CRC-32C, TFRecord framing, and a generic protobuf wire-format parser.

uint32_t crc32c_bitwise(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
  }
  return ~crc;
}

uint32_t masked(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint64_t read_le(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  }
  return value;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The records of a TFRecord file; throws std::runtime_error naming the
// record that is torn (cut short) or fails a checksum.
std::vector<std::string> read_records(const std::string& path) {
  const std::string file = read_file(path);
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    const std::string where = "record " + std::to_string(records.size());
    if (file.size() - at < 12) {
      throw std::runtime_error(where + ": torn header");
    }
    const std::string header = file.substr(at, 8);
    if (masked(crc32c_bitwise(header)) != read_le(file, at + 8, 4)) {
      throw std::runtime_error(where + ": length CRC mismatch");
    }
    const uint64_t length = read_le(file, at, 8);
    if (file.size() - at - 12 < length + 4) {
      throw std::runtime_error(where + ": torn data");
    }
    std::string data = file.substr(at + 12, length);
    if (masked(crc32c_bitwise(data)) != read_le(file, at + 12 + length, 4)) {
      throw std::runtime_error(where + ": data CRC mismatch");
    }
    records.push_back(std::move(data));
    at += 12 + length + 4;
  }
  return records;
}

// A decoded protobuf message: each field number's values in order. Getters
// of absent fields give proto3 defaults (0, "", empty message).
class Message {
 public:
  Message() = default;
  explicit Message(const std::string& bytes) {
    size_t at = 0;
    while (at < bytes.size()) {
      const uint64_t key = varint(bytes, at);
      Field field;
      field.wire_type = static_cast<int>(key & 7);
      switch (field.wire_type) {
        case 0:
          field.bits = varint(bytes, at);
          break;
        case 1:
        case 5: {
          const int width = field.wire_type == 1 ? 8 : 4;
          need(bytes, at, width);
          field.bits = read_le(bytes, at, width);
          at += width;
          break;
        }
        case 2: {
          const uint64_t length = varint(bytes, at);
          need(bytes, at, length);
          field.bytes = bytes.substr(at, length);
          at += length;
          break;
        }
        default:
          throw std::runtime_error("unexpected wire type");
      }
      fields_[static_cast<int>(key >> 3)].push_back(field);
    }
  }

  size_t count(int number) const {
    const auto it = fields_.find(number);
    return it == fields_.end() ? 0 : it->second.size();
  }
  bool has(int number) const {
    return count(number) > 0;
  }
  uint64_t uint(int number, size_t i = 0) const {
    return has(number) ? get(number, i, 0).bits : 0;
  }
  int64_t int64(int number) const {
    return static_cast<int64_t>(uint(number));
  }
  double float64(int number) const {
    const uint64_t bits = has(number) ? get(number, 0, 1).bits : 0;
    double value = 0;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  float float32(int number) const {
    const auto bits =
        static_cast<uint32_t>(has(number) ? get(number, 0, 5).bits : 0);
    float value = 0;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  std::string bytes(int number, size_t i = 0) const {
    return has(number) ? get(number, i, 2).bytes : "";
  }
  Message message(int number, size_t i = 0) const {
    return Message(bytes(number, i));
  }
  std::vector<double> packed_float64(int number) const {
    const std::string raw = bytes(number);
    std::vector<double> values(raw.size() / 8);
    for (size_t k = 0; k < values.size(); ++k) {
      const uint64_t bits = read_le(raw, 8 * k, 8);
      std::memcpy(&values[k], &bits, sizeof bits);
    }
    return values;
  }

 private:
  struct Field {
    int wire_type = 0;
    uint64_t bits = 0;
    std::string bytes;
  };

  const Field& get(int number, size_t i, int wire_type) const {
    const Field& field = fields_.at(number).at(i);
    if (field.wire_type != wire_type) {
      throw std::runtime_error(
          "field " + std::to_string(number) + " has wire type " +
          std::to_string(field.wire_type));
    }
    return field;
  }
  static void need(const std::string& bytes, size_t at, uint64_t size) {
    if (bytes.size() - at < size) {
      throw std::runtime_error("truncated message");
    }
  }
  static uint64_t varint(const std::string& bytes, size_t& at) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(bytes, at, 1);
      const auto byte = static_cast<unsigned char>(bytes[at++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) {
        return value;
      }
    }
    throw std::runtime_error("varint too long");
  }

  std::map<int, std::vector<Field>> fields_;
};

// Field numbers, written out again from tensorboard's .proto files.
enum EventField { kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5 };
enum ValueField {
  kTag = 1,
  kSimpleValue = 2,
  kImage = 4,
  kHisto = 5,
  kTensor = 8,
  kMetadata = 9
};

std::vector<Message> read_events(const std::string& path) {
  std::vector<Message> events;
  for (const std::string& record : read_records(path)) {
    events.emplace_back(record);
  }
  return events;
}

// The one Summary.Value of a summary event.
Message value_of(const Message& event) {
  const Message summary = event.message(kSummary);
  EXPECT_EQ(summary.count(1), 1u);
  return summary.message(1);
}

// The events whose summary value has `tag`.
std::vector<Message> events_tagged(
    const std::string& path, const std::string& tag) {
  std::vector<Message> out;
  for (const Message& event : read_events(path)) {
    if (event.has(kSummary) && value_of(event).bytes(kTag) == tag) {
      out.push_back(event);
    }
  }
  return out;
}

std::string plugin_name(const Message& value) {
  return value.message(kMetadata).message(1).bytes(1);
}

std::string plugin_content(const Message& value) {
  return value.message(kMetadata).message(1).bytes(2);
}

// PNG -> its IHDR color type and 8-bit pixels [H, W, C], via libpng.
struct DecodedPng {
  uint32_t width = 0, height = 0;
  int color_type = -1;
  std::vector<uint8_t> pixels;
};

DecodedPng decode_png(const std::string& png) {
  DecodedPng out;
  // IHDR follows the 8-byte signature and the chunk's length and type.
  if (png.size() < 26 || png.compare(1, 3, "PNG") != 0) {
    throw std::runtime_error("not a PNG");
  }
  out.color_type = static_cast<unsigned char>(png[25]);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, png.data(), png.size())) {
    throw std::runtime_error(image.message);
  }
  out.width = image.width;
  out.height = image.height;
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr)) {
    throw std::runtime_error(image.message);
  }
  return out;
}

std::string host_name() {
  std::array<char, 256> name{};
  ::gethostname(name.data(), name.size() - 1);
  return name.data();
}

bool all_digits(const std::string& text) {
  return !text.empty() &&
         text.find_first_not_of("0123456789") == std::string::npos;
}

// ---------------------------------------------------------------------------
// Reference numbers from tests/reference/make_tensorboard_reference.py (Python
// PyTorch 1.13's own make_histogram over SummaryWriter's default bins,
// torchvision 0.14's make_grid, numpy for the image conversion).

struct Bucket {
  size_t index;
  double limit;
  double count;
};

struct HistogramReference {
  double min, max, num, sum, sum_squares;
  size_t buckets;
  double first_limit, second_limit, last_limit;
  std::vector<Bucket> non_empty;
};

at::Tensor spans_zero_values() {
  return at::tensor(
             {-1.5f, -0.25f, 0.0f, 0.0f, 0.3f, 1.0f, 1.0f, 2.5f, 7.0f},
             at::kFloat)
      .view({3, 3});
}

const HistogramReference kSpansZero = {
    -1.5,
    7.0,
    9,
    10.050000011920929,
    59.652500007152554,
    609,
    -0x1.9ffd3e2fa4c79p+0,
    -0x1.7a2c09fcc4585p+0,
    0x1.dddd64c352f61p+2,
    {{1, -0x1.7a2c09fcc4585p+0, 1},
     {20, -0x1.eeac55fd35aedp-3, 1},
     {297, 0x1.19799812dea11p-40, 2},
     {575, 0x1.49347b46143cfp-2, 1},
     {587, 0x1.024becdfa142bp+0, 2},
     {597, 0x1.4efa3760f36eap+1, 1},
     {608, 0x1.dddd64c352f61p+2, 1}}};

at::Tensor positive_int_values() {
  return at::tensor({1, 2, 2, 40, 3, 1000000}, at::kLong).view({3, 2});
}

const HistogramReference kPositiveInts = {
    1.0,
    1000000.0,
    6,
    1000048.0,
    1000000001618.0,
    147,
    0x1.d5a1519699908p-1,
    0x1.024becdfa142bp+0,
    0x1.eeddd5a77ee0cp+19,
    {{1, 0x1.024becdfa142bp+0, 1},
     {9, 0x1.14d740cf111e0p+1, 2},
     {13, 0x1.95529a0c59c0dp+1, 1},
     {40, 0x1.4c1c71b33324ap+5, 1},
     {146, 0x1.eeddd5a77ee0cp+19, 1}}};

void expect_histogram(const Message& histo, const HistogramReference& ref) {
  EXPECT_EQ(histo.float64(1), ref.min);
  EXPECT_EQ(histo.float64(2), ref.max);
  EXPECT_EQ(histo.float64(3), ref.num);
  EXPECT_DOUBLE_EQ(histo.float64(4), ref.sum);
  EXPECT_DOUBLE_EQ(histo.float64(5), ref.sum_squares);
  const std::vector<double> limits = histo.packed_float64(6);
  const std::vector<double> counts = histo.packed_float64(7);
  ASSERT_EQ(limits.size(), ref.buckets);
  ASSERT_EQ(counts.size(), ref.buckets);
  EXPECT_EQ(limits[0], ref.first_limit);
  EXPECT_EQ(limits[1], ref.second_limit);
  EXPECT_EQ(limits.back(), ref.last_limit);
  std::vector<double> expected(ref.buckets, 0);
  for (const Bucket& bucket : ref.non_empty) {
    expected[bucket.index] = bucket.count;
    EXPECT_EQ(limits[bucket.index], bucket.limit) << "bucket " << bucket.index;
  }
  EXPECT_EQ(counts, expected);
}

// make_grid(arange(30).reshape(5, 1, 2, 3) / 32, nrow=2, padding=1,
// pad_value=0.5) -> [3, 10, 9]: channel 0 (all three are equal).
const std::vector<float> kGrayGrid = {
    0.5, 0.5,     0.5,     0.5,     0.5, 0.5,     0.5,     0.5,     0.5,
    0.5, 0.0,     0.03125, 0.0625,  0.5, 0.1875,  0.21875, 0.25,    0.5,
    0.5, 0.09375, 0.125,   0.15625, 0.5, 0.28125, 0.3125,  0.34375, 0.5,
    0.5, 0.5,     0.5,     0.5,     0.5, 0.5,     0.5,     0.5,     0.5,
    0.5, 0.375,   0.40625, 0.4375,  0.5, 0.5625,  0.59375, 0.625,   0.5,
    0.5, 0.46875, 0.5,     0.53125, 0.5, 0.65625, 0.6875,  0.71875, 0.5,
    0.5, 0.5,     0.5,     0.5,     0.5, 0.5,     0.5,     0.5,     0.5,
    0.5, 0.75,    0.78125, 0.8125,  0.5, 0.5,     0.5,     0.5,     0.5,
    0.5, 0.84375, 0.875,   0.90625, 0.5, 0.5,     0.5,     0.5,     0.5,
    0.5, 0.5,     0.5,     0.5,     0.5, 0.5,     0.5,     0.5,     0.5};

// make_grid(((arange(36) * 7) % 256).uint8().reshape(3, 3, 2, 2), nrow=2,
// padding=1, pad_value=255) -> [3, 7, 7] uint8.
const std::vector<int> kRgbGrid = {
    255, 255, 255, 255, 255, 255, 255, 255, 0,   7,   255, 84,  91,  255, 255,
    14,  21,  255, 98,  105, 255, 255, 255, 255, 255, 255, 255, 255, 255, 168,
    175, 255, 255, 255, 255, 255, 182, 189, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 28,  35,  255,
    112, 119, 255, 255, 42,  49,  255, 126, 133, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 196, 203, 255, 255, 255, 255, 255, 210, 217, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 56,  63,  255, 140, 147, 255, 255, 70,  77,  255, 154, 161, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 224, 231, 255, 255, 255, 255, 255, 238,
    245, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255};

// [3, 4, 5] uint8 with pixel (c, y, x) = 40c + 10y + x.
at::Tensor test_pattern() {
  const at::Tensor c = at::arange(3, at::kLong).view({3, 1, 1});
  const at::Tensor y = at::arange(4, at::kLong).view({1, 4, 1});
  const at::Tensor x = at::arange(5, at::kLong).view({1, 1, 5});
  return (c * 40 + y * 10 + x).to(at::kByte);
}

// The run that `scripts/read_tensorboard.py LOGDIR --self-check` expects;
// keep the two in step.
void write_self_check_run(const std::string& dir) {
  SummaryWriter writer(dir);
  for (int step = 0; step < 5; ++step) {
    writer.add_scalar("train/loss", std::ldexp(1.0, -step), step);
  }
  writer.add_histogram("weights", spans_zero_values(), 1);
  writer.add_image("samples", test_pattern(), 2);
  writer.add_text("notes", "hello **TensorBoard** \u2713", 3);
  writer.add_hparams(
      {{"lr", 0.01}, {"batch_size", 64}, {"amp", true}, {"optimizer", "adam"}},
      {{"hparam/accuracy", 0.75}});
}

// ---------------------------------------------------------------------------

TEST(Crc32c, MatchesPublishedVectors) {
  const auto crc = [](const std::string& data) {
    return detail::crc32c(data.data(), data.size());
  };
  EXPECT_EQ(crc(""), 0u);
  EXPECT_EQ(crc("123456789"), 0xE3069283u);
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(crc(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
  }
  EXPECT_EQ(crc(ascending), 0x46DD794Eu);
}

TEST(Crc32c, MaskedValueIsRotatedRightBy15PlusTheTfRecordDelta) {
  const std::string digits = "123456789";
  EXPECT_EQ(detail::masked_crc32c(digits.data(), digits.size()), 0xC78AB0E5u);
  EXPECT_EQ(detail::masked_crc32c("", 0), 0xa282ead8u);
  // The header of a 24-byte record: uint64 24, little-endian.
  const std::string length = std::string("\x18", 1) + std::string(7, '\0');
  EXPECT_EQ(detail::masked_crc32c(length.data(), length.size()), 0x224B7FA3u);
}

TEST(SummaryWriter, OpensTheFileTensorBoardGlobsForAndWritesTheVersionFirst) {
  TempDir dir;
  const double before = std::floor(unix_time());
  std::string path;
  {
    SummaryWriter writer(dir.file("runs/a/b"));
    path = writer.path();
  }
  const double after = unix_time();

  const fs::path file(path);
  EXPECT_EQ(file.parent_path(), fs::path(dir.file("runs/a/b")));
  const std::string name = file.filename().string();
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  const std::string stamp = name.substr(prefix.size(), 10);
  ASSERT_TRUE(all_digits(stamp)) << name;
  EXPECT_GE(std::stod(stamp), before);
  EXPECT_LE(std::stod(stamp), after);
  const std::string middle =
      "." + host_name() + "." + std::to_string(::getpid()) + ".";
  ASSERT_EQ(name.compare(prefix.size() + 10, middle.size(), middle), 0) << name;
  EXPECT_TRUE(all_digits(name.substr(prefix.size() + 10 + middle.size())))
      << name;

  const std::vector<Message> events = read_events(path);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].bytes(kFileVersion), "brain.Event:2");
  EXPECT_FALSE(events[0].has(kStep));
  EXPECT_GE(events[0].float64(kWallTime), before);
  EXPECT_LE(events[0].float64(kWallTime), after);
}

TEST(SummaryWriter, WritersOfOneProcessGetDistinctFilesEndingInTheSuffix) {
  TempDir dir;
  SummaryWriter first(dir.path(), ".train");
  SummaryWriter second(dir.path(), ".train");
  EXPECT_NE(first.path(), second.path());
  EXPECT_THAT(first.path(), ::testing::EndsWith(".train"));
  EXPECT_TRUE(fs::is_regular_file(second.path()));
}

TEST(SummaryWriter, ScalarsReadBackWithTheirStepsAndValues) {
  TempDir dir;
  std::string path;
  const double now = unix_time();
  {
    SummaryWriter writer(dir.path());
    path = writer.path();
    writer.add_scalar("train/loss", 0.1, 3, 1234.5);
    writer.add_scalar("train/loss", 0.0, 0, 1235.0);
    writer.add_scalar("val/acc", -2.5e10, int64_t{1} << 40);
    writer.add_scalar("val/acc", 1.0 / 3, -1);
  }
  const std::vector<Message> loss = events_tagged(path, "train/loss");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_EQ(loss[0].float64(kWallTime), 1234.5);
  EXPECT_EQ(loss[0].int64(kStep), 3);
  EXPECT_EQ(value_of(loss[0]).float32(kSimpleValue), 0.1f);
  // A zero is still written: simple_value is a oneof member, and without it
  // TensorBoard would drop the point.
  EXPECT_TRUE(value_of(loss[1]).has(kSimpleValue));
  EXPECT_EQ(value_of(loss[1]).float32(kSimpleValue), 0.0f);
  EXPECT_EQ(loss[1].int64(kStep), 0);

  const std::vector<Message> acc = events_tagged(path, "val/acc");
  ASSERT_EQ(acc.size(), 2u);
  EXPECT_EQ(acc[0].int64(kStep), int64_t{1} << 40);
  EXPECT_EQ(value_of(acc[0]).float32(kSimpleValue), -2.5e10f);
  EXPECT_NEAR(acc[0].float64(kWallTime), now, 60);
  EXPECT_EQ(acc[1].int64(kStep), -1);
  EXPECT_EQ(
      value_of(acc[1]).float32(kSimpleValue), static_cast<float>(1.0 / 3));
}

TEST(SummaryWriter, HistogramMatchesPyTorchAddHistogram) {
  TempDir dir;
  std::string path;
  {
    SummaryWriter writer(dir.path());
    path = writer.path();
    writer.add_histogram("spans_zero", spans_zero_values(), 5, 10.0);
    writer.add_histogram("ints", positive_int_values(), 6);
  }
  const std::vector<Message> spans = events_tagged(path, "spans_zero");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].int64(kStep), 5);
  EXPECT_EQ(spans[0].float64(kWallTime), 10.0);
  {
    SCOPED_TRACE("spans zero");
    expect_histogram(value_of(spans[0]).message(kHisto), kSpansZero);
  }
  const std::vector<Message> ints = events_tagged(path, "ints");
  ASSERT_EQ(ints.size(), 1u);
  {
    SCOPED_TRACE("positive ints");
    expect_histogram(value_of(ints[0]).message(kHisto), kPositiveInts);
  }
}

TEST(SummaryWriter, HistogramRejectsEmptyNonFiniteOrComplexValuesNamingTheTag) {
  TempDir dir;
  SummaryWriter writer(dir.path());
  EXPECT_THROWS_WITH(
      Error,
      writer.add_histogram("w", at::empty({0}), 0),
      "add_histogram(\"w\"): the tensor is empty");
  EXPECT_THROWS_WITH(
      Error,
      writer.add_histogram("w", at::tensor({1.0, NAN}), 0),
      "add_histogram(\"w\"): values must be finite, got nan at flat index 1");
  EXPECT_THROWS_WITH(
      Error,
      writer.add_histogram("w", at::tensor({-1e30, 1e30}), 0),
      "add_histogram(\"w\"): no value lies within the buckets' range");
  EXPECT_THROWS_WITH(
      Error,
      writer.add_histogram("w", at::zeros({2}, at::kComplexFloat), 0),
      "add_histogram(\"w\"): values must be of a floating or integer dtype");
}

TEST(SummaryWriter, HistogramIfFiniteSkipsNonFiniteValuesAndWritesTheRest) {
  TempDir dir;
  std::string path;
  {
    SummaryWriter writer(dir.path());
    path = writer.path();
    EXPECT_FALSE(writer.add_histogram_if_finite(
        "overflowed", at::tensor({1.0f, INFINITY, 2.0f}), 1));
    EXPECT_FALSE(
        writer.add_histogram_if_finite("diverged", at::tensor({NAN}), 1));
    EXPECT_TRUE(
        writer.add_histogram_if_finite("spans_zero", spans_zero_values(), 2));
    // 100,000 values: every one counted in some bucket, min and max exact.
    at::manual_seed(0);
    const at::Tensor many = at::randn({1000, 100}).mul(3);
    EXPECT_TRUE(writer.add_histogram_if_finite("many", many, 3));
  }
  EXPECT_TRUE(events_tagged(path, "overflowed").empty());
  EXPECT_TRUE(events_tagged(path, "diverged").empty());
  const std::vector<Message> spans = events_tagged(path, "spans_zero");
  ASSERT_EQ(spans.size(), 1u);
  expect_histogram(value_of(spans[0]).message(kHisto), kSpansZero);
  const std::vector<Message> many = events_tagged(path, "many");
  ASSERT_EQ(many.size(), 1u);
  const Message histo = value_of(many[0]).message(kHisto);
  at::manual_seed(0);
  const at::Tensor values = at::randn({1000, 100}).mul(3);
  EXPECT_EQ(histo.float64(1), values.min().item<double>());
  EXPECT_EQ(histo.float64(2), values.max().item<double>());
  EXPECT_EQ(histo.float64(3), 100000.0);
  const std::vector<double> counts = histo.packed_float64(7);
  double total = 0;
  for (const double c : counts) {
    total += c;
  }
  EXPECT_EQ(total, 100000.0);
  EXPECT_EQ(counts.front(), 0.0); // the empty bucket carrying the left edge
}

// More values than make_histogram counts at once (2^24): every one counted,
// the extremes and sums over all, a non-finite one found in a later slice.
TEST(SummaryWriter, AHistogramOfMoreThanOneSliceCountsEveryValue) {
  TempDir dir;
  std::string path;
  const int64_t n = (int64_t{1} << 24) + 1000;
  at::manual_seed(0);
  at::Tensor values = at::randn({n});
  values[n - 10] = 100.0; // the largest, in the second slice
  {
    SummaryWriter writer(dir.path());
    path = writer.path();
    writer.add_histogram("many", values, 1);
    at::Tensor broken = values.clone();
    broken[(int64_t{1} << 24) + 5] = NAN;
    EXPECT_THROWS_WITH(
        Error,
        writer.add_histogram("broken", broken, 2),
        "add_histogram(\"broken\"): values must be finite, got nan at flat "
        "index 16777221");
  }
  const std::vector<Message> many = events_tagged(path, "many");
  ASSERT_EQ(many.size(), 1u);
  const Message histo = value_of(many[0]).message(kHisto);
  EXPECT_EQ(histo.float64(1), values.min().item<double>());
  EXPECT_EQ(histo.float64(2), 100.0);
  EXPECT_EQ(histo.float64(3), static_cast<double>(n));
  const double sum = values.to(at::kDouble).sum().item<double>();
  EXPECT_NEAR(histo.float64(4), sum, 1e-9 * n);
  double total = 0;
  for (const double c : histo.packed_float64(7)) {
    total += c;
  }
  EXPECT_EQ(total, static_cast<double>(n));
}

TEST(SummaryWriter, TextIsAStringTensorForTheTextPlugin) {
  TempDir dir;
  std::string path;
  const std::string text = "**bold** caf\u00e9\nline two";
  {
    SummaryWriter writer(dir.path());
    path = writer.path();
    writer.add_text("notes", text, 9);
  }
  const std::vector<Message> events = events_tagged(path, "notes/text_summary");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].int64(kStep), 9);
  const Message value = value_of(events[0]);
  EXPECT_EQ(plugin_name(value), "text");
  EXPECT_EQ(plugin_content(value), ""); // TextPluginData(version=0)
  const Message tensor = value.message(kTensor);
  EXPECT_EQ(tensor.uint(1), 7u); // DT_STRING
  const Message shape = tensor.message(2);
  ASSERT_EQ(shape.count(2), 1u);
  EXPECT_EQ(shape.message(2).int64(1), 1); // dim { size: 1 }
  ASSERT_EQ(tensor.count(8), 1u);
  EXPECT_EQ(tensor.bytes(8), text);
}

TEST(SummaryWriter, RgbImagePngDecodesToTheSamePixels) {
  TempDir dir;
  std::string path;
  const at::Tensor image = test_pattern(); // [3, 4, 5]
  {
    SummaryWriter writer(dir.path());
    path = writer.path();
    writer.add_image("samples", image, 2);
  }
  const std::vector<Message> events = events_tagged(path, "samples");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].int64(kStep), 2);
  const Message img = value_of(events[0]).message(kImage);
  EXPECT_EQ(img.uint(1), 4u); // height
  EXPECT_EQ(img.uint(2), 5u); // width
  EXPECT_EQ(img.uint(3), 3u); // colorspace RGB
  const DecodedPng png = decode_png(img.bytes(4));
  EXPECT_EQ(png.color_type, PNG_COLOR_TYPE_RGB);
  ASSERT_EQ(png.height, 4u);
  ASSERT_EQ(png.width, 5u);
  const at::Tensor hwc = image.permute({1, 2, 0}).contiguous();
  const std::vector<uint8_t> expected(
      hwc.data_ptr<uint8_t>(), hwc.data_ptr<uint8_t>() + hwc.numel());
  EXPECT_EQ(png.pixels, expected);
}

TEST(SummaryWriter, FloatImagesAreScaledClampedAndTruncatedLikePyTorch) {
  TempDir dir;
  std::string path;
  {
    SummaryWriter writer(dir.path());
    path = writer.path();
    // numpy: (x.astype(float32) * 255).clip(0, 255).astype(uint8).
    writer.add_image(
        "gray",
        at::tensor({0.0f, 0.5f, 0.999f, 1.0f, 1.2f, -0.1f, 0.2f, 0.7f})
            .view({1, 2, 4}),
        0);
    // float64 RGBA; NaN becomes 0, infinities clamp.
    writer.add_image(
        "rgba",
        at::tensor({0.5, NAN, INFINITY, -INFINITY}, at::kDouble)
            .view({4, 1, 1}),
        0);
  }
  const Message gray =
      value_of(events_tagged(path, "gray").at(0)).message(kImage);
  EXPECT_EQ(gray.uint(3), 1u); // colorspace gray
  const DecodedPng gray_png = decode_png(gray.bytes(4));
  EXPECT_EQ(gray_png.color_type, PNG_COLOR_TYPE_GRAY);
  EXPECT_EQ(
      gray_png.pixels,
      (std::vector<uint8_t>{0, 127, 254, 255, 255, 0, 51, 178}));

  const Message rgba =
      value_of(events_tagged(path, "rgba").at(0)).message(kImage);
  EXPECT_EQ(rgba.uint(3), 4u);
  const DecodedPng rgba_png = decode_png(rgba.bytes(4));
  EXPECT_EQ(rgba_png.color_type, PNG_COLOR_TYPE_RGBA);
  EXPECT_EQ(rgba_png.pixels, (std::vector<uint8_t>{127, 0, 255, 0}));
}

TEST(SummaryWriter, BadImageShapeOrDtypeNamesTheTagAndShape) {
  TempDir dir;
  SummaryWriter writer(dir.path());
  EXPECT_THROWS_WITH(
      Error,
      writer.add_image("bad", at::zeros({2, 4, 4}), 0),
      "add_image(\"bad\"): image must be [C, H, W] with C = 1, 3 or 4, got "
      "shape [2, 4, 4]");
  EXPECT_THROWS_WITH(
      Error,
      writer.add_image("flat", at::zeros({4, 4}), 0),
      "add_image(\"flat\"): image must be [C, H, W] with C = 1, 3 or 4, got "
      "shape [4, 4]");
  EXPECT_THROWS_WITH(
      Error,
      writer.add_image("empty", at::zeros({3, 0, 4}), 0),
      "got shape [3, 0, 4]");
  EXPECT_THROWS_WITH(
      Error,
      writer.add_image("ints", at::zeros({3, 2, 2}, at::kInt), 0),
      "add_image(\"ints\"): image must be uint8 or floating, got Int");
}

TEST(SummaryWriter, HParamsWriteThePluginSummariesThenTheMetricScalars) {
  TempDir dir;
  std::string path;
  {
    SummaryWriter writer(dir.path());
    path = writer.path();
    writer.add_hparams(
        {{"lr", 0.01},
         {"batch_size", 64},
         {"dropout", 0},
         {"amp", true},
         {"shuffle", false},
         {"optimizer", "adam"}},
        {{"hparam/loss", 0.5}, {"hparam/accuracy", 0.75}},
        7);
  }
  const std::vector<Message> events = read_events(path);
  ASSERT_EQ(events.size(), 6u); // version, 3 plugin summaries, 2 scalars
  std::vector<Message> contents;
  const char* tags[] = {
      "_hparams_/experiment",
      "_hparams_/session_start_info",
      "_hparams_/session_end_info"};
  for (int i = 0; i < 3; ++i) {
    const Message value = value_of(events[1 + i]);
    EXPECT_EQ(value.bytes(kTag), tags[i]);
    EXPECT_EQ(events[1 + i].int64(kStep), 7);
    EXPECT_EQ(plugin_name(value), "hparams");
    const Message content(plugin_content(value));
    EXPECT_FALSE(content.has(1)); // version 0
    contents.push_back(content);
  }

  // Experiment: HParamInfo{name, type} in name order, MetricInfo{name.tag}.
  const Message experiment = contents[0].message(2);
  const std::vector<std::pair<std::string, uint64_t>> infos = {
      {"amp", 2},        // DATA_TYPE_BOOL
      {"batch_size", 3}, // DATA_TYPE_FLOAT64
      {"dropout", 3},
      {"lr", 3},
      {"optimizer", 1}, // DATA_TYPE_STRING
      {"shuffle", 2}};
  ASSERT_EQ(experiment.count(4), infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    EXPECT_EQ(experiment.message(4, i).bytes(1), infos[i].first);
    EXPECT_EQ(experiment.message(4, i).uint(4), infos[i].second);
  }
  ASSERT_EQ(experiment.count(5), 2u);
  EXPECT_EQ(experiment.message(5, 0).message(1).bytes(2), "hparam/accuracy");
  EXPECT_EQ(experiment.message(5, 1).message(1).bytes(2), "hparam/loss");

  // SessionStartInfo: map<string, google.protobuf.Value>; zero and false
  // are present, since Value's kinds are a oneof.
  const Message start = contents[1].message(3);
  std::map<std::string, Message> hparams;
  for (size_t i = 0; i < start.count(1); ++i) {
    hparams[start.message(1, i).bytes(1)] = start.message(1, i).message(2);
  }
  ASSERT_EQ(hparams.size(), 6u);
  EXPECT_EQ(hparams["lr"].float64(2), 0.01);
  EXPECT_EQ(hparams["batch_size"].float64(2), 64.0);
  EXPECT_TRUE(hparams["dropout"].has(2));
  EXPECT_EQ(hparams["amp"].uint(4), 1u);
  EXPECT_TRUE(hparams["shuffle"].has(4));
  EXPECT_EQ(hparams["shuffle"].uint(4), 0u);
  EXPECT_EQ(hparams["optimizer"].bytes(3), "adam");

  // SessionEndInfo{status: STATUS_SUCCESS}.
  EXPECT_EQ(contents[2].message(4).uint(1), 1u);

  EXPECT_EQ(value_of(events[4]).bytes(kTag), "hparam/accuracy");
  EXPECT_EQ(value_of(events[4]).float32(kSimpleValue), 0.75f);
  EXPECT_EQ(events[4].int64(kStep), 7);
  EXPECT_EQ(value_of(events[5]).bytes(kTag), "hparam/loss");
  EXPECT_EQ(value_of(events[5]).float32(kSimpleValue), 0.5f);
}

TEST(SummaryWriter, UnwritableLogDirIsNamedInTheError) {
  TempDir dir;
  std::ofstream(dir.file("plain_file")) << "not a folder";
  const std::string log_dir = dir.file("plain_file") + "/run";
  EXPECT_THROWS_WITH(
      Error,
      SummaryWriter(log_dir),
      log_dir + ": cannot create the log directory");
}

TEST(SummaryWriter, FlushMakesRecordsReadableWhileTheWriterIsOpen) {
  TempDir dir;
  SummaryWriter writer(dir.path());
  writer.add_scalar("loss", 2.0, 1);
  writer.flush();
  const std::vector<Message> events = read_events(writer.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(value_of(events[1]).float32(kSimpleValue), 2.0f);
}

TEST(SummaryWriter, SelfCheckRunForTheTensorBoardScriptReadsBack) {
  // With HOTLOOP_TENSORBOARD_SELF_CHECK_DIR set, the run is also written
  // there, for `python3 scripts/read_tensorboard.py DIR --self-check` on a
  // machine with the tensorboard package.
  if (const char* export_dir =
          std::getenv("HOTLOOP_TENSORBOARD_SELF_CHECK_DIR")) {
    write_self_check_run(export_dir);
  }
  TempDir dir;
  write_self_check_run(dir.path());
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    files.push_back(entry.path());
  }
  ASSERT_EQ(files.size(), 1u);
  const std::string path = files[0].string();
  EXPECT_EQ(events_tagged(path, "train/loss").size(), 5u);
  EXPECT_EQ(events_tagged(path, "weights").size(), 1u);
  EXPECT_EQ(events_tagged(path, "samples").size(), 1u);
  EXPECT_EQ(events_tagged(path, "notes/text_summary").size(), 1u);
  EXPECT_EQ(events_tagged(path, "_hparams_/session_start_info").size(), 1u);
  EXPECT_EQ(events_tagged(path, "hparam/accuracy").size(), 1u);
}

TEST(MakeImageGrid, MatchesTorchvisionForGrayFloatImages) {
  const at::Tensor images = at::arange(30, at::kFloat).view({5, 1, 2, 3}) / 32;
  const at::Tensor grid = make_image_grid(images, 2, 1, 0.5);
  ASSERT_EQ(grid.sizes(), at::IntArrayRef({3, 10, 9}));
  EXPECT_EQ(grid.scalar_type(), at::kFloat);
  const at::Tensor channel = at::tensor(kGrayGrid).view({1, 10, 9});
  EXPECT_TRUE(grid.equal(channel.expand({3, 10, 9})));
}

TEST(MakeImageGrid, MatchesTorchvisionForUint8RgbImages) {
  const at::Tensor images = (at::arange(36, at::kLong) * 7)
                                .remainder(256)
                                .to(at::kByte)
                                .view({3, 3, 2, 2});
  const at::Tensor grid = make_image_grid(images, 2, 1, 255);
  ASSERT_EQ(grid.sizes(), at::IntArrayRef({3, 7, 7}));
  EXPECT_EQ(grid.scalar_type(), at::kByte);
  EXPECT_TRUE(grid.equal(at::tensor(kRgbGrid).to(at::kByte).view({3, 7, 7})));
}

TEST(MakeImageGrid, DefaultsPutEightImagesARowTwoPixelsApart) {
  const at::Tensor grid = make_image_grid(at::ones({10, 3, 4, 5}));
  // Rows: ceil(10 / 8) = 2 of (4 + 2) px, plus 2; columns: 8 of (5 + 2),
  // plus 2.
  ASSERT_EQ(grid.sizes(), at::IntArrayRef({3, 14, 58}));
  EXPECT_EQ(grid.sum().item<double>(), 10 * 3 * 4 * 5);
}

TEST(MakeImageGrid, SingleImageComesBackUnpaddedWithGrayAsRgb) {
  const at::Tensor image = at::rand({1, 1, 2, 2});
  const at::Tensor grid = make_image_grid(image, 8, 2, 1.0);
  ASSERT_EQ(grid.sizes(), at::IntArrayRef({3, 2, 2}));
  EXPECT_TRUE(grid.equal(image[0].expand({3, 2, 2})));
}

TEST(MakeImageGrid, RejectsBadShapesAndOptions) {
  EXPECT_THROWS_WITH(
      Error,
      make_image_grid(at::zeros({3, 4, 4})),
      "make_image_grid: images must be [N, C, H, W] with N > 0, got shape "
      "[3, 4, 4]");
  EXPECT_THROWS_WITH(
      Error,
      make_image_grid(at::zeros({2, 3, 4, 4}), 0),
      "make_image_grid: nrow must be positive, got 0");
  EXPECT_THROWS_WITH(
      Error,
      make_image_grid(at::zeros({2, 3, 4, 4}), 8, -1),
      "make_image_grid: padding must be non-negative, got -1");
}

// The reader above is what the writer's tests stand on: check that it
// notices a file cut mid-record or altered.
TEST(EventReader, DetectsTornAndCorruptRecords) {
  TempDir dir;
  std::string path;
  {
    SummaryWriter writer(dir.path());
    path = writer.path();
    writer.add_scalar("a", 1.0, 1);
    writer.add_scalar("b", 2.0, 2);
  }
  const std::string good = read_file(path);
  ASSERT_EQ(read_records(path).size(), 3u);
  const auto write = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  const auto expect_error = [&](const std::string& bytes,
                                const std::string& message) {
    write(bytes);
    EXPECT_THAT(
        [&] { read_records(path); },
        ::testing::ThrowsMessage<std::runtime_error>(HasSubstr(message)));
  };
  // Where each record starts, from the length fields.
  std::vector<size_t> starts;
  for (size_t at = 0; at < good.size(); at += 16 + read_le(good, at, 8)) {
    starts.push_back(at);
  }
  ASSERT_EQ(starts.size(), 3u);
  expect_error(good.substr(0, good.size() - 3), "record 2: torn data");
  expect_error(good.substr(0, starts[2] + 5), "record 2: torn header");
  std::string altered = good;
  altered[starts[1] + 12] ^= 0x01; // first data byte
  expect_error(altered, "record 1: data CRC mismatch");
  altered = good;
  altered[starts[1]] ^= 0x01; // length
  expect_error(altered, "record 1: length CRC mismatch");
  write(good);
  EXPECT_EQ(read_records(path).size(), 3u);
}

// A small fit's run folder, as hotloop fit writes it, for TensorBoard's own
// reader (tests/tensorboard_reader.sh).
struct FitRun {
  std::string event_file;
  std::map<std::string, double> metrics;
  // The first conv's gradient at the first optimizer step (global step 0).
  at::Tensor first_gradient;
};

// Keeps a copy of one parameter's gradient at the fit's first optimizer
// step, where the logger takes its first gradient histograms.
class FirstGradient : public train::Callback {
 public:
  void on_before_optimizer_step(
      train::Trainer& trainer,
      train::Module& module,
      torch::optim::Optimizer&) override {
    if (!gradient.defined()) {
      gradient =
          module.named_parameters()["network.features.0.weight"].grad().clone();
    }
  }
  at::Tensor gradient;
};

FitRun write_fit_run(const std::string& dir) {
  log::TensorBoardLoggerOptions every_epoch;
  every_epoch.histogram_every_n_epochs = 1;
  auto logger = std::make_shared<TensorBoardLogger>(dir, every_epoch);
  auto module = train::make_module(0);
  data::DataLoader train_loader(
      train::quadrants(64, 1), data::DataLoaderOptions(16).shuffle(true));
  data::DataLoader val_loader(
      train::quadrants(32, 2), data::DataLoaderOptions(32));
  train::Trainer trainer(train::TrainerOptions()
                             .accelerator("cpu")
                             .max_epochs(2)
                             .default_root_dir("")
                             .enable_progress_bar(false)
                             .log_every_n_steps(2));
  auto gradient = std::make_shared<FirstGradient>();
  trainer.add_logger(logger).add_callback(logger).add_callback(gradient);
  trainer.set_hyperparams({{"optimizer.lr", "0.01"}, {"model.name", "cnn"}});
  const train::FitResult result =
      trainer.fit(*module, train_loader, &val_loader);
  return {logger->writer().path(), result.metrics, gradient->gradient};
}

TEST(TensorBoardLogger, AFitWritesScalarsHistogramsImagesAndHParams) {
  TempDir dir;
  const FitRun run = write_fit_run(dir.path());
  const std::string& path = run.event_file;

  std::vector<int64_t> steps;
  for (const Message& event : events_tagged(path, "train_loss_step")) {
    steps.push_back(event.int64(kStep));
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 4, 6, 8}));
  // Two epoch ends; the HParams tab reads the last one, so no third point.
  const auto val_acc = events_tagged(path, "val_acc");
  ASSERT_EQ(val_acc.size(), 2u);
  EXPECT_EQ(val_acc[1].int64(kStep), 8);
  EXPECT_FLOAT_EQ(
      value_of(val_acc[1]).float32(kSimpleValue),
      static_cast<float>(run.metrics.at("val_acc")));
  // Weights at each epoch end, gradients at each epoch's first step.
  const auto weights = events_tagged(path, "weights/network.features.0.weight");
  ASSERT_EQ(weights.size(), 2u);
  EXPECT_TRUE(value_of(weights[0]).has(kHisto));
  EXPECT_EQ(weights[0].int64(kStep), 4);
  const auto gradients =
      events_tagged(path, "gradients/network.features.0.weight");
  ASSERT_EQ(gradients.size(), 2u);
  EXPECT_EQ(gradients[0].int64(kStep), 0);
  EXPECT_EQ(gradients[1].int64(kStep), 4);
  // The first one is of that step's gradient, not of the weight.
  ASSERT_TRUE(run.first_gradient.defined());
  const Message histogram = value_of(gradients[0]).message(kHisto);
  const at::Tensor grad = run.first_gradient.to(at::kDouble);
  EXPECT_EQ(histogram.float64(3), static_cast<double>(grad.numel())); // num
  EXPECT_DOUBLE_EQ(histogram.float64(1), grad.min().item<double>());
  EXPECT_DOUBLE_EQ(histogram.float64(2), grad.max().item<double>());
  EXPECT_NEAR(
      histogram.float64(4),
      grad.sum().item<double>(),
      1e-9 * grad.abs().sum().item<double>());
  // One grid of the first batch: 16 images of 12x12, 8 per row.
  const auto images = events_tagged(path, "train/input_samples");
  ASSERT_EQ(images.size(), 1u);
  const Message image = value_of(images[0]).message(kImage);
  EXPECT_EQ(image.int64(1), 2 + 2 * (12 + 2)); // height
  EXPECT_EQ(image.int64(2), 2 + 8 * (12 + 2)); // width
  // The hparams summaries at the last step; the session ended in success.
  int64_t hparams = 0;
  for (const Message& event : read_events(path)) {
    if (event.has(kSummary) && value_of(event).has(kMetadata) &&
        plugin_name(value_of(event)) == "hparams") {
      ++hparams;
      EXPECT_EQ(event.int64(kStep), 8);
    }
  }
  EXPECT_EQ(hparams, 3);
  // The experiment lists the fit's final metrics; the session holds the
  // hyperparameters, numbers as numbers.
  const auto experiment = events_tagged(path, "_hparams_/experiment");
  ASSERT_EQ(experiment.size(), 1u);
  const Message info =
      Message(plugin_content(value_of(experiment[0]))).message(2);
  std::vector<std::string> metric_names;
  for (size_t i = 0; i < info.count(5); ++i) {
    metric_names.push_back(info.message(5, i).message(1).bytes(2));
  }
  std::vector<std::string> final_metrics;
  for (const auto& [name, value] : run.metrics) {
    final_metrics.push_back(name);
  }
  EXPECT_EQ(metric_names, final_metrics);
  EXPECT_THAT(metric_names, ::testing::IsSupersetOf({"val_acc", "val_loss"}));
  const auto start = events_tagged(path, "_hparams_/session_start_info");
  ASSERT_EQ(start.size(), 1u);
  const Message session =
      Message(plugin_content(value_of(start[0]))).message(3);
  std::map<std::string, Message> values;
  for (size_t i = 0; i < session.count(1); ++i) {
    values[session.message(1, i).bytes(1)] = session.message(1, i).message(2);
  }
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values["optimizer.lr"].float64(2), 0.01);
  EXPECT_EQ(values["model.name"].bytes(3), "cnn");
  const auto end = events_tagged(path, "_hparams_/session_end_info");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(Message(plugin_content(value_of(end[0]))).message(4).uint(1), 1u);
}

TEST(TensorBoardLogger, SelfCheckFitForTheTensorBoardScript) {
  // With HOTLOOP_TENSORBOARD_FIT_DIR set, a fit's event file is also
  // written there for `read_tensorboard.py DIR --expect-...`.
  if (const char* export_dir = std::getenv("HOTLOOP_TENSORBOARD_FIT_DIR")) {
    write_fit_run(export_dir);
  }
  TempDir dir;
  write_fit_run(dir.path());
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    files.push_back(entry.path());
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(events_tagged(files[0].string(), "train_loss_step").size(), 4u);
  EXPECT_EQ(events_tagged(files[0].string(), "val_acc").size(), 2u);
}

TEST(TensorBoardLogger, AFailedFitKeepsItsScalarsAndEndsItsSessionAsFailed) {
  // The third training step throws: what was logged before reaches the
  // file, and the HParams session says the run failed.
  train::OnStepClassifier module(
      std::move(*train::make_module(0)),
      3,
      [](const at::Tensor&) -> at::Tensor {
        throw std::runtime_error("out of memory, say");
      });
  TempDir dir;
  auto logger = std::make_shared<TensorBoardLogger>(dir.path());
  data::DataLoader train_loader(
      train::quadrants(64, 1), data::DataLoaderOptions(16));
  train::Trainer trainer(train::TrainerOptions()
                             .accelerator("cpu")
                             .max_epochs(2)
                             .default_root_dir("")
                             .enable_progress_bar(false)
                             .log_every_n_steps(1));
  trainer.add_logger(logger).add_callback(logger);
  trainer.set_hyperparams({{"optimizer.lr", "0.01"}});
  EXPECT_THROW(trainer.fit(module, train_loader), std::runtime_error);
  std::vector<int64_t> steps;
  for (const Message& event :
       events_tagged(logger->writer().path(), "train_loss_step")) {
    steps.push_back(event.int64(kStep));
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2}));
  const auto end =
      events_tagged(logger->writer().path(), "_hparams_/session_end_info");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(Message(plugin_content(value_of(end[0]))).message(4).uint(1), 2u);
}

TEST(TensorBoardLogger, AStopSignalFlushesTheScalarsAndLeavesTheSessionOpen) {
  // SIGTERM in the third step: the Trainer finishes the step and stops.
  // Its scalars are on disk before the logger is gone, and the session is
  // neither a success nor a failure (STATUS_UNKNOWN): the run resumes.
  train::OnStepClassifier module(
      std::move(*train::make_module(0)), 3, train::raise_signal(SIGTERM));
  TempDir dir;
  auto logger = std::make_shared<TensorBoardLogger>(dir.path());
  data::DataLoader train_loader(
      train::quadrants(64, 1), data::DataLoaderOptions(16));
  std::ostringstream out;
  train::Trainer trainer(
      train::TrainerOptions()
          .accelerator("cpu")
          .max_epochs(2)
          .default_root_dir("")
          .enable_progress_bar(false)
          .log_every_n_steps(1),
      out);
  trainer.add_logger(logger).add_callback(logger);
  trainer.set_hyperparams({{"optimizer.lr", "0.01"}});
  EXPECT_TRUE(trainer.fit(module, train_loader).interrupted);
  std::vector<int64_t> steps;
  for (const Message& event :
       events_tagged(logger->writer().path(), "train_loss_step")) {
    steps.push_back(event.int64(kStep));
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));
  const auto end =
      events_tagged(logger->writer().path(), "_hparams_/session_end_info");
  ASSERT_EQ(end.size(), 1u);
  const Message content(plugin_content(value_of(end[0])));
  ASSERT_TRUE(content.has(4)); // a SessionEndInfo, with the default status
  EXPECT_EQ(content.message(4).uint(1), 0u);
}

} // namespace
} // namespace hotloop::log
