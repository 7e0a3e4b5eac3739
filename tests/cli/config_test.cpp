#include "hotloop/cli/config.h"
#include "hotloop/core/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::cli {
namespace {

using ::testing::HasSubstr;

// Expects `statement` to throw `ErrorType` whose message is exactly `text`.
#define EXPECT_THROW_MESSAGE(statement, ErrorType, text) \
  EXPECT_THAT(                                           \
      [&] { statement; },                                \
      ::testing::ThrowsMessage<ErrorType>(::testing::StrEq(text)))

// Expects `statement` to throw ConfigError whose message contains `text`.
#define EXPECT_CONFIG_ERROR(statement, text) \
  EXPECT_THAT(                               \
      [&] { statement; },                    \
      ::testing::ThrowsMessage<::hotloop::ConfigError>(HasSubstr(text)))

// A fresh folder under the test temp dir, removed with its content.
class ScratchDir {
 public:
  ScratchDir() {
    // TempDir() ends with a slash.
    std::string pattern = ::testing::TempDir() + "hotloop_config_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed for " + pattern);
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::filesystem::remove_all(path_);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const {
    return path_;
  }

  // Writes `text` to `name` in the folder and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::string path = path_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

 private:
  std::string path_;
};

OptionSpec option(
    const std::string& key,
    OptionType type,
    const std::string& default_value,
    std::optional<double> min = std::nullopt,
    std::optional<double> max = std::nullopt,
    std::vector<std::string> choices = {}) {
  return {
      key, type, default_value, "help of " + key, min, max, std::move(choices)};
}

ConfigSchema make_schema() {
  ConfigSchema schema;
  schema.add(option("trainer.max_epochs", OptionType::kInt, "10", 1.0))
      .add(option("trainer.deterministic", OptionType::kBool, "false"))
      .add(option("trainer.seed", OptionType::kInt, "0"))
      .add(option("trainer.name", OptionType::kString, "run"))
      .add(option("data.batch_size", OptionType::kInt, "64", 1.0, 4096.0))
      .add(option("data.mean", OptionType::kFloatList, "[0.5]", 0.0, 1.0))
      .add(option(
          "optimizer.name",
          OptionType::kString,
          "adamw",
          {},
          {},
          {"adam", "adamw", "sgd"}))
      .add(option("optimizer.lr", OptionType::kFloat, "1e-3", 0.0))
      .add(option(
          "lr_scheduler.milestones", OptionType::kIntList, "[30, 60]", 0.0));
  return schema;
}

TEST(ConfigSchema, KeepsOptionsInInsertionOrderAndFindsThem) {
  const ConfigSchema schema = make_schema();
  ASSERT_EQ(schema.options().size(), 9u);
  EXPECT_EQ(schema.options()[0].key, "trainer.max_epochs");
  EXPECT_EQ(schema.options()[8].key, "lr_scheduler.milestones");
  ASSERT_NE(schema.find("data.batch_size"), nullptr);
  EXPECT_EQ(schema.find("data.batch_size")->type, OptionType::kInt);
  EXPECT_EQ(schema.find("data.batch"), nullptr);
  EXPECT_TRUE(schema.is_section("data"));
  EXPECT_FALSE(schema.is_section("dat"));
}

TEST(ConfigSchema, RejectsProgrammerErrorsAsLogicErrors) {
  ConfigSchema schema = make_schema();
  EXPECT_THROW_MESSAGE(
      schema.add(option("trainer.max_epochs", OptionType::kInt, "1")),
      std::logic_error,
      "ConfigSchema: 'trainer.max_epochs' was added twice");
  EXPECT_THROW_MESSAGE(
      schema.add(option("trainer..seed", OptionType::kInt, "1")),
      std::logic_error,
      "ConfigSchema: 'trainer..seed' is not a key like 'section.name'");
  EXPECT_THROW(
      schema.add(option("trainer.", OptionType::kInt, "1")), std::logic_error);
  EXPECT_THROW_MESSAGE(
      schema.add(option("data.mean.r", OptionType::kFloat, "1")),
      std::logic_error,
      "ConfigSchema: 'data.mean.r' clashes with 'data.mean'");
  EXPECT_THROW_MESSAGE(
      schema.add(option("model.width", OptionType::kInt, "0", 1.0)),
      std::logic_error,
      "ConfigSchema: 'model.width' has an invalid default: default: "
      "model.width: must be >= 1, got 0");
  EXPECT_THROW_MESSAGE(
      schema.add(option("model.act", OptionType::kBool, "true", 1.0)),
      std::logic_error,
      "ConfigSchema: 'model.act' has bounds but is not numeric");
  EXPECT_THROW_MESSAGE(
      schema.add(option("model.act", OptionType::kInt, "1", {}, {}, {"a"})),
      std::logic_error,
      "ConfigSchema: 'model.act' has choices but is not a string");
  EXPECT_THROW(
      schema.add(option("model.act", OptionType::kInt, "")), std::logic_error);
  EXPECT_EQ(schema.options().size(), 9u); // nothing added
}

TEST(ConfigSchema, ClosestKeyHasSmallestEditDistance) {
  const ConfigSchema schema = make_schema();
  EXPECT_EQ(schema.closest_key("trainer.max_epoch"), "trainer.max_epochs");
  EXPECT_EQ(schema.closest_key("data.batchsize"), "data.batch_size");
  EXPECT_EQ(schema.closest_key("optimizer.nam"), "optimizer.name");
  // A key missing its section matches on the last segment.
  EXPECT_EQ(schema.closest_key("max_epochs"), "trainer.max_epochs");
  EXPECT_EQ(schema.closest_key("milestone"), "lr_scheduler.milestones");
  // Sections are candidates too.
  EXPECT_EQ(schema.closest_key("optimiser"), "optimizer");
  // Ties go to the earlier option: trainer.name before optimizer.name.
  EXPECT_EQ(schema.closest_key("name"), "trainer.name");
  EXPECT_EQ(ConfigSchema().closest_key("anything"), "");
}

TEST(Config, StartsWithEveryDefaultNoneOfThemSet) {
  const Config config(make_schema());
  EXPECT_EQ(config.get_int("trainer.max_epochs"), 10);
  EXPECT_FALSE(config.get_bool("trainer.deterministic"));
  EXPECT_EQ(config.get_string("trainer.name"), "run");
  EXPECT_EQ(config.get_float_list("data.mean"), std::vector<double>{0.5});
  EXPECT_EQ(config.get_string("optimizer.name"), "adamw");
  EXPECT_DOUBLE_EQ(config.get_float("optimizer.lr"), 1e-3);
  EXPECT_EQ(
      config.get_int_list("lr_scheduler.milestones"),
      (std::vector<int64_t>{30, 60}));
  for (const OptionSpec& spec : config.schema().options()) {
    EXPECT_FALSE(config.is_set(spec.key)) << spec.key;
  }
}

TEST(Config, MergesNestedSectionsAndMarksOnlyThoseKeysSet) {
  Config config(make_schema());
  config.merge_yaml_string(
      "# comment\n"
      "trainer:\n"
      "  max_epochs: 3\n"
      "  deterministic: True\n"
      "  name: my run\n"
      "data:\n"
      "  mean: [0.25, 1]\n"
      "optimizer: {name: sgd, lr: 0.1}\n"
      "lr_scheduler:\n"
      "  milestones:\n"
      "    - 5\n"
      "    - 8\n",
      "a.yaml");
  EXPECT_EQ(config.get_int("trainer.max_epochs"), 3);
  EXPECT_TRUE(config.get_bool("trainer.deterministic"));
  EXPECT_EQ(config.get_string("trainer.name"), "my run");
  EXPECT_EQ(config.get_float_list("data.mean"), (std::vector<double>{0.25, 1}));
  EXPECT_EQ(config.get_string("optimizer.name"), "sgd");
  EXPECT_DOUBLE_EQ(config.get_float("optimizer.lr"), 0.1);
  EXPECT_EQ(
      config.get_int_list("lr_scheduler.milestones"),
      (std::vector<int64_t>{5, 8}));
  EXPECT_TRUE(config.is_set("trainer.max_epochs"));
  EXPECT_FALSE(config.is_set("data.batch_size"));
  EXPECT_EQ(config.get_int("data.batch_size"), 64);
}

TEST(Config, AcceptsDottedKeysEmptySectionsAndEmptyFiles) {
  Config config(make_schema());
  config.merge_yaml_string("trainer.max_epochs: 4\ndata:\n", "a.yaml");
  config.merge_yaml_string("", "empty.yaml");
  config.merge_yaml_string("# only a comment\n", "comment.yaml");
  EXPECT_EQ(config.get_int("trainer.max_epochs"), 4);
}

TEST(Config, AcceptsTopLevelKeysBesideSections) {
  ConfigSchema schema;
  schema.add(option("seed_everything", OptionType::kInt, "0"))
      .add(option("trainer.max_epochs", OptionType::kInt, "10"));
  Config config(schema);
  config.merge_yaml_string(
      "seed_everything: 3\ntrainer:\n  max_epochs: 2\n", "a.yaml");
  EXPECT_EQ(config.get_int("seed_everything"), 3);
  EXPECT_EQ(
      config.to_yaml(), "seed_everything: 3\ntrainer:\n  max_epochs: 2\n");
  EXPECT_EQ(
      parse_args(schema, {"--seed_everything=4"}, {})
          .config.get_int("seed_everything"),
      4);
  EXPECT_EQ(
      help_text(schema),
      "  --seed_everything=0      help of seed_everything\n"
      "trainer:\n"
      "  --trainer.max_epochs=10  help of trainer.max_epochs\n");
}

TEST(Config, AcceptsExponentDecimalAndIntegerTextForFloats) {
  Config config(make_schema());
  for (const auto& [text, value] : std::vector<std::pair<std::string, double>>{
           {"1e-3", 1e-3},
           {"0.001", 1e-3},
           {"2", 2.0},
           {"+.5", 0.5},
           {"3E2", 300.0}}) {
    config.merge_yaml_string("optimizer:\n  lr: " + text + "\n", "a.yaml");
    EXPECT_DOUBLE_EQ(config.get_float("optimizer.lr"), value) << text;
  }
  for (const std::string text : {"inf", ".inf", "nan", "0x10", "1e999"}) {
    EXPECT_CONFIG_ERROR(
        config.set("optimizer.lr", text, "command line"),
        "command line: optimizer.lr: expected a number, got '" + text + "'");
  }
}

TEST(Config, RejectsFractionsAndExponentsForIntegers) {
  Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("trainer:\n  max_epochs: 2.5\n", "x.yaml"),
      ConfigError,
      "x.yaml:2: trainer.max_epochs: expected an integer, got '2.5'");
  EXPECT_CONFIG_ERROR(
      config.set("trainer.max_epochs", "1e3", "command line"),
      "expected an integer, got '1e3'");
  EXPECT_CONFIG_ERROR(
      config.set("trainer.seed", "99999999999999999999", "command line"),
      "expected an integer, got '99999999999999999999'");
  config.set("trainer.seed", "-7", "command line");
  EXPECT_EQ(config.get_int("trainer.seed"), -7);
}

