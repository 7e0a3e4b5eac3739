#pragma once

#include "hotloop/cli/config.h"
#include "hotloop/data/image_dataset.h"
#include "hotloop/data/transforms.h"

#include <torch/nn/modules/container/any.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hotloop::cli {

/// What a registered model is built from: the resolved config (its own
/// options included, under `model.`) and the shape of the data.
struct ModelInputs {
  static constexpr const char* kSection = "model";
  const Config& config;
  int64_t in_channels;
  int64_t height;
  int64_t width;
  /// model.num_classes.
  int64_t num_classes;
};

/// What a registered dataset is built from: the resolved config (its own
/// options included, under `data.`), the split, and the transform hotloop
/// gives that split (augmentation for training, normalization for both).
struct DatasetInputs {
  static constexpr const char* kSection = "data";
  const Config& config;
  bool train;
  const data::ImageTransformOptions& transform;
};

/// One model or dataset of the user's own, for the command line: its name,
/// its options and how it is built.
///
/// A ModelRegistration names a network for `model.name`: an image
/// classifier that maps [N, C, H, W] images to [N, num_classes] logits,
/// trained by hotloop's ImageClassifier exactly as the built-in models are.
/// A DatasetRegistration names a dataset for `data.dataset`: uint8 images
/// [N, C, H, W] with int64 class labels, one split for training and one for
/// validation (and test and predict).
///
///   static const bool registered = hotloop::cli::register_model(
///       hotloop::cli::ModelRegistration("tiny_net", "two linear layers")
///           .option("width", OptionType::kInt, "64", "hidden width", 1)
///           .build([](const hotloop::cli::ModelInputs& in) {
///             return torch::nn::AnyModule(TinyNet(
///                 in.config.get_int("model.width"), in.num_classes));
///           }));
template <typename Inputs, typename Product>
class Registration {
 public:
  using Builder = std::function<Product(const Inputs&)>;

  /// `name` is the value of model.name or data.dataset (lowercase letters,
  /// digits and `_`); `help` one line for `--help`.
  Registration(std::string name, std::string help)
      : name_(std::move(name)), help_(std::move(help)) {}

  /// Adds the option `model.<key>` (`data.<key>` for a dataset) to every
  /// command's config, with a default (YAML text) and, for numbers,
  /// inclusive bounds.
  Registration& option(
      const std::string& key,
      OptionType type,
      std::string default_value,
      std::string help,
      std::optional<double> min = std::nullopt,
      std::optional<double> max = std::nullopt) {
    OptionSpec spec;
    spec.key = std::string(Inputs::kSection) + "." + key;
    spec.type = type;
    spec.default_value = std::move(default_value);
    spec.help = name_ + ": " + help;
    spec.min = min;
    spec.max = max;
    options_.push_back(std::move(spec));
    return *this;
  }

  /// How it is made; called once per command, after seeding.
  Registration& build(Builder builder) {
    builder_ = std::move(builder);
    return *this;
  }

  const std::string& name() const {
    return name_;
  }
  const std::string& help() const {
    return help_;
  }
  const std::vector<OptionSpec>& options() const {
    return options_;
  }
  const Builder& builder() const {
    return builder_;
  }

 private:
  std::string name_;
  std::string help_;
  std::vector<OptionSpec> options_;
  Builder builder_;
};

using ModelRegistration = Registration<ModelInputs, torch::nn::AnyModule>;
using DatasetRegistration = Registration<
    DatasetInputs,
    std::shared_ptr<data::ImageClassificationDataset>>;

/// Makes a model or dataset available to the command line (`model.name=`,
/// `data.dataset=`) with its options in `--help`, config files, overrides,
/// checkpoints, resume and report. Call before the command line runs, for
/// example from a static initializer; returns true so that its result can
/// initialize one. Throws std::logic_error (a programmer error) for a
/// malformed or taken name, an option key that exists already, a missing
/// builder, or a call after the command line's options were built.
bool register_model(ModelRegistration registration);
bool register_dataset(DatasetRegistration registration);

/// The registered model or dataset named `name`, or nullptr.
const ModelRegistration* find_model(const std::string& name);
const DatasetRegistration* find_dataset(const std::string& name);

/// The names hotloop itself gives model.name and data.dataset.
const std::vector<std::string>& built_in_models();
const std::vector<std::string>& built_in_datasets();

/// Every registration, in the order they were made.
const std::vector<ModelRegistration>& registered_models();
const std::vector<DatasetRegistration>& registered_datasets();

namespace detail {
/// Called by fit_schema() when it builds the options: later registrations
/// are refused, since they could not reach the command line any more.
void close_registry();
} // namespace detail

} // namespace hotloop::cli
