#include "hotloop/core/error.h"
#include "hotloop/data/concat_dataset.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/iterable_dataset.h"
#include "hotloop/data/subset.h"
#include "hotloop/data/tensor_dataset.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

namespace hotloop::data {
namespace {

using ::testing::HasSubstr;

// Sample i: input [i, -i], target i, field "mask" [3] bool (i % 2, then
// true, false) and field "weight" [] double (i / 2).
Fields fields_of(int64_t i) {
  const bool odd = i % 2 == 1;
  return {
      {"mask", at::tensor({odd ? 1 : 0, 1, 0}, at::kLong).to(at::kBool)},
      {"weight", at::scalar_tensor(0.5 * static_cast<double>(i), at::kDouble)}};
}

// Checks that every row of `batch` is the sample its input names.
void expect_rows_match(const Batch& batch) {
  ASSERT_EQ(batch.fields.size(), 2u);
  const at::Tensor& mask = batch.field("mask");
  const at::Tensor& weight = batch.field("weight");
  EXPECT_EQ(mask.scalar_type(), at::kBool);
  EXPECT_EQ(weight.scalar_type(), at::kDouble);
  ASSERT_EQ(mask.size(0), batch.input.size(0));
  ASSERT_EQ(weight.dim(), 1);
  for (int64_t row = 0; row < batch.input.size(0); ++row) {
    const auto i = batch.input[row][0].item<int64_t>();
    EXPECT_EQ(batch.target[row].item<int64_t>(), i);
    const Fields expected = fields_of(i);
    EXPECT_TRUE(at::equal(mask[row], expected.at("mask"))) << "sample " << i;
    EXPECT_EQ(weight[row].item<double>(), 0.5 * static_cast<double>(i));
  }
}

std::shared_ptr<TensorDataset> tensor_samples(int64_t n) {
  const at::Tensor index = at::arange(n, at::kLong);
  Fields fields;
  std::vector<at::Tensor> masks;
  for (int64_t i = 0; i < n; ++i) {
    masks.push_back(fields_of(i).at("mask"));
  }
  fields["mask"] = at::stack(masks);
  fields["weight"] = index.to(at::kDouble) * 0.5;
  return std::make_shared<TensorDataset>(
      at::stack({index, -index}, 1).to(at::kFloat), index, fields);
}

// The same samples from `get` alone (the default get_batch), with hooks
// to make a sample wrong.
class MapSamples : public Dataset {
 public:
  explicit MapSamples(int64_t n) : n_(n) {}
  int64_t size() const override {
    return n_;
  }
  SampleSpec spec() const override {
    SampleSpec spec{{2}, at::kFloat, {}, at::kLong};
    spec.fields["mask"] = FieldSpec{{3}, at::kBool};
    spec.fields["weight"] = FieldSpec{{}, at::kDouble};
    return spec;
  }
  Example get(int64_t index, const SampleContext&) const override {
    check_index(index);
    Example example{
        at::tensor(
            {static_cast<float>(index), -static_cast<float>(index)},
            at::kFloat),
        at::scalar_tensor(index, at::kLong),
        fields_of(index)};
    if (spoil) {
      spoil(index, example);
    }
    return example;
  }
  std::function<void(int64_t, Example&)> spoil;

