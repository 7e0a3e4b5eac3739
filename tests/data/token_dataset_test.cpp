#include "hotloop/data/token_dataset.h"
#include "hotloop/core/error.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include <string>
#include <vector>

namespace hotloop::data {
namespace {

using ::hotloop::testing::TempDir;
using ::hotloop::testing::write_bytes;
using ::testing::HasSubstr;

// Writes `tokens` little-endian with `width` bytes each; returns the path.
std::string write_tokens(
    const TempDir& dir,
    const std::vector<uint32_t>& tokens,
    int width = 2,
    const std::string& name = "train.bin") {
  std::vector<uint8_t> bytes;
  for (uint32_t token : tokens) {
    for (int b = 0; b < width; ++b) {
      bytes.push_back(static_cast<uint8_t>(token >> (8 * b)));
    }
  }
  write_bytes(dir.file(name), bytes);
  return dir.file(name);
}

std::vector<uint32_t> iota(uint32_t n, uint32_t first = 0) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < n; ++i) {
    out.push_back(first + i);
  }
  return out;
}

at::Tensor longs(int64_t first, int64_t count) {
  return at::arange(first, first + count, at::kLong);
}

TEST(TokenDataset, WindowsAreInputsAndTargetsShiftedByOneToken) {
  TempDir dir;
  const TokenDataset dataset(write_tokens(dir, iota(21)), 4);
  EXPECT_EQ(dataset.num_tokens(), 21);
  EXPECT_EQ(dataset.size(), 5); // windows start at 0, 4, 8, 12, 16
  const SampleSpec spec = dataset.spec();
  EXPECT_EQ(spec.input_shape, std::vector<int64_t>{4});
  EXPECT_EQ(spec.input_dtype, at::kLong);
  EXPECT_EQ(spec.target_shape, std::vector<int64_t>{4});
  EXPECT_EQ(spec.target_dtype, at::kLong);
  const Example example = dataset.get(1, SampleContext{});
  EXPECT_TRUE(example.input.equal(longs(4, 4)));
  EXPECT_TRUE(example.target.equal(longs(5, 4)));
  EXPECT_TRUE(dataset.get(4, SampleContext{}).target.equal(longs(17, 4)));
}

TEST(TokenDataset, SizeCountsOnlyWholeWindows) {
  TempDir dir;
  // 20 tokens: a window at 16 would need token 20.
  EXPECT_EQ(TokenDataset(write_tokens(dir, iota(20)), 4).size(), 4);
  EXPECT_EQ(TokenDataset(write_tokens(dir, iota(5)), 4).size(), 1);
}

TEST(TokenDataset, StrideSetsTheDistanceBetweenWindowStarts) {
  TempDir dir;
  const std::string path = write_tokens(dir, iota(21));
  const TokenDataset overlapping(path, TokenDatasetOptions(4).stride(1));
  EXPECT_EQ(overlapping.size(), 17);
  EXPECT_TRUE(overlapping.get(16, SampleContext{}).input.equal(longs(16, 4)));
  EXPECT_TRUE(overlapping.get(16, SampleContext{}).target.equal(longs(17, 4)));
  const TokenDataset sparse(path, TokenDatasetOptions(4).stride(7));
  EXPECT_EQ(sparse.size(), 3); // starts 0, 7, 14
  EXPECT_TRUE(sparse.get(2, SampleContext{}).input.equal(longs(14, 4)));
}

TEST(TokenDataset, ReadsLittleEndianUint16AndUint32) {
  TempDir dir;
  const std::vector<uint32_t> tokens = {0, 1, 255, 256, 65535, 4660};
  const TokenDataset u16(write_tokens(dir, tokens), 5);
  EXPECT_TRUE(
      u16.get(0, SampleContext{})
          .target.equal(at::tensor({1, 255, 256, 65535, 4660}, at::kLong)));

  const std::vector<uint32_t> wide = {70000, 4294967295u, 16777216, 3};
  const TokenDataset u32(
      write_tokens(dir, wide, 4, "wide.bin"),
      TokenDatasetOptions(3).token_bytes(4));
  EXPECT_EQ(u32.num_tokens(), 4);
  EXPECT_TRUE(u32.get(0, SampleContext{})
                  .input.equal(at::tensor(
                      {int64_t{70000}, int64_t{4294967295}, int64_t{16777216}},
                      at::kLong)));
}

TEST(TokenDataset, OneByteTokensReadAnyFileAsItsBytes) {
  TempDir dir;
  std::ofstream(dir.file("text.txt")) << "hello, world";
  const TokenDataset bytes(
      dir.file("text.txt"), TokenDatasetOptions(4).token_bytes(1));
  EXPECT_EQ(bytes.num_tokens(), 12);
  EXPECT_EQ(bytes.size(), 2); // windows start at 0 and 4: "hell|o", "o, w|o"
  const Example first = bytes.get(0, {});
  EXPECT_TRUE(first.input.equal(at::tensor({'h', 'e', 'l', 'l'}, at::kLong)));
  EXPECT_TRUE(first.target.equal(at::tensor({'e', 'l', 'l', 'o'}, at::kLong)));
  EXPECT_EQ(bytes.get(1, {}).target[3].item<int64_t>(), 'o');
}

