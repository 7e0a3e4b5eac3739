#pragma once

#include "hotloop/log/model_summary.h"
#include "hotloop/train/step_profile.h"

#include <cstdint>
#include <map>
#include <string>

namespace hotloop::train {

/// What a fit returns (and writes to summary.json).
struct FitResult {
  /// The last validation metrics plus train_loss of the last epoch.
  std::map<std::string, double> metrics;
  /// Epochs completed: one cut short by max_steps or a stop is not counted
  /// (its checkpoint resumes in the middle).
  int64_t epochs = 0;
  int64_t steps = 0;
  /// Training samples per second over the training phases only, of all
  /// processes together.
  double train_samples_per_s = 0;
  /// The same in tokens for a sequence model (Module::tokens_per_sample);
  /// 0 otherwise.
  double train_tokens_per_s = 0;
  /// Processes that trained together (Strategy::world_size).
  int64_t world_size = 1;
  /// Wall time of the whole fit, validation included.
  double wall_s = 0;
  /// The checkpoint to resume from: last.ckpt when one was written, else
  /// the last checkpoint written; empty when none was.
  std::string checkpoint_path;
  /// The best checkpoint of the first ModelCheckpoint that monitors a
  /// metric; empty when there is none.
  std::string best_model_path;
  /// A stop signal ended the fit early, after checkpointing mid-epoch.
  bool interrupted = false;
  /// Where the training steps' time went.
  StepProfile profile;
  /// What the callbacks add to summary.json (Callback::summary), as the
  /// text of one JSON object; empty when none adds anything.
  std::string callback_summary;
};

/// Writes `<run_dir>/summary.json` atomically: the result's metrics, counts,
/// rates and checkpoints, the step profile with its verdict (judged with
/// `context`) and the model's size from `model`.
void write_summary(
    const std::string& run_dir,
    const FitResult& result,
    const ProfileContext& context,
    const log::ModelSummary& model);

} // namespace hotloop::train
