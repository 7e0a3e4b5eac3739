#include "hotloop/data/idx.h"
#include "hotloop/core/error.h"
#include "hotloop/data/fashion_mnist.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace hotloop::data {
namespace {

using ::hotloop::testing::idx_bytes;
using ::hotloop::testing::TempDir;
using ::hotloop::testing::write_bytes;
using ::testing::HasSubstr;

// Expects `statement` to throw DataError whose message contains `text`.
#define EXPECT_DATA_ERROR(statement, text) \
  EXPECT_THAT(                             \
      [&] { statement; },                  \
      ::testing::ThrowsMessage<::hotloop::DataError>(HasSubstr(text)))

std::vector<uint8_t> ubyte_file(std::vector<uint32_t> dims, size_t data_bytes) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      out.push_back(static_cast<uint8_t>(d >> shift));
    }
  }
  for (size_t i = 0; i < data_bytes; ++i) {
    out.push_back(static_cast<uint8_t>(i));
  }
  return out;
}

TEST(ReadIdx, ReadsRawUbyteWithShapeAndValues) {
  TempDir dir;
  write_bytes(dir.file("a.idx"), ubyte_file({2, 3, 4}, 24));
  const at::Tensor t = read_idx(dir.file("a.idx"));
  EXPECT_EQ(t.sizes(), at::IntArrayRef({2, 3, 4}));
  EXPECT_EQ(t.scalar_type(), at::kByte);
  EXPECT_TRUE(t.equal(at::arange(24).to(at::kByte).view({2, 3, 4})));
}

TEST(ReadIdx, ReadsGzipContentIdenticallyWhateverTheName) {
  TempDir dir;
  write_bytes(dir.file("raw"), ubyte_file({5, 7}, 35));
  write_bytes(dir.file("packed"), ubyte_file({5, 7}, 35), /*gzip=*/true);
  EXPECT_TRUE(read_idx(dir.file("raw")).equal(read_idx(dir.file("packed"))));
}

TEST(ReadIdx, ConvertsBigEndianInt32AndFloat32) {
  TempDir dir;
  const at::Tensor ints = at::tensor({1, -2, 70000, INT32_MIN}, at::kInt);
  const at::Tensor floats = at::tensor({0.5f, -3.25f, 1e-7f}, at::kFloat);
  write_bytes(dir.file("ints"), idx_bytes(ints));
  write_bytes(dir.file("floats"), idx_bytes(floats), true);
  EXPECT_TRUE(read_idx(dir.file("ints")).equal(ints));
  EXPECT_TRUE(read_idx(dir.file("floats")).equal(floats));
}

TEST(ReadIdx, MissingFileIsNamed) {
  EXPECT_DATA_ERROR(
      read_idx("/nonexistent/x.idx"), "/nonexistent/x.idx: no such file");
}

TEST(ReadIdx, BadMagicIsRejected) {
  TempDir dir;
  auto bytes = ubyte_file({4}, 4);
  bytes[0] = 0x1F;
  write_bytes(dir.file("bad"), bytes);
  EXPECT_DATA_ERROR(
      read_idx(dir.file("bad")),
      dir.file("bad") + ": not an IDX file (bad magic");
}

TEST(ReadIdx, UnknownElementTypeIsRejected) {
  TempDir dir;
  auto bytes = ubyte_file({4}, 4);
  bytes[2] = 0x07;
  write_bytes(dir.file("bad"), bytes);
  EXPECT_DATA_ERROR(read_idx(dir.file("bad")), "unknown IDX element type 0x7");
}

TEST(ReadIdx, WrongDimensionsAreRejected) {
  TempDir dir;
  write_bytes(dir.file("zero_dims"), ubyte_file({}, 0));
  EXPECT_DATA_ERROR(
      read_idx(dir.file("zero_dims")),
      "declares 0 dimensions (expected 1 to 8)");
  write_bytes(dir.file("zero_size"), ubyte_file({3, 0}, 0));
  EXPECT_DATA_ERROR(read_idx(dir.file("zero_size")), "dimension 1 has size 0");
}

TEST(ReadIdx, ShortReadsAreReportedWithByteCounts) {
  TempDir dir;
  write_bytes(dir.file("short_header"), {0, 0, 8, 2, 0, 0});
  EXPECT_DATA_ERROR(
      read_idx(dir.file("short_header")),
      "truncated header: expected 4 bytes, got 2");
  write_bytes(dir.file("short_data"), ubyte_file({4, 6}, 20));
  EXPECT_DATA_ERROR(
      read_idx(dir.file("short_data")),
      "truncated data: expected 24 bytes, got 20");
  write_bytes(dir.file("short_gz"), ubyte_file({4, 6}, 20), true);
  EXPECT_DATA_ERROR(
      read_idx(dir.file("short_gz")),
      "truncated data: expected 24 bytes, got 20 (after decompression)");
}