TEST(Config, AcceptsOnlyTrueAndFalseForBooleans) {
  Config config(make_schema());
  config.set("trainer.deterministic", "True", "command line");
  EXPECT_TRUE(config.get_bool("trainer.deterministic"));
  config.set("trainer.deterministic", "false", "command line");
  EXPECT_FALSE(config.get_bool("trainer.deterministic"));
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("trainer:\n  deterministic: yes\n", "x.yaml"),
      ConfigError,
      "x.yaml:2: trainer.deterministic: expected true or false, got 'yes'");
  EXPECT_CONFIG_ERROR(
      config.set("trainer.deterministic", "1", "command line"),
      "expected true or false, got '1'");
}

TEST(Config, UnknownKeySuggestsClosestValidKey) {
  Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string(
          "data:\n  batch_size: 8\ntrainer:\n  max_epoch: 3\n",
          "configs/x.yaml"),
      ConfigError,
      "configs/x.yaml:4: unknown key 'trainer.max_epoch'; did you mean "
      "'trainer.max_epochs'?");
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("trainr:\n  max_epochs: 3\n", "x.yaml"),
      ConfigError,
      "x.yaml:1: unknown key 'trainr'; did you mean 'trainer'?");
  EXPECT_THROW_MESSAGE(
      config.set("data.batchsize", "3", "command line"),
      ConfigError,
      "command line: unknown key 'data.batchsize'; did you mean "
      "'data.batch_size'?");
  // A key more than half its length away from every option, or too long
  // to be a mistyped one, gets no suggestion (long keys made the search
  // slow: fuzz/overrides_fuzzer).
  EXPECT_THROW_MESSAGE(
      config.set("zzzzzz", "3", "command line"),
      ConfigError,
      "command line: unknown key 'zzzzzz'");
  const std::string long_key = "data.batch_size" + std::string(120, '_');
  EXPECT_THROW_MESSAGE(
      config.set(long_key, "3", "command line"),
      ConfigError,
      "command line: unknown key '" + long_key + "'");
}

