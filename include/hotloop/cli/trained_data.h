#pragma once

#include "hotloop/train/callback.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace hotloop::cli {

/// What a model was trained on, beyond its weights, that using it needs:
/// the classes' names and a table's feature columns with the training
/// rows' statistics that standardized them. Every checkpoint of a CLI fit
/// keeps it (the state of TrainedDataCallback, key "data"), so that
/// predict and test on other files read them as the model was trained,
/// with nothing but the checkpoint.
struct TrainedData {
  /// The classifier's class count (0: a regression, or not known).
  int64_t num_classes = 0;
  /// Class k's name; empty where classes are only numbers.
  std::vector<std::string> class_names;
  /// csv: the label column's name; the feature columns in the model's
  /// input order, and their mean and standard deviation over the training
  /// rows.
  std::string label_name;
  std::vector<std::string> feature_names;
  std::vector<double> feature_mean;
  std::vector<double> feature_std;
  /// csv regression: the training rows' target mean and standard deviation,
  /// with which the model learns the standardized target (nullopt: a
  /// checkpoint written before targets were standardized).
  std::optional<double> target_mean;
  std::optional<double> target_std;

  bool empty() const {
    return num_classes == 0 && feature_names.empty();
  }
  nlohmann::json to_json() const;
  /// Throws Error naming `source` when a field is missing its pair or has
  /// the wrong type.
  static TrainedData from_json(
      const nlohmann::json& state, const std::string& source);
};

/// The TrainedData kept in the checkpoint `path`; nullopt for one without
/// it (written before checkpoints kept it, or by a program of one's own).
/// Throws Error naming the file when it cannot be read.
std::optional<TrainedData> read_trained_data(const std::string& path);

/// Throws ConfigError naming the first difference when `now` has other
/// classes or feature columns than `trained` (a checkpoint's), and the
/// way out.
void require_same_data(const TrainedData& trained, const TrainedData& now);

/// Keeps a fit's TrainedData in its checkpoints. On resume it refuses a
/// checkpoint trained on other classes or feature columns (ConfigError
/// naming the first difference), which the model's shape alone would not
/// always reveal (two classes renamed, two columns swapped).
class TrainedDataCallback : public train::Callback {
 public:
  explicit TrainedDataCallback(TrainedData data) : data_(std::move(data)) {}

  std::string state_key() const override {
    return "data";
  }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 private:
  TrainedData data_;
};

} // namespace hotloop::cli
