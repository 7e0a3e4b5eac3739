#include "hotloop/data/csv_dataset.h"
#include "hotloop/core/error.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace hotloop::data {
namespace {

using ::hotloop::testing::TempDir;
using ::hotloop::testing::write_bytes;
using ::testing::HasSubstr;

// Writes `text` to `dir/name` and returns the path.
std::string write_csv(
    const TempDir& dir,
    const std::string& text,
    const std::string& name = "data.csv") {
  write_bytes(dir.file(name), std::vector<uint8_t>(text.begin(), text.end()));
  return dir.file(name);
}

TEST(CsvDataset, ReadsFeaturesAndClassLabelsByHeaderName) {
  TempDir dir;
  const std::string path = write_csv(
      dir,
      "a,b,label,c\n"
      "1.5,2,0,-3\n"
      "4,5e-1,2,6.25\n");
  const CsvDataset dataset(path, CsvDatasetOptions().label_column("label"));
  EXPECT_EQ(dataset.size(), 2);
  EXPECT_TRUE(dataset.inputs().equal(
      at::tensor({1.5f, 2.f, -3.f, 4.f, 0.5f, 6.25f}).view({2, 3})));
  EXPECT_TRUE(dataset.targets().equal(at::tensor({0, 2}, at::kLong)));
  EXPECT_EQ(dataset.feature_names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(dataset.label_name(), "label");
  EXPECT_EQ(dataset.num_classes(), 3);
  const SampleSpec spec = dataset.spec();
  EXPECT_EQ(spec.input_shape, std::vector<int64_t>{3});
  EXPECT_EQ(spec.input_dtype, at::kFloat);
  EXPECT_EQ(spec.target_shape, std::vector<int64_t>{});
  EXPECT_EQ(spec.target_dtype, at::kLong);
}

TEST(CsvDataset, LabelIndexCountsFromZeroOrFromTheEnd) {
  TempDir dir;
  const std::string path = write_csv(dir, "1,2,3\n4,5,6\n");
  const auto options = CsvDatasetOptions().header(false);
  const CsvDataset last(path, options);
  EXPECT_TRUE(
      last.inputs().equal(at::tensor({1.f, 2.f, 4.f, 5.f}).view({2, 2})));
  EXPECT_TRUE(last.targets().equal(at::tensor({3, 6}, at::kLong)));
  EXPECT_TRUE(last.feature_names().empty());
  EXPECT_EQ(last.label_name(), "");

  const CsvDataset first(path, CsvDatasetOptions(options).label_index(0));
  EXPECT_TRUE(
      first.inputs().equal(at::tensor({2.f, 3.f, 5.f, 6.f}).view({2, 2})));
  EXPECT_TRUE(first.targets().equal(at::tensor({1, 4}, at::kLong)));

  const CsvDataset middle(path, CsvDatasetOptions(options).label_index(-2));
  EXPECT_TRUE(middle.targets().equal(at::tensor({2, 5}, at::kLong)));
}

TEST(CsvDataset, RegressionTargetsAreFloat32) {
  TempDir dir;
  const std::string path = write_csv(dir, "x,y\n1,0.25\n2,-7.5\n");
  const CsvDataset dataset(path, CsvDatasetOptions().regression(true));
  EXPECT_EQ(dataset.spec().target_dtype, at::kFloat);
  EXPECT_TRUE(dataset.targets().equal(at::tensor({0.25f, -7.5f})));
  EXPECT_EQ(dataset.num_classes(), 0);
}

TEST(CsvDataset, NumbersAreReadAsDoubleThenRoundedToFloat32) {
  TempDir dir;
  // Python: float32(float(text)) for each field.
  const std::string path = write_csv(
      dir,
      "0.1,1e-3,-0,.5,+2.5,1E+10,0\n"
      "3.4028234663852886e38,1.0000000596046447753906251,0x10,7,nan,-inf,1\n");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(path, CsvDatasetOptions().header(false)),
      "data.csv:2: column 3: expected a number, got '0x10'");
  const std::string good = write_csv(
      dir,
      "0.1,1e-3,-0,.5,+2.5,1E+10,0\n"
      "3.4028234663852886e38,1.0000000596046447753906251,16,7,nan,-inf,1\n",
      "good.csv");
  const CsvDataset dataset(good, CsvDatasetOptions().header(false));
  const at::Tensor x = dataset.inputs();
  EXPECT_EQ(x[0][0].item<float>(), static_cast<float>(0.1));
  EXPECT_EQ(x[0][1].item<float>(), static_cast<float>(1e-3));
  EXPECT_TRUE(std::signbit(x[0][2].item<float>()));
  EXPECT_EQ(x[0][3].item<float>(), 0.5f);
  EXPECT_EQ(x[0][4].item<float>(), 2.5f);
  EXPECT_EQ(x[0][5].item<float>(), 1e10f);
  EXPECT_EQ(x[1][0].item<float>(), static_cast<float>(3.4028234663852886e38));
  // Rounded once from the exact decimal, this would be 1 + 2^-23; via the
  // double 1 + 2^-24 it ties to even: 1.
  EXPECT_EQ(x[1][1].item<float>(), 1.0f);
  EXPECT_TRUE(std::isnan(x[1][4].item<float>()));
  EXPECT_EQ(x[1][5].item<float>(), -INFINITY);
}

TEST(CsvDataset, AcceptsQuotesBlanksCrlfByteOrderMarkAndBlankLines) {
  TempDir dir;
  const std::string path = write_csv(
      dir,
      "\xEF\xBB\xBF\"width, cm\" ; \"say \"\"hi\"\"\";class\r\n"
      "\r\n"
      " 1 ;\"2\"; 1 \r\n"
      "   \n"
      "3;4;0");
  const CsvDataset dataset(
      path, CsvDatasetOptions().delimiter(';').label_column("class"));
  EXPECT_EQ(
      dataset.feature_names(),
      (std::vector<std::string>{"width, cm", "say \"hi\""}));
  EXPECT_TRUE(
      dataset.inputs().equal(at::tensor({1.f, 2.f, 3.f, 4.f}).view({2, 2})));
  EXPECT_TRUE(dataset.targets().equal(at::tensor({1, 0}, at::kLong)));
}

TEST(CsvDataset, GetAndGetBatchGiveTheSameRows) {
  TempDir dir;
  std::string text = "f0,f1,f2,y\n";
  for (int i = 0; i < 10; ++i) {
    text += std::to_string(i * 0.5) + "," + std::to_string(-i) + "," +
            std::to_string(i * i) + "," + std::to_string(i % 3) + "\n";
  }
  const CsvDataset dataset(write_csv(dir, text));
  const std::vector<int64_t> indices = {9, 0, 4, 4, 7};
  Batch batch{at::empty({5, 3}), at::empty({5}, at::kLong)};
  dataset.get_batch(indices, SampleContext{}, batch);
  for (size_t k = 0; k < indices.size(); ++k) {
    const Example example = dataset.get(indices[k], SampleContext{});
    const int64_t i = indices[k];
    EXPECT_TRUE(
        example.input.equal(at::tensor({i * 0.5f, float(-i), float(i * i)})));
    EXPECT_EQ(example.target.item<int64_t>(), i % 3);
    EXPECT_TRUE(batch.input[k].equal(example.input));
    EXPECT_TRUE(batch.target[k].equal(example.target));
  }
}

TEST(CsvDataset, MissingEmptyAndHeaderOnlyFilesAreNamed) {
  TempDir dir;
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(dir.file("absent.csv")),
      dir.file("absent.csv") + ": no such file");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(write_csv(dir, "")),
      dir.file("data.csv") + ": empty file");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(write_csv(dir, "\n  \r\n\n")),
      dir.file("data.csv") + ": empty file");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(write_csv(dir, "a,b\n\n")),
      dir.file("data.csv") + ": no data rows after the header");
}