TEST(Config, WrongTypeNamesFileLineKeyAndValue) {
  Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string(
          "# epochs\n\ntrainer:\n  max_epochs: ten\n", "configs/x.yaml"),
      ConfigError,
      "configs/x.yaml:4: trainer.max_epochs: expected an integer, got 'ten'");
  EXPECT_THROW_MESSAGE(
      config.set("trainer.max_epochs", "ten", "command line"),
      ConfigError,
      "command line: trainer.max_epochs: expected an integer, got 'ten'");
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("trainer:\n  max_epochs: [1, 2]\n", "x.yaml"),
      ConfigError,
      "x.yaml:2: trainer.max_epochs: expected an integer, got '[1, 2]'");
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("trainer:\n  name: {a: 1}\n", "x.yaml"),
      ConfigError,
      "x.yaml:2: trainer.name: expected a string, got '{a: 1}'");
}

TEST(Config, OutOfRangeValueNamesTheBound) {
  Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("data:\n  batch_size: 0\n", "x.yaml"),
      ConfigError,
      "x.yaml:2: data.batch_size: must be >= 1, got 0");
  EXPECT_THROW_MESSAGE(
      config.set("data.batch_size", "5000", "command line"),
      ConfigError,
      "command line: data.batch_size: must be <= 4096, got 5000");
  EXPECT_THROW_MESSAGE(
      config.set("optimizer.lr", "-1e-3", "command line"),
      ConfigError,
      "command line: optimizer.lr: must be >= 0, got -1e-3");
  config.set("data.batch_size", "4096", "command line");
  EXPECT_EQ(config.get_int("data.batch_size"), 4096);
}

