#pragma once

#include "hotloop/cli/fit_config.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/dataset.h"
#include "hotloop/data/image_folder.h"
#include "hotloop/data/sampler.h"
#include "hotloop/train/module.h"

#include <memory>
#include <string>
#include <vector>

namespace hotloop::cli {

/// The datasets and module one command works on, built from the config.
struct Session {
  /// Null when the command does not train.
  std::shared_ptr<data::Dataset> train_set;
  std::shared_ptr<data::Dataset> val_set;
  /// For a text file split into training and validation windows; null for
  /// image datasets (which have their own test split).
  std::shared_ptr<const data::Sampler> train_sampler;
  std::shared_ptr<const data::Sampler> val_sampler;
  std::shared_ptr<train::Module> module;
  /// The validation split's class labels [N] (image datasets only).
  at::Tensor val_labels;
  /// image_folder: the validation split's files, in loader order.
  std::vector<std::string> val_names;
  /// Class k's name (image_folder: its folder); empty where classes are
  /// only numbers.
  std::vector<std::string> class_names;
  /// csv: the feature columns and the training rows' mean and std that
  /// standardized them.
  std::vector<std::string> feature_names;
  std::vector<double> feature_mean;
  std::vector<double> feature_std;
  /// image_folder: the folders read, for what they could not decode.
  std::vector<std::shared_ptr<const data::ImageFolder>> image_folders;
};

/// Seeds LibTorch with config.seed, loads the data (the training split only
/// when `with_train`) and builds the model named by model.name inside its
/// task module: ImageClassifier for the image models, LanguageModel for gpt.
/// Throws ConfigError or DataError naming the key or file.
Session build_session(const FitConfig& config, bool with_train);

/// The DataLoader options for the session's training or validation loader.
data::DataLoaderOptions loader_options(
    const FitConfig& config, const Session& session, bool train);

} // namespace hotloop::cli