 private:
  int64_t n_;
};

TEST(Fields, ATensorDatasetsFieldsAreBatchedRowByRowWithTheirSamples) {
  auto samples = tensor_samples(11);
  const SampleSpec spec = samples->spec();
  ASSERT_EQ(spec.fields.size(), 2u);
  EXPECT_EQ(spec.fields.at("mask").shape, std::vector<int64_t>{3});
  EXPECT_EQ(spec.fields.at("mask").dtype, at::kBool);
  EXPECT_EQ(spec.fields.at("weight").shape, std::vector<int64_t>{});
  EXPECT_EQ(spec.fields.at("weight").dtype, at::kDouble);
  const Example one = samples->get(7, SampleContext{});
  EXPECT_TRUE(at::equal(one.fields.at("mask"), fields_of(7).at("mask")));
  EXPECT_EQ(one.fields.at("weight").item<double>(), 3.5);

  // Two workers, and a loader that moves its batches to a device.
  for (int64_t workers : {0, 2, 3}) {
    DataLoaderOptions options =
        DataLoaderOptions(4).shuffle(true).seed(5).num_workers(workers % 3);
    if (workers == 3) {
      options.device(c10::Device(c10::kCPU));
    }
    DataLoader loader(samples, options);
    std::set<int64_t> seen;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      for (const Batch& batch : loader) {
        expect_rows_match(batch);
        for (int64_t row = 0; row < batch.input.size(0); ++row) {
          seen.insert(batch.target[row].item<int64_t>());
        }
      }
    }
    EXPECT_EQ(seen.size(), 11u) << workers << " workers";
  }
}

TEST(Fields, TheDefaultGetBatchAndWrappersCarryTheFields) {
  auto samples = std::make_shared<MapSamples>(10);
  auto part =
      std::make_shared<Subset>(samples, std::vector<int64_t>{9, 2, 4, 7, 1});
  auto both = std::make_shared<ConcatDataset>(
      std::vector<std::shared_ptr<const Dataset>>{part, tensor_samples(6)});
  EXPECT_EQ(both->spec().fields.size(), 2u);
  for (int64_t workers : {0, 2}) {
    DataLoader loader(
        both, DataLoaderOptions(3).shuffle(true).seed(1).num_workers(workers));
    int64_t rows = 0;
    for (const Batch& batch : loader) {
      expect_rows_match(batch);
      rows += batch.input.size(0);
    }
    EXPECT_EQ(rows, 11);
  }
}

TEST(Fields, ACollateAndUnbatchedLoadingSeeTheSamplesFields) {
  auto samples = std::make_shared<MapSamples>(5);
  // A collate of its own: the mean weight as a field of the batch.
  DataLoaderOptions options(2);
  options.collate([](std::vector<Example> examples) {
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> weights;
    for (const Example& example : examples) {
      inputs.push_back(example.input);
      weights.push_back(example.fields.at("weight"));
    }
    Batch batch{at::stack(inputs), at::Tensor()};
    batch.fields["mean_weight"] = at::stack(weights).mean();
    return batch;
  });
  DataLoader collating(samples, options);
  std::vector<double> means;
  for (const Batch& batch : collating) {
    means.push_back(batch.field("mean_weight").item<double>());
  }
  EXPECT_EQ(means, (std::vector<double>{0.25, 1.25, 2.0}));

  DataLoader unbatched(samples, DataLoaderOptions().batch_size(std::nullopt));
  int64_t i = 0;
  for (const Batch& batch : unbatched) {
    EXPECT_TRUE(at::equal(batch.field("mask"), fields_of(i).at("mask")));
    EXPECT_EQ(batch.field("weight").item<double>(), 0.5 * i);
    ++i;
  }
  EXPECT_EQ(i, 5);
}

TEST(Fields, ASampleThatDisagreesWithTheSpecsFieldsIsNamed) {
  auto samples = std::make_shared<MapSamples>(6);
  auto read_all = [&] {
    DataLoader loader(samples, DataLoaderOptions(6));
    for (const Batch& batch : loader) {
      (void)batch;
    }
  };
  samples->spoil = [](int64_t i, Example& example) {
    if (i == 4) {
      example.fields.erase("mask");
    }
  };
  EXPECT_THAT(
      [&] { read_all(); },
      ::testing::ThrowsMessage<DataError>(
          HasSubstr("batch 0 of epoch 0: sample 4: no field 'mask', which the "
                    "dataset's spec has (its fields: mask, weight)")));
  samples->spoil = [](int64_t i, Example& example) {
    if (i == 3) {
      example.fields["lengths"] = at::tensor(2);
    }
  };
  EXPECT_THAT(
      [&] { read_all(); },
      ::testing::ThrowsMessage<DataError>(
          HasSubstr("sample 3: field 'lengths' is not in the dataset's spec "
                    "(its fields: mask, weight)")));
  samples->spoil = [](int64_t i, Example& example) {
    if (i == 2) {
      example.fields["weight"] = at::Tensor();
    }
  };
  EXPECT_THAT(
      [&] { read_all(); },
      ::testing::ThrowsMessage<DataError>(
          HasSubstr("sample 2: field 'weight' is an undefined tensor")));
  samples->spoil = [](int64_t i, Example& example) {
    if (i == 5) {
      example.fields["mask"] = at::ones({4}, at::kBool);
    }
  };
  EXPECT_THAT(
      [&] { read_all(); },
      ::testing::ThrowsMessage<DataError>(
          HasSubstr("sample 5: field 'mask' has shape [4] but the dataset's "
                    "spec says [3]")));
}

TEST(Fields, BadFieldsAreRefusedNamingThem) {
  const Batch batch{at::zeros({2, 1}), at::zeros({2}), fields_of(0)};
  EXPECT_THAT(
      [&] { batch.field("lengths"); },
      ::testing::ThrowsMessage<Error>(
          HasSubstr("the batch has no field 'lengths' (its fields: mask, "
                    "weight)")));
  EXPECT_THAT(
      [] { Batch{}.field("mask"); },
      ::testing::ThrowsMessage<Error>(HasSubstr("(its fields: none)")));
  EXPECT_THAT(
      [] {
        TensorDataset(
            at::zeros({5, 2}), at::zeros({5}), {{"mask", at::zeros({4, 3})}});
      },
      ::testing::ThrowsMessage<DataError>(
          HasSubstr("there are 5 inputs but 4 rows of field 'mask'")));
  EXPECT_THAT(
      [] {
        TensorDataset(at::zeros({5, 2}), at::zeros({5}), {{"w", at::ones({})}});
      },
      ::testing::ThrowsMessage<DataError>(
          HasSubstr("field 'w' must be [N, ...], got a scalar")));
  // Parts of a concatenation must agree on their fields too.
  auto plain = std::make_shared<TensorDataset>(
      at::zeros({3, 2}), at::zeros({3}, at::kLong));
  EXPECT_THAT(
      [&] {
        ConcatDataset(std::vector<std::shared_ptr<const Dataset>>{
            std::make_shared<MapSamples>(2), plain});
      },
      ::testing::ThrowsMessage<DataError>(HasSubstr(
          "dataset 1's samples are input [2] Float, target [] Long, dataset "
          "0's input [2] Float, target [] Long, field mask [3] Bool, field "
          "weight [] Double")));
}

// A stream of MapSamples' samples, `dtype` for the field "weight".
class FieldStream : public IterableDataset {
 public:
  FieldStream(int64_t n, c10::ScalarType weight_dtype)
      : samples_(n), weight_dtype_(weight_dtype) {}
  SampleSpec spec() const override {
    return samples_.spec();
  }
  std::unique_ptr<SampleStream> stream(
      const StreamContext& context) const override {
    struct Reader : SampleStream {
      Reader(const FieldStream& owner, StreamContext context)
          : owner(owner),
            next_index(context.worker_id),
            step(context.num_workers) {}
      std::optional<Example> next() override {
        if (next_index >= owner.samples_.size()) {
          return std::nullopt;
        }
        Example example = owner.samples_.get(next_index, SampleContext{});
        example.fields["weight"] =
            example.fields["weight"].to(owner.weight_dtype_);
        next_index += step;
        return example;
      }
      const FieldStream& owner;
      int64_t next_index;
      int64_t step;
    };
    return std::make_unique<Reader>(*this, context);
  }