TEST(Config, ValueOutsideChoicesListsThem) {
  Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("optimizer:\n  name: adamx\n", "x.yaml"),
      ConfigError,
      "x.yaml:2: optimizer.name: expected one of adam, adamw, sgd, got "
      "'adamx'");
  config.set("optimizer.name", "adam", "command line");
  EXPECT_EQ(config.get_string("optimizer.name"), "adam");
}

TEST(Config, ListElementsAreTypedAndBoundedOneByOne) {
  Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("data:\n  mean: [0.5, x]\n", "x.yaml"),
      ConfigError,
      "x.yaml:2: data.mean[1]: expected a number, got 'x'");
  EXPECT_THROW_MESSAGE(
      config.set("data.mean", "[0.5, 2]", "command line"),
      ConfigError,
      "command line: data.mean[1]: must be <= 1, got 2");
  EXPECT_THROW_MESSAGE(
      config.set("lr_scheduler.milestones", "[1, 2.5]", "command line"),
      ConfigError,
      "command line: lr_scheduler.milestones[1]: expected an integer, got "
      "'2.5'");
  EXPECT_THROW_MESSAGE(
      config.set("data.mean", "0.5,x", "command line"),
      ConfigError,
      "command line: data.mean[1]: expected a number, got 'x'");
  EXPECT_THROW_MESSAGE(
      config.set("lr_scheduler.milestones", "8,,16", "command line"),
      ConfigError,
      "command line: lr_scheduler.milestones[1]: expected an integer, got an "
      "empty value");
  EXPECT_THROW_MESSAGE(
      config.set("data.mean", "[0.5", "command line"),
      ConfigError,
      "command line: data.mean: expected a list of numbers, got '[0.5'");
  config.set("lr_scheduler.milestones", "[]", "command line");
  EXPECT_TRUE(config.get_int_list("lr_scheduler.milestones").empty());
}

TEST(Config, AScalarWhereAListIsExpectedIsOneElementAndCommasSeparate) {
  // As Lightning's CLI takes them: `--data.image_size=32`, YAML
  // `image_size: 32`, `--data.mean=0.5`, `--model.channels=8,16`.
  Config config(make_schema());
  config.set("data.mean", "0.5", "command line");
  EXPECT_EQ(config.get_float_list("data.mean"), std::vector<double>{0.5});
  config.set("lr_scheduler.milestones", "8,16", "command line");
  EXPECT_EQ(
      config.get_int_list("lr_scheduler.milestones"),
      (std::vector<int64_t>{8, 16}));
  config.set("lr_scheduler.milestones", " 3 , 4 ", "command line");
  EXPECT_EQ(
      config.get_int_list("lr_scheduler.milestones"),
      (std::vector<int64_t>{3, 4}));
  config.merge_yaml_string(
      "data:\n  mean: 0.25\nlr_scheduler:\n  milestones: 7\n", "x.yaml");
  EXPECT_EQ(config.get_float_list("data.mean"), std::vector<double>{0.25});
  EXPECT_EQ(
      config.get_int_list("lr_scheduler.milestones"), std::vector<int64_t>{7});
  // Bounds hold for every element however the list was written.
  EXPECT_THROW_MESSAGE(
      config.set("data.mean", "0.5, 2", "command line"),
      ConfigError,
      "command line: data.mean[1]: must be <= 1, got 2");
  // The round trip writes lists as lists.
  Config again(make_schema());
  again.merge_yaml_string(config.to_yaml(), "resolved");
  EXPECT_EQ(again.get_float_list("data.mean"), std::vector<double>{0.25});
}