TEST(TokenDataset, GetBatchEqualsStackedGet) {
  TempDir dir;
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 100; ++i) {
    tokens.push_back((i * 7919) % 50257);
  }
  const TokenDataset dataset(
      write_tokens(dir, tokens),
      TokenDatasetOptions(8).stride(3).vocab_size(50257));
  const std::vector<int64_t> indices = {30, 0, 5, 5, 17};
  Batch batch{at::empty({5, 8}, at::kLong), at::empty({5, 8}, at::kLong)};
  dataset.get_batch(indices, SampleContext{}, batch);
  for (size_t k = 0; k < indices.size(); ++k) {
    const Example example = dataset.get(indices[k], SampleContext{});
    EXPECT_TRUE(batch.input[k].equal(example.input));
    EXPECT_TRUE(batch.target[k].equal(example.target));
    EXPECT_EQ(example.input[0].item<int64_t>(), tokens[indices[k] * 3]);
  }
}

TEST(TokenDataset, BadOptionsNameTheOption) {
  TempDir dir;
  const std::string path = write_tokens(dir, iota(10));
  EXPECT_THROWS_WITH(
      ConfigError,
      TokenDataset(path, 0),
      "data.context must be positive, got 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      TokenDataset(path, TokenDatasetOptions(4).stride(0)),
      "data.stride must be positive, got 0");
  EXPECT_THROWS_WITH(
      ConfigError,
      TokenDataset(path, TokenDatasetOptions(4).token_bytes(3)),
      "data.token_bytes must be 1 (bytes of any file), 2 (uint16) or 4 "
      "(uint32), got 3");
  EXPECT_THROWS_WITH(
      ConfigError,
      TokenDataset(path, TokenDatasetOptions(4).vocab_size(-1)),
      "data.vocab_size must be >= 0 (0: unchecked), got -1");
}

TEST(TokenDataset, BadFilesAreNamed) {
  TempDir dir;
  EXPECT_THROWS_WITH(
      DataError,
      TokenDataset(dir.file("absent.bin"), 4),
      dir.file("absent.bin") + ": no such file");
  write_bytes(dir.file("odd.bin"), {1, 0, 2, 0, 3});
  EXPECT_THROWS_WITH(
      DataError,
      TokenDataset(dir.file("odd.bin"), 1),
      dir.file("odd.bin") +
          ": size 5 bytes is not a multiple of 2 (data.token_bytes)");
  EXPECT_THROWS_WITH(
      DataError,
      TokenDataset(
          write_tokens(dir, iota(5), 2), TokenDatasetOptions(1).token_bytes(4)),
      "size 10 bytes is not a multiple of 4");
  EXPECT_THROWS_WITH(
      DataError,
      TokenDataset(write_tokens(dir, iota(4)), 4),
      dir.file("train.bin") +
          ": holds 4 tokens; one window needs data.context + 1 = 5");
  write_bytes(dir.file("empty.bin"), {});
  EXPECT_THROWS_WITH(
      DataError, TokenDataset(dir.file("empty.bin"), 4), "holds 0 tokens");
}

TEST(TokenDataset, TokensOutsideTheVocabularyAreReportedWhenRead) {
  TempDir dir;
  std::vector<uint32_t> tokens = iota(12);
  tokens[6] = 900;
  const std::string path = write_tokens(dir, tokens);
  const TokenDataset dataset(path, TokenDatasetOptions(3).vocab_size(500));
  EXPECT_NO_THROW(dataset.get(0, SampleContext{})); // tokens 0..3
  EXPECT_THROWS_WITH(
      DataError,
      dataset.get(1, SampleContext{}), // tokens 3..6, 6 only as a target
      path +
          ": token at offset 6 is 900; expected ids below data.vocab_size "
          "500");
  Batch batch{at::empty({2, 3}, at::kLong), at::empty({2, 3}, at::kLong)};
  EXPECT_THROWS_WITH(
      DataError,
      dataset.get_batch(std::vector<int64_t>{0, 2}, SampleContext{}, batch),
      "token at offset 6 is 900");
  EXPECT_NO_THROW(TokenDataset(path, 3).get(2, SampleContext{}));
}

TEST(TokenDataset, OutOfRangeIndicesAndBadBatchesAreRejected) {
  TempDir dir;
  const TokenDataset dataset(write_tokens(dir, iota(9)), 4);
  EXPECT_THROWS_WITH(
      Error,
      dataset.get(2, SampleContext{}),
      "sample index 2 is out of range for a dataset of 2");
  Batch batch{at::empty({1, 4}, at::kInt), at::empty({1, 4}, at::kLong)};
  EXPECT_THROWS_WITH(
      Error,
      dataset.get_batch(std::vector<int64_t>{0}, SampleContext{}, batch),
      "a token batch must be contiguous int64 [1, 4], got Int[1, 4]");
}

} // namespace
} // namespace hotloop::data