TEST(CsvDataset, RaggedRowsNameTheLine) {
  TempDir dir;
  const std::string path = write_csv(dir, "a,b,c\n1,2,3\n\n4,5\n");
  EXPECT_THROWS_WITH(
      DataError, CsvDataset(path), path + ":4: expected 3 columns, got 2");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(
          write_csv(dir, "1,2\n3,4,5\n"), CsvDatasetOptions().header(false)),
      path + ":2: expected 2 columns, got 3");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(write_csv(dir, "1\n2\n"), CsvDatasetOptions().header(false)),
      path + ":1: expected at least 2 columns (features and a label), got 1");
}

TEST(CsvDataset, BadFieldsNameLineColumnAndHeader) {
  TempDir dir;
  const std::string path = write_csv(
      dir,
      "sepal_length,sepal_width,petal_length,petal_width,species\n"
      "5.1,3.5,1.4,0.2,0\n"
      "4.9,3.0,1.4,abc,0\n");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(path),
      path + ":3: column 4 ('petal_width'): expected a number, got 'abc'");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(write_csv(dir, "1,,2\n"), CsvDatasetOptions().header(false)),
      path + ":1: column 2: missing value");
}

TEST(CsvDataset, ClassLabelsMustBeNonNegativeIntegers) {
  TempDir dir;
  const std::string path = write_csv(dir, "x,y\n1,2.0\n2,2.5\n", "y.csv");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(path),
      path +
          ":3: column 2 ('y'): expected a class index (an integer >= 0), got "
          "'2.5'");
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(write_csv(dir, "x,y\n1,-1\n")),
      "column 2 ('y'): expected a class index (an integer >= 0), got '-1'");
  // Names are classes, numbered in sorted order.
  const CsvDataset named(write_csv(dir, "x,y\n1,dog\n2,cat\n3,dog\n4,7\n"));
  EXPECT_EQ(named.class_names(), (std::vector<std::string>{"7", "cat", "dog"}));
  EXPECT_TRUE(named.targets().equal(at::tensor({2, 1, 2, 0}, at::kLong)));
  EXPECT_EQ(named.num_classes(), 3);
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(write_csv(dir, "x,y\n1,dog\n2,\n")),
      ":3: column 2 ('y'): missing label");
  // Integral values written as floats are class indices; regression takes
  // any number.
  EXPECT_TRUE(CsvDataset(write_csv(dir, "x,y\n1,2.0\n"))
                  .targets()
                  .equal(at::tensor({2}, at::kLong)));
  EXPECT_TRUE(CsvDataset(path, CsvDatasetOptions().regression(true))
                  .targets()
                  .equal(at::tensor({2.f, 2.5f})));
}