TEST(Config, AnEmptyValueIsAnEmptyStringAndAnErrorForOtherTypes) {
  Config config(make_schema());
  for (const std::string value : {"", " null", " ~"}) {
    EXPECT_THROW_MESSAGE(
        config.merge_yaml_string("trainer:\n  max_epochs:" + value, "x.yaml"),
        ConfigError,
        "x.yaml:2: trainer.max_epochs: expected an integer, got an empty "
        "value");
  }
  for (const std::string value : {"", "null", "~"}) {
    EXPECT_THROW_MESSAGE(
        config.set("trainer.max_epochs", value, "command line"),
        ConfigError,
        value.empty()
            ? "command line: trainer.max_epochs: expected an integer, got an "
              "empty value"
            : "command line: trainer.max_epochs: expected an integer, got '" +
                  value + "'");
    EXPECT_THROW(config.set("data.mean", value, "command line"), ConfigError);
    EXPECT_THROW(
        config.set("trainer.deterministic", value, "command line"),
        ConfigError);
  }
  EXPECT_CONFIG_ERROR(
      config.merge_yaml_string("data:\n  mean:\n", "x.yaml"),
      "x.yaml:2: data.mean: expected a list of numbers, got an empty value");
  // A string may be empty, in a file as on the command line: YAML's empty
  // value, null, ~ and a quoted "" or ''.
  for (const std::string value : {"", " null", " ~", " \"\"", " ''"}) {
    config.set("trainer.name", "x", "command line");
    config.merge_yaml_string("trainer:\n  name:" + value + "\n", "x.yaml");
    EXPECT_EQ(config.get_string("trainer.name"), "") << value;
  }
  for (const std::string value : {"", "\"\"", "''", "null", "~"}) {
    config.set("trainer.name", "x", "command line");
    config.set("trainer.name", value, "command line");
    EXPECT_EQ(config.get_string("trainer.name"), "") << value;
  }
  // Anything else stays verbatim, quotes included.
  config.set("trainer.name", "\"a\"", "command line");
  EXPECT_EQ(config.get_string("trainer.name"), "\"a\"");
}

TEST(Config, MalformedYamlGivesLineAndColumn) {
  Config config(make_schema());
  EXPECT_THAT(
      [&] {
        config.merge_yaml_string(
            "trainer:\n  max_epochs: 3\n  seed: [1, 2\ndata: 4\n",
            "configs/x.yaml");
      },
      ::testing::ThrowsMessage<ConfigError>(::testing::MatchesRegex(
          "configs/x\\.yaml:[0-9]+:[0-9]+: malformed YAML: [^\n]+")));
  EXPECT_CONFIG_ERROR(
      config.merge_yaml_string("a: 1\n b: 2\n", "x.yaml"),
      "x.yaml:2:3: malformed YAML: illegal map value");
}

TEST(Config, TopLevelAndSectionsMustBeMaps) {
  Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("5\n", "x.yaml"),
      ConfigError,
      "x.yaml:1: expected a map of sections at the top level, got '5'");
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("- trainer\n", "x.yaml"),
      ConfigError,
      "x.yaml:1: expected a map of sections at the top level, got "
      "'[trainer]'");
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string("data: {}\ntrainer: 5\n", "x.yaml"),
      ConfigError,
      "x.yaml:2: trainer: expected a map of keys, got '5'");
}

TEST(Config, KeyGivenTwiceInOneMapIsAnError) {
  Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_string(
          "trainer:\n  max_epochs: 1\n  max_epochs: 2\n", "x.yaml"),
      ConfigError,
      "x.yaml:3: duplicate key 'trainer.max_epochs'");
}

TEST(Config, FailedMergeChangesNothing) {
  Config config(make_schema());
  EXPECT_THROW(
      config.merge_yaml_string(
          "trainer:\n  max_epochs: 3\n  seed: x\n", "x.yaml"),
      ConfigError);
  EXPECT_EQ(config.get_int("trainer.max_epochs"), 10);
  EXPECT_FALSE(config.is_set("trainer.max_epochs"));
}

