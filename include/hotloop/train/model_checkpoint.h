#pragma once

#include "hotloop/train/callback.h"

#include <torch/arg.h>

#include <cstdint>
#include <map>
#include <string>

namespace hotloop::train {

/// ModelCheckpoint settings, named as Lightning's.
struct ModelCheckpointOptions {
  /// Folder for the checkpoints; empty: `<run folder>/checkpoints`.
  TORCH_ARG(std::string, dirpath);
  /// File name pattern without `.ckpt`: `{name}` or `{name:.4f}` take the
  /// value of epoch, step or a metric; with auto_insert_metric_name each
  /// becomes `name=value`. Empty: "{epoch}-{step}".
  TORCH_ARG(std::string, filename);
  /// The metric that ranks checkpoints (a key of callback_metrics); empty:
  /// the newest checkpoints are kept.
  TORCH_ARG(std::string, monitor);
  /// "min" or "max": which values of `monitor` are better.
  TORCH_ARG(std::string, mode) = "min";
  /// Keep the best k checkpoints; -1 keeps all, 0 none (only last.ckpt).
  /// Without a monitor k must be -1, 0 or 1.
  TORCH_ARG(int64_t, save_top_k) = 1;
  /// Also write `last.ckpt` (a hard link to the newest file when possible)
  /// at every save.
  TORCH_ARG(bool, save_last) = false;
  /// Save after every n-th epoch's validation (or epoch end, without
  /// validation); 0 turns epoch saves off.
  TORCH_ARG(int64_t, every_n_epochs) = 1;
  /// Save every n optimizer steps as well; 0 turns step saves off.
  TORCH_ARG(int64_t, every_n_train_steps) = 0;
  TORCH_ARG(bool, auto_insert_metric_name) = true;
  /// Print a line for each save.
  TORCH_ARG(bool, verbose) = false;
};

/// Saves checkpoints during fit and keeps the best k by a monitored metric
/// (Lightning's ModelCheckpoint). Its state (best paths and scores) goes
/// into each checkpoint; on resume into the same folder the top-k bookkeeping
/// continues, into another folder only the best path and score carry over.
class ModelCheckpoint : public Callback {
 public:
  /// Throws ConfigError naming the option that is invalid.
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});

  std::string state_key() const override;
  std::string required_metric() const override;
  void setup(Trainer& trainer, Module& module) override;
  void on_train_batch_end(
      Trainer& trainer,
      Module& module,
      const at::Tensor& loss,
      const data::Batch& batch,
      int64_t batch_idx) override;
  void on_validation_end(Trainer& trainer, Module& module) override;
  void on_train_epoch_end(Trainer& trainer, Module& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  /// Writes `last.ckpt` now, whatever the schedule (the Trainer calls this
  /// on a stop signal). Returns its path.
  std::string save_last(Trainer& trainer);

  /// The file name (without folder) a save would get with these values;
  /// `metrics` must hold every name the pattern uses besides epoch and step.
  std::string format_filename(
      int64_t epoch,
      int64_t step,
      const std::map<std::string, double>& metrics) const;

  const ModelCheckpointOptions& options() const {
    return options_;
  }
  /// The folder in use (resolved at fit start).
  const std::string& dirpath() const {
    return dirpath_;
  }
  const std::string& best_model_path() const {
    return best_model_path_;
  }
  /// NaN until a monitored checkpoint was saved.
  double best_model_score() const {
    return best_model_score_;
  }
  const std::string& last_model_path() const {
    return last_model_path_;
  }
  /// The kept checkpoints and their monitored scores (NaN without monitor).
  const std::map<std::string, double>& best_k_models() const {
    return best_k_models_;
  }

 private:
  void save(Trainer& trainer);
  void save_top_k(Trainer& trainer, double score);
  bool better(double a, double b) const;
  std::string unique_path(const std::string& name) const;
  std::string worst_path() const;

  ModelCheckpointOptions options_;
  std::string dirpath_;
  std::string best_model_path_;
  double best_model_score_;
  std::string last_model_path_;
  std::map<std::string, double> best_k_models_;
  // Saves happen once per global step, however many triggers fire.
  int64_t last_saved_step_ = -1;
  // A validation of this fit has ended (the metric to rank by can exist).
  bool validated_ = false;
  // The wait for the monitored metric was reported.
  bool waiting_noted_ = false;
  // Whether this process writes checkpoint files (global zero only).
  bool writes_ = true;
  // The file written at last_saved_step_, which last.ckpt can link to.
  std::string newest_path_;
};

} // namespace hotloop::train
