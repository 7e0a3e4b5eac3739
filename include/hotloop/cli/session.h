#pragma once

#include "hotloop/cli/fit_config.h"
#include "hotloop/cli/trained_data.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/dataset.h"
#include "hotloop/data/image_folder.h"
#include "hotloop/data/sampler.h"
#include "hotloop/train/module.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::cli {

/// The datasets and module one command works on, built from the config.
struct Session {
  /// Null when the command does not train.
  std::shared_ptr<data::Dataset> train_set;
  std::shared_ptr<data::Dataset> val_set;
  std::shared_ptr<train::Module> module;
  /// The validation split's class labels [N] (classifiers only).
  at::Tensor val_labels;
  /// false for samples to predict that carry no labels (data.predict_root,
  /// a data.predict_path without its label column).
  bool labeled = true;
  /// image_folder: the validation split's files, in loader order.
  std::vector<std::string> val_names;
  /// Class names (image_folder: its folders; csv: named labels), a
  /// table's columns and standardization: what checkpoints keep.
  TrainedData data;
  /// Settings the data decided, as (key, YAML text): an idx folder's
  /// normalization statistics and class count. A fit writes them into its
  /// config.yaml (with resolve_config's), which then reruns as it ran.
  std::vector<std::pair<std::string, std::string>> settings;
  /// image_folder: the folders read, for what they could not decode.
  std::vector<std::shared_ptr<const data::ImageFolder>> image_folders;
};

/// Seeds LibTorch with config.seed, loads the data (the training split only
/// when `with_train`) and builds the model named by model.name inside its
/// task module: ImageClassifier for the image models, LanguageModel for gpt.
/// `trained` (a checkpoint's, for validate, test and predict) gives the
/// classes' names and order, a table's columns and standardization, instead
/// of taking them from the training data again; with it, data.predict_root
/// and data.predict_path need nothing else. Throws ConfigError or DataError
/// naming the key or file.
Session build_session(
    const FitConfig& config,
    bool with_train,
    const TrainedData* trained = nullptr);

/// The DataLoader options for the session's training or validation loader.
data::DataLoaderOptions loader_options(
    const FitConfig& config, const Session& session, bool train);

} // namespace hotloop::cli