TEST(Config, MergesFilesInOrderLaterWins) {
  ScratchDir dir;
  const std::string a =
      dir.write("a.yaml", "trainer:\n  max_epochs: 3\n  seed: 1\n");
  const std::string b = dir.write("b.yaml", "trainer:\n  seed: 2\n");
  Config config(make_schema());
  config.merge_yaml_file(a);
  config.merge_yaml_file(b);
  EXPECT_EQ(config.get_int("trainer.max_epochs"), 3);
  EXPECT_EQ(config.get_int("trainer.seed"), 2);
}

TEST(Config, MissingOrDirectoryFileIsAnError) {
  ScratchDir dir;
  const std::string bad = dir.write("bad.yaml", "trainer:\n  seed: x\n");
  Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_file("nope.yaml"),
      ConfigError,
      "config file 'nope.yaml' does not exist");
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_file(dir.path()),
      ConfigError,
      "config file '" + dir.path() + "' is a directory");
  EXPECT_THROW_MESSAGE(
      config.merge_yaml_file(bad),
      ConfigError,
      bad + ":2: trainer.seed: expected an integer, got 'x'");
}

TEST(Config, GettersRejectUnknownKeysAndWrongTypes) {
  const Config config(make_schema());
  EXPECT_THROW_MESSAGE(
      config.get_int("trainer.max_epoch"),
      std::logic_error,
      "Config: unknown key 'trainer.max_epoch'");
  EXPECT_THROW_MESSAGE(
      config.get_float("trainer.max_epochs"),
      std::logic_error,
      "Config: 'trainer.max_epochs' holds an integer, not a number");
  EXPECT_THROW(config.get_string("data.mean"), std::logic_error);
  EXPECT_THROW(config.get_bool("trainer.seed"), std::logic_error);
  EXPECT_THROW(config.get_int_list("data.mean"), std::logic_error);
  EXPECT_THROW(config.get_float_list("optimizer.lr"), std::logic_error);
}

TEST(Config, ToYamlNestsEveryKeyBySection) {
  Config config(make_schema());
  config.set("optimizer.lr", "0.1", "command line");
  EXPECT_EQ(
      config.to_yaml(),
      "trainer:\n"
      "  max_epochs: 10\n"
      "  deterministic: false\n"
      "  seed: 0\n"
      "  name: run\n"
      "data:\n"
      "  batch_size: 64\n"
      "  mean: [0.5]\n"
      "optimizer:\n"
      "  name: adamw\n"
      "  lr: 0.1\n"
      "lr_scheduler:\n"
      "  milestones: [30, 60]\n");
}

TEST(Config, ToYamlRoundTripsEveryValue) {
  Config config(make_schema());
  config.merge_yaml_string(
      "trainer: {max_epochs: 7, deterministic: true, seed: -3}\n"
      "data: {batch_size: 8, mean: [0.1, 0.2, 0.30000000000000004]}\n"
      "optimizer: {name: sgd, lr: 3.0e-4}\n"
      "lr_scheduler: {milestones: []}\n",
      "a.yaml");
  for (const std::string name :
       {"null",
        "",
        "true",
        "10",
        "a #b",
        "x: y",
        "~",
        "[1]",
        " pad ",
        "it's \"q\""}) {
    if (name.empty() || name == "null" || name == "~") {
      // On the command line these three mean the empty string.
      config.merge_yaml_string("trainer: {name: '" + name + "'}", "a.yaml");
    } else {
      config.set("trainer.name", name, "command line");
    }
    Config reloaded(make_schema());
    reloaded.merge_yaml_string(config.to_yaml(), "resolved.yaml");
    EXPECT_EQ(reloaded.get_string("trainer.name"), name);
    EXPECT_EQ(reloaded.to_yaml(), config.to_yaml());
  }
  Config reloaded(make_schema());
  reloaded.merge_yaml_string(config.to_yaml(), "resolved.yaml");
  EXPECT_EQ(reloaded.get_int("trainer.max_epochs"), 7);
  EXPECT_TRUE(reloaded.get_bool("trainer.deterministic"));
  EXPECT_EQ(reloaded.get_int("trainer.seed"), -3);
  EXPECT_EQ(reloaded.get_int("data.batch_size"), 8);
  EXPECT_EQ(
      reloaded.get_float_list("data.mean"),
      (std::vector<double>{0.1, 0.2, 0.30000000000000004}));
  EXPECT_EQ(reloaded.get_float("optimizer.lr"), 3.0e-4);
  EXPECT_TRUE(reloaded.get_int_list("lr_scheduler.milestones").empty());
}