TEST(ReadIdx, TrailingBytesAreRejected) {
  TempDir dir;
  write_bytes(dir.file("long"), ubyte_file({4}, 5));
  EXPECT_DATA_ERROR(
      read_idx(dir.file("long")),
      "has more data than its header declares (4 bytes)");
}

// Found by fuzz/idx_fuzzer: a header declaring far more data than the file
// holds was allocated before the read (ASan: 171 PB asked for), and the
// sizes' product could overflow. The size is checked against the file now.
TEST(ReadIdx, AHeaderDeclaringMoreThanTheFileCanHoldIsRejectedBeforeAllocating) {
  TempDir dir;
  // 0x070e151c x 0x2b2a3138 bytes with 13 bytes of data.
  write_bytes(dir.file("huge"), ubyte_file({0x070e151cu, 0x2b2a3138u}, 13));
  EXPECT_DATA_ERROR(
      read_idx(dir.file("huge")),
      "truncated data: expected 85717060658068000 bytes, got 13");
  write_bytes(dir.file("huge.gz"), ubyte_file({1u << 31, 1u << 31}, 64), true);
  EXPECT_DATA_ERROR(
      read_idx(dir.file("huge.gz")),
      "IDX header declares 4611686018427387904 bytes of data, more than a "
      "gzip file of ");
  auto overflow = ubyte_file({1u << 31, 1u << 31, 1u << 31}, 8);
  overflow[2] = 0x0D; // float32: 4 x 2^93 bytes
  write_bytes(dir.file("overflow"), overflow);
  EXPECT_DATA_ERROR(
      read_idx(dir.file("overflow")),
      "IDX header declares more than 2^64 bytes of data");
}

TEST(ReadIdx, CorruptGzipIsReported) {
  TempDir dir;
  // A valid gzip header followed by garbage deflate data.
  write_bytes(
      dir.file("corrupt.gz"),
      {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff, 0x12, 0x34});
  EXPECT_DATA_ERROR(
      read_idx(dir.file("corrupt.gz")),
      dir.file("corrupt.gz") + ": corrupt gzip data");
}

TEST(ReadIdx, GzipCutShortIsReported) {
  TempDir dir;
  write_bytes(dir.file("whole.gz"), ubyte_file({64, 64}, 4096), true);
  std::ifstream in(dir.file("whole.gz"), std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  bytes.resize(bytes.size() / 2);
  write_bytes(dir.file("cut.gz"), bytes);
  EXPECT_THROW(read_idx(dir.file("cut.gz")), DataError);
}

class FakeMnist : public ::testing::Test {
 protected:
  void write(const std::string& name, const at::Tensor& t) {
    write_bytes(dir_.file(name), idx_bytes(t), true);
  }
  TempDir dir_;
};

TEST_F(FakeMnist, LoadsImagesWithAChannelDimensionAndLongLabels) {
  write(
      "train-images-idx3-ubyte.gz",
      at::arange(3 * 4 * 5).to(at::kByte).view({3, 4, 5}));
  write("train-labels-idx1-ubyte.gz", at::tensor({2, 0, 1}, at::kByte));
  const auto ds = load_mnist_split(dir_.path(), /*train=*/true);
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->images().sizes(), at::IntArrayRef({3, 1, 4, 5}));
  EXPECT_TRUE(ds->labels().equal(at::tensor({2, 0, 1}, at::kLong)));
  EXPECT_EQ(ds->num_classes(), 3);
}

TEST_F(FakeMnist, ReadsUncompressedFilesToo) {
  write_bytes(
      dir_.file("t10k-images-idx3-ubyte"),
      idx_bytes(at::zeros({2, 3, 3}, at::kByte)));
  write_bytes(
      dir_.file("t10k-labels-idx1-ubyte"),
      idx_bytes(at::zeros({2}, at::kByte)));
  EXPECT_EQ(load_mnist_split(dir_.path(), /*train=*/false)->size(), 2);
}

TEST_F(FakeMnist, MissingFolderAndFilesAreNamed) {
  EXPECT_DATA_ERROR(
      load_mnist_split(dir_.file("nope"), true),
      "dataset folder '" + dir_.file("nope") + "' does not exist");
  write("train-images-idx3-ubyte.gz", at::zeros({2, 3, 3}, at::kByte));
  EXPECT_DATA_ERROR(
      load_mnist_split(dir_.path(), true),
      dir_.path() +
          ": missing train-labels-idx1-ubyte.gz (or train-labels-idx1-ubyte)");
}