TEST(CsvDataset, PicksFeatureColumnsByNameAndFindsTheDelimiter) {
  TempDir dir;
  const std::string path =
      write_csv(dir, "a\tb\tlabel\tc\n1\t2\t0\t3\n4\t5\t1\t6\n", "t.tsv");
  const CsvDataset all(
      path, CsvDatasetOptions().delimiter('\0').label_column("label"));
  EXPECT_EQ(all.feature_names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(all.inputs().equal(
      at::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).view({2, 3})));
  const CsvDataset some(
      path,
      CsvDatasetOptions().delimiter('\0').label_column("label").feature_columns(
          {"c", "a"}));
  EXPECT_EQ(some.feature_names(), (std::vector<std::string>{"c", "a"}));
  EXPECT_TRUE(
      some.inputs().equal(at::tensor({3.f, 1.f, 6.f, 4.f}).view({2, 2})));
  EXPECT_THAT(
      [&] {
        CsvDataset(
            path,
            CsvDatasetOptions()
                .delimiter('\0')
                .label_column("label")
                .feature_columns({"d"}));
      },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
          "data.feature_columns: 'd' is not a column of " + path)));
}

TEST(CsvDataset, BadLabelOptionsNameTheOption) {
  TempDir dir;
  const std::string path = write_csv(dir, "a,b,c\n1,2,3\n");
  EXPECT_THROWS_WITH(
      ConfigError,
      CsvDataset(path, CsvDatasetOptions().label_column("species")),
      "data.label_column 'species' is not a column of " + path +
          " (columns: 'a', 'b', 'c')");
  EXPECT_THROWS_WITH(
      ConfigError,
      CsvDataset(path, CsvDatasetOptions().header(false).label_column("c")),
      "data.label_column needs data.header");
  EXPECT_THROWS_WITH(
      ConfigError,
      CsvDataset(path, CsvDatasetOptions().label_index(3)),
      "data.label_index 3 is out of range for the 3 columns of " + path);
  EXPECT_THROWS_WITH(
      ConfigError,
      CsvDataset(path, CsvDatasetOptions().label_index(-4)),
      "data.label_index -4 is out of range");
}