TEST(ParseArgs, OverridesApplyInOrderSoTheLaterWins) {
  ScratchDir dir;
  const std::string a =
      dir.write("a.yaml", "trainer:\n  max_epochs: 5\n  seed: 1\n");
  const std::string b = dir.write("b.yaml", "trainer:\n  seed: 2\n");
  const ConfigSchema schema = make_schema();

  ParsedArgs after =
      parse_args(schema, {"--config", a, "--trainer.max_epochs=3"}, {});
  EXPECT_EQ(after.config.get_int("trainer.max_epochs"), 3);
  EXPECT_EQ(after.config.get_int("trainer.seed"), 1);

  ParsedArgs before =
      parse_args(schema, {"--trainer.max_epochs=3", "--config=" + a}, {});
  EXPECT_EQ(before.config.get_int("trainer.max_epochs"), 5);

  ParsedArgs files = parse_args(schema, {"--config", a, "--config", b}, {});
  EXPECT_EQ(files.config.get_int("trainer.max_epochs"), 5);
  EXPECT_EQ(files.config.get_int("trainer.seed"), 2);
  EXPECT_TRUE(files.extra.empty());
}

TEST(ParseArgs, AcceptsInlineAndSeparateValues) {
  const ParsedArgs parsed = parse_args(
      make_schema(),
      {"--trainer.max_epochs",
       "2",
       "--trainer.seed",
       "-5",
       "--data.mean=[0.25, 0.75]",
       "--trainer.name",
       "a=b c",
       "--optimizer.lr=1e-4"},
      {});
  EXPECT_EQ(parsed.config.get_int("trainer.max_epochs"), 2);
  EXPECT_EQ(parsed.config.get_int("trainer.seed"), -5);
  EXPECT_EQ(
      parsed.config.get_float_list("data.mean"),
      (std::vector<double>{0.25, 0.75}));
  EXPECT_EQ(parsed.config.get_string("trainer.name"), "a=b c");
  EXPECT_DOUBLE_EQ(parsed.config.get_float("optimizer.lr"), 1e-4);
  EXPECT_TRUE(parsed.config.is_set("trainer.seed"));
  EXPECT_FALSE(parsed.config.is_set("data.batch_size"));
}

TEST(ParseArgs, BoolFlagAloneMeansTrue) {
  const ConfigSchema schema = make_schema();
  EXPECT_TRUE(parse_args(schema, {"--trainer.deterministic"}, {})
                  .config.get_bool("trainer.deterministic"));
  const ParsedArgs followed =
      parse_args(schema, {"--trainer.deterministic", "--trainer.seed=1"}, {});
  EXPECT_TRUE(followed.config.get_bool("trainer.deterministic"));
  EXPECT_EQ(followed.config.get_int("trainer.seed"), 1);
  EXPECT_FALSE(
      parse_args(
          schema,
          {"--trainer.deterministic=true", "--trainer.deterministic", "false"},
          {})
          .config.get_bool("trainer.deterministic"));
}

TEST(ParseArgs, ReturnsGivenExtraFlagsWithTheirValues) {
  const ParsedArgs parsed = parse_args(
      make_schema(),
      {"--ckpt_path", "last", "--help", "--trainer.seed=3", "--print_config"},
      {"ckpt_path", "help", "print_config", "unused"});
  EXPECT_EQ(
      parsed.extra,
      (std::map<std::string, std::string>{
          {"ckpt_path", "last"}, {"help", ""}, {"print_config", ""}}));
  EXPECT_EQ(parsed.config.get_int("trainer.seed"), 3);
  EXPECT_EQ(
      parse_args(make_schema(), {"--ckpt_path=a.ckpt"}, {"ckpt_path"})
          .extra.at("ckpt_path"),
      "a.ckpt");
}

TEST(ParseArgs, UnknownOptionSuggestsClosestValidOption) {
  const ConfigSchema schema = make_schema();
  EXPECT_THROW_MESSAGE(
      parse_args(schema, {"--trainer.max_epoch=3"}, {"ckpt_path"}),
      ConfigError,
      "unknown option '--trainer.max_epoch'; did you mean "
      "'--trainer.max_epochs'?");
  EXPECT_THROW_MESSAGE(
      parse_args(schema, {"--ckpt_pth", "x"}, {"ckpt_path"}),
      ConfigError,
      "unknown option '--ckpt_pth'; did you mean '--ckpt_path'?");
  EXPECT_THROW_MESSAGE(
      parse_args(schema, {"--confg", "a.yaml"}, {}),
      ConfigError,
      "unknown option '--confg'; did you mean '--config'?");
  EXPECT_THROW_MESSAGE(
      parse_args(schema, {"fit"}, {}),
      ConfigError,
      "unexpected argument 'fit'; options look like --section.key=VALUE");
}