TEST_F(FakeMnist, CountMismatchNamesBothFiles) {
  write("train-images-idx3-ubyte.gz", at::zeros({3, 2, 2}, at::kByte));
  write("train-labels-idx1-ubyte.gz", at::zeros({2}, at::kByte));
  EXPECT_DATA_ERROR(
      load_mnist_split(dir_.path(), true),
      "train-images-idx3-ubyte.gz has 3 images but " +
          dir_.file("train-labels-idx1-ubyte.gz") + " has 2 labels");
}

TEST_F(FakeMnist, WrongShapesOrTypesAreRejected) {
  write("train-images-idx3-ubyte.gz", at::zeros({6}, at::kByte));
  write("train-labels-idx1-ubyte.gz", at::zeros({6}, at::kByte));
  EXPECT_DATA_ERROR(
      load_mnist_split(dir_.path(), true),
      "expected uint8 images of shape [N, H, W], got Byte [6]");
  write("train-images-idx3-ubyte.gz", at::zeros({6, 2, 2}, at::kByte));
  write("train-labels-idx1-ubyte.gz", at::zeros({6}, at::kInt));
  EXPECT_DATA_ERROR(
      load_mnist_split(dir_.path(), true),
      "expected uint8 labels of shape [N], got Int [6]");
}

// The real files from Debian's dataset-fashion-mnist (installed by
// setup.sh), or from HOTLOOP_FASHION_MNIST_ROOT on a machine that has them
// elsewhere (scripts/gpu_run.sh sets it to the carried copy).
std::string fashion_mnist_root() {
  const char* root = std::getenv("HOTLOOP_FASHION_MNIST_ROOT");
  return root != nullptr && *root != '\0' ? root : kFashionMnistDefaultRoot;
}

TEST(FashionMnist, RealFilesHaveTheKnownShapesAndValues) {
  const std::string root = fashion_mnist_root();
  ASSERT_TRUE(std::filesystem::is_directory(root))
      << root << " not found: install the dataset-fashion-mnist package "
      << "(./setup.sh does) or set HOTLOOP_FASHION_MNIST_ROOT";
  const auto train = load_mnist_split(root, true);
  const auto test = load_mnist_split(root, false);
  EXPECT_EQ(train->images().sizes(), at::IntArrayRef({60000, 1, 28, 28}));
  EXPECT_EQ(test->images().sizes(), at::IntArrayRef({10000, 1, 28, 28}));
  // Reference values from Python/numpy on the same files.
  EXPECT_TRUE(train->labels().slice(0, 0, 5).equal(
      at::tensor({9, 0, 0, 3, 0}, at::kLong)));
  EXPECT_TRUE(test->labels().slice(0, 0, 5).equal(
      at::tensor({9, 2, 1, 1, 6}, at::kLong)));
  EXPECT_EQ(train->images()[0].sum().item<int64_t>(), 76247);
  EXPECT_EQ(test->images()[0].sum().item<int64_t>(), 33456);
  EXPECT_EQ(train->images().sum().item<int64_t>(), 3431114169LL);
  EXPECT_TRUE(
      train->labels().bincount().equal(at::full({10}, 6000, at::kLong)));
  // The Normalize statistics everyone quotes for the training split.
  const auto [mean, std] = channel_statistics(train->images());
  ASSERT_EQ(mean.size(), 1u);
  EXPECT_NEAR(mean[0], 0.2860, 5e-5);
  EXPECT_NEAR(std[0], 0.3530, 5e-5);
}

TEST(ChannelStatistics, AreEachChannelsPopulationMeanAndStd) {
  const at::Tensor images =
      at::randint(0, 256, {5, 3, 4, 6}, at::TensorOptions().dtype(at::kByte));
  const auto [mean, std] = channel_statistics(images);
  const at::Tensor scaled = images.to(at::kDouble) / 255.0;
  for (int64_t c = 0; c < 3; ++c) {
    const at::Tensor plane = scaled.select(1, c);
    EXPECT_NEAR(mean[c], plane.mean().item<double>(), 1e-12);
    EXPECT_NEAR(
        std[c], plane.std(/*unbiased=*/false).item<double>(), 1e-12);
  }
  EXPECT_THROW(channel_statistics(scaled), DataError);
}

} // namespace
} // namespace hotloop::data