TEST(CsvDataset, GivenClassesNumberTheLabelsWhateverTheFileHolds) {
  TempDir dir;
  // A file with only some of the model's classes, in another order.
  const std::string path =
      write_csv(dir, "x,kind\n1,dog\n2,bird\n3,dog\n", "some.csv");
  const CsvDataset some(
      path, CsvDatasetOptions().classes({"bird", "cat", "dog"}));
  EXPECT_TRUE(some.targets().equal(at::tensor({2, 0, 2}, at::kLong)));
  EXPECT_EQ(some.num_classes(), 3);
  EXPECT_EQ(
      some.class_names(), (std::vector<std::string>{"bird", "cat", "dog"}));
  // Sorted names alone would have numbered them 1, 0, 1.
  EXPECT_TRUE(
      CsvDataset(path).targets().equal(at::tensor({1, 0, 1}, at::kLong)));
  EXPECT_THROWS_WITH(
      DataError,
      CsvDataset(path, CsvDatasetOptions().classes({"cat", "dog"})),
      path +
          ":3: column 2 ('kind'): 'bird' is not one of the model's classes "
          "('cat', 'dog')");
}

TEST(CsvDataset, AnOptionalLabelColumnMayBeAbsent) {
  TempDir dir;
  const auto options =
      CsvDatasetOptions().label_column("kind").label_optional(true).classes(
          {"cat", "dog"});
  // Without it: every column is a feature and every target -1.
  const CsvDataset unlabeled(write_csv(dir, "x,y\n1,2\n3,4\n5,6\n"), options);
  EXPECT_FALSE(unlabeled.labeled());
  EXPECT_TRUE(unlabeled.inputs().equal(
      at::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).view({3, 2})));
  EXPECT_TRUE(unlabeled.targets().equal(at::full({3}, -1, at::kLong)));
  EXPECT_EQ(unlabeled.num_classes(), 2);
  EXPECT_EQ(unlabeled.label_name(), "kind");
  const CsvDataset values(
      write_csv(dir, "x\n1\n2\n"),
      CsvDatasetOptions().label_column("v").label_optional(true).regression(
          true));
  EXPECT_FALSE(values.labeled());
  EXPECT_TRUE(values.targets().isnan().all().item<bool>());
  // With it: read as usual.
  const CsvDataset labeled(
      write_csv(dir, "x,kind,y\n1,dog,2\n3,cat,4\n"), options);
  EXPECT_TRUE(labeled.labeled());
  EXPECT_TRUE(labeled.targets().equal(at::tensor({1, 0}, at::kLong)));
  EXPECT_THROWS_WITH(
      ConfigError,
      CsvDataset(
          write_csv(dir, "x,y\n1,2\n"),
          CsvDatasetOptions().label_optional(true)),
      "an optional label column needs its name (data.label_column)");
}

} // namespace
} // namespace hotloop::data