 private:
  MapSamples samples_;
  c10::ScalarType weight_dtype_;
};

TEST(Fields, AStreamsSamplesAreBatchedWithTheirFieldsAndChecked) {
  for (int64_t workers : {0, 2}) {
    DataLoader loader(
        std::make_shared<FieldStream>(9, at::kDouble),
        DataLoaderOptions(2).num_workers(workers));
    int64_t rows = 0;
    for (const Batch& batch : loader) {
      expect_rows_match(batch);
      rows += batch.input.size(0);
    }
    EXPECT_EQ(rows, 9);
  }
  DataLoader unbatched(
      std::make_shared<FieldStream>(2, at::kDouble),
      DataLoaderOptions().batch_size(std::nullopt));
  for (const Batch& batch : unbatched) {
    EXPECT_EQ(batch.field("mask").sizes(), at::IntArrayRef({3}));
  }
  DataLoader wrong_dtype(
      std::make_shared<FieldStream>(4, at::kFloat), DataLoaderOptions(2));
  EXPECT_THAT(
      [&] {
        for (const Batch& batch : wrong_dtype) {
          (void)batch;
        }
      },
      ::testing::ThrowsMessage<DataError>(
          HasSubstr("sample 0 of the batch: field 'weight' is Float but the "
                    "dataset's spec says Double")));
}

} // namespace
} // namespace hotloop::data
