#include "hotloop/data/tensor_dataset.h"
#include "test_util.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace hotloop::data {
namespace {

using ::testing::HasSubstr;

// A batch shaped and typed by `dataset.spec()` for `rows` samples.
Batch empty_batch(const Dataset& dataset, int64_t rows) {
  const SampleSpec spec = dataset.spec();
  std::vector<int64_t> input = {rows}, target = {rows};
  input.insert(input.end(), spec.input_shape.begin(), spec.input_shape.end());
  target.insert(
      target.end(), spec.target_shape.begin(), spec.target_shape.end());
  return Batch{
      at::empty(input, at::TensorOptions().dtype(spec.input_dtype)),
      at::empty(target, at::TensorOptions().dtype(spec.target_dtype))};
}

void expect_batch_equals_stacked_get(
    const Dataset& dataset, const std::vector<int64_t>& indices) {
  Batch batch = empty_batch(dataset, static_cast<int64_t>(indices.size()));
  dataset.get_batch(indices, SampleContext{}, batch);
  for (size_t k = 0; k < indices.size(); ++k) {
    const Example example = dataset.get(indices[k], SampleContext{});
    EXPECT_TRUE(batch.input[k].equal(example.input)) << "row " << k;
    EXPECT_TRUE(batch.target[k].equal(example.target)) << "row " << k;
  }
}

TEST(TensorDataset, GetReturnsCopiesOfRowsWithTheSpecsShapeAndDtype) {
  const at::Tensor inputs = at::arange(30, at::kInt).view({5, 2, 3});
  const at::Tensor targets = at::arange(5, at::kFloat) * 0.5;
  const TensorDataset dataset(inputs, targets);
  EXPECT_EQ(dataset.size(), 5);
  const SampleSpec spec = dataset.spec();
  EXPECT_EQ(spec.input_shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(spec.input_dtype, at::kInt);
  EXPECT_EQ(spec.target_shape, std::vector<int64_t>{});
  EXPECT_EQ(spec.target_dtype, at::kFloat);

  Example example = dataset.get(3, SampleContext{});
  EXPECT_TRUE(example.input.equal(inputs[3]));
  EXPECT_EQ(example.target.item<float>(), 1.5f);
  example.input.fill_(-1); // a copy: the dataset is unchanged
  EXPECT_TRUE(dataset.get(3, SampleContext{}).input.equal(inputs[3]));
}

TEST(TensorDataset, GetBatchEqualsStackedGetForAnyDtype) {
  expect_batch_equals_stacked_get(
      TensorDataset(
          at::randn({6, 4}, at::kDouble),
          at::randint(0, 255, {6, 2}, at::TensorOptions().dtype(at::kByte))),
      {5, 0, 5, 2});
  expect_batch_equals_stacked_get(
      TensorDataset(
          at::randn({4, 3, 2}, at::kHalf),
          at::tensor({1, 0, 1, 1}).to(at::kBool)),
      {3, 1, 0});
  expect_batch_equals_stacked_get(
      TensorDataset(at::empty({3, 0}), at::arange(3)), {2, 1});
}

TEST(TensorDataset, GetBatchGathersRowsInIndexOrder) {
  const TensorDataset dataset(
      at::arange(12, at::kFloat).view({4, 3}), at::arange(4) * 10);
  Batch batch = empty_batch(dataset, 3);
  dataset.get_batch(std::vector<int64_t>{2, 0, 2}, SampleContext{}, batch);
  EXPECT_TRUE(batch.input.equal(
      at::tensor({6.f, 7.f, 8.f, 0.f, 1.f, 2.f, 6.f, 7.f, 8.f}).view({3, 3})));
  EXPECT_TRUE(batch.target.equal(at::tensor({20, 0, 20}, at::kLong)));
}

TEST(TensorDataset, NonContiguousTensorsAreStoredContiguous) {
  const at::Tensor inputs = at::arange(12, at::kFloat).view({3, 4}).t();
  const TensorDataset dataset(inputs, at::arange(4));
  EXPECT_TRUE(dataset.inputs().is_contiguous());
  EXPECT_TRUE(dataset.get(1, SampleContext{}).input.equal(inputs[1]));
  expect_batch_equals_stacked_get(dataset, {3, 1});
}

TEST(TensorDataset, ScalarTensorsAreRejected) {
  EXPECT_THROWS_WITH(
      DataError,
      TensorDataset(at::scalar_tensor(1), at::arange(1)),
      "inputs must be [N, ...], got a scalar");
  EXPECT_THROWS_WITH(
      DataError,
      TensorDataset(at::arange(1), at::scalar_tensor(1)),
      "targets must be [N, ...], got a scalar");
}

TEST(TensorDataset, DifferentSampleCountsAreRejected) {
  EXPECT_THROWS_WITH(
      DataError,
      TensorDataset(at::zeros({4, 2}), at::zeros({3})),
      "there are 4 inputs but 3 targets");
}

TEST(TensorDataset, OutOfRangeIndicesAreRejected) {
  const TensorDataset dataset(at::zeros({4, 2}), at::zeros({4}));
  EXPECT_THROWS_WITH(
      Error,
      dataset.get(4, SampleContext{}),
      "sample index 4 is out of range for a dataset of 4");
  Batch batch = empty_batch(dataset, 2);
  EXPECT_THROWS_WITH(
      Error,
      dataset.get_batch(std::vector<int64_t>{0, -1}, SampleContext{}, batch),
      "sample index -1 is out of range for a dataset of 4");
}

TEST(TensorDataset, BatchOfAnotherDtypeOrShapeIsRejected) {
  const TensorDataset dataset(at::zeros({4, 2}), at::zeros({4}));
  Batch batch{at::zeros({2, 2}, at::kDouble), at::zeros({2})};
  EXPECT_THROWS_WITH(
      Error,
      dataset.get_batch(std::vector<int64_t>{0, 1}, SampleContext{}, batch),
      "the batch's input is Double[2, 2]; expected a contiguous Float tensor "
      "of 2 rows of [2]");
  batch = Batch{at::zeros({2, 2}), at::zeros({3})};
  EXPECT_THROWS_WITH(
      Error,
      dataset.get_batch(std::vector<int64_t>{0, 1}, SampleContext{}, batch),
      "the batch's target is Float[3]");
}

} // namespace
} // namespace hotloop::data