TEST(ParseArgs, OptionWithoutValueIsAnError) {
  const ConfigSchema schema = make_schema();
  EXPECT_THROW_MESSAGE(
      parse_args(schema, {"--trainer.max_epochs"}, {}),
      ConfigError,
      "option '--trainer.max_epochs' expects a value");
  EXPECT_THROW_MESSAGE(
      parse_args(schema, {"--trainer.max_epochs", "--trainer.seed=1"}, {}),
      ConfigError,
      "option '--trainer.max_epochs' expects a value");
  EXPECT_THROW_MESSAGE(
      parse_args(schema, {"--config"}, {}),
      ConfigError,
      "option '--config' expects a value");
}

TEST(ParseArgs, ValueAndFileErrorsNameTheirSource) {
  const ConfigSchema schema = make_schema();
  EXPECT_THROW_MESSAGE(
      parse_args(schema, {"--trainer.max_epochs", "ten"}, {}),
      ConfigError,
      "command line: trainer.max_epochs: expected an integer, got 'ten'");
  EXPECT_THROW_MESSAGE(
      parse_args(schema, {"--config", "nope.yaml"}, {}),
      ConfigError,
      "config file 'nope.yaml' does not exist");
}

TEST(HelpText, ListsEveryKeyWithItsDefaultGroupedAndAligned) {
  OptionSpec fast = option("trainer.fast", OptionType::kBool, "False");
  fast.help = "";
  ConfigSchema schema;
  schema.add(option("trainer.max_epochs", OptionType::kInt, "10"))
      .add(option("data.mean", OptionType::kFloatList, "[0.5,0.5]"))
      .add(fast)
      .add(option(
          "optimizer.name",
          OptionType::kString,
          "adamw",
          {},
          {},
          {"adam", "adamw"}));
  EXPECT_EQ(
      help_text(schema),
      "trainer:\n"
      "  --trainer.max_epochs=10  help of trainer.max_epochs\n"
      "  --trainer.fast=false\n"
      "data:\n"
      "  --data.mean=[0.5, 0.5]   help of data.mean\n"
      "optimizer:\n"
      "  --optimizer.name=adamw   help of optimizer.name (one of adam, "
      "adamw)\n");
}

TEST(HelpText, GroupsASectionsOptionsByTheKindTheyApplyTo) {
  const auto helped = [](const std::string& key,
                         OptionType type,
                         const std::string& value,
                         const std::string& help) {
    return OptionSpec{key, type, value, help, std::nullopt, std::nullopt, {}};
  };
  ConfigSchema schema;
  schema.add(helped("data.batch_size", OptionType::kInt, "8", "batch"))
      .add(helped("data.path", OptionType::kString, "", "text: the file"))
      .add(helped(
          "data.root", OptionType::kString, "", "idx: a folder; images: too"))
      .add(helped("data.size", OptionType::kInt, "2", "images: the side"))
      .add(helped("data.block", OptionType::kInt, "4", "text: window; 0: all"));
  EXPECT_EQ(
      help_text(schema),
      "data:\n"
      "  --data.batch_size=8  batch\n"
      "  --data.root=\"\"       idx: a folder; images: too\n"
      " data for text:\n"
      "  --data.path=\"\"       the file\n"
      "  --data.block=4       window; 0: all\n"
      " data for images:\n"
      "  --data.size=2        the side\n");
}

TEST(HelpText, ShowsEveryOptionOfTheSchema) {
  const std::string help = help_text(make_schema());
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"trainer.max_epochs", "10"},
           {"trainer.deterministic", "false"},
           {"trainer.seed", "0"},
           {"trainer.name", "run"},
           {"data.batch_size", "64"},
           {"data.mean", "[0.5]"},
           {"optimizer.name", "adamw"},
           {"optimizer.lr", "0.001"},
           {"lr_scheduler.milestones", "[30, 60]"}}) {
    const std::string flag = "\n  --" + key + "=" + value + " ";
    const size_t start = help.find(flag);
    ASSERT_NE(start, std::string::npos) << flag;
    const std::string line =
        help.substr(start + 1, help.find('\n', start + 1) - start - 1);
    EXPECT_THAT(line, HasSubstr("  help of " + key));
  }
}

} // namespace
} // namespace hotloop::cli
