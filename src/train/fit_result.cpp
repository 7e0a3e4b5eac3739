#include "hotloop/train/fit_result.h"

#include "hotloop/train/checkpoint.h"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace hotloop::train {

void write_summary(
    const std::string& run_dir,
    const FitResult& result,
    const ProfileContext& context,
    const log::ModelSummary& model) {
  if (run_dir.empty()) {
    return;
  }
  nlohmann::json summary;
  for (const auto& [name, value] : result.metrics) {
    summary[name] = value;
  }
  summary["epochs"] = result.epochs;
  summary["steps"] = result.steps;
  summary["train_samples_per_s"] = result.train_samples_per_s;
  if (result.train_tokens_per_s > 0) {
    summary["train_tokens_per_s"] = result.train_tokens_per_s;
  }
  summary["world_size"] = result.world_size;
  summary["wall_s"] = result.wall_s;
  summary["checkpoint"] = result.checkpoint_path;
  summary["best_checkpoint"] = result.best_model_path;
  summary["interrupted"] = result.interrupted;
  const StepProfile& profile = result.profile;
  summary["profile"] = {
      {"phases", profile.phases()},
      {"synced_phases", profile.synced},
      {"synced_steps", profile.synced_steps},
      {"first_step", profile.first_step},
      {"asynchronous", profile.asynchronous},
      {"validation", profile.validation},
      {"setup_s", profile.setup},
      {"setup_parts", profile.setup_parts},
      {"warmup_s", profile.warmup_seconds},
      {"steps", profile.steps},
      {"samples_per_s", profile.samples_per_s()},
      {"steady_samples_per_s", profile.steady_samples_per_s()},
      {"verdict", profile.verdict(context)},
      {"process_to_first_step_s",
       profile.process_to_first_step >= 0
           ? nlohmann::json(profile.process_to_first_step)
           : nlohmann::json()},
      {"process_to_step10_s",
       profile.process_to_warmup_end >= 0
           ? nlohmann::json(profile.process_to_warmup_end)
           : nlohmann::json()},
  };
  if (profile.tokens_per_sample > 0) {
    summary["profile"]["tokens_per_sample"] = profile.tokens_per_sample;
    summary["profile"]["steady_tokens_per_s"] =
        profile.steady_samples_per_s() * profile.tokens_per_sample;
  }
  if (profile.flops_per_sample > 0) {
    summary["profile"]["flops_per_sample"] = profile.flops_per_sample;
    summary["profile"]["flops_per_s"] = profile.flops_per_s();
    summary["profile"]["peak_flops"] = profile.peak_flops;
    summary["profile"]["peak_source"] = profile.peak_source;
    summary["profile"]["utilization"] = profile.utilization();
    summary["profile"]["utilization_text"] = profile.utilization_text();
  }
  summary["model"] = {
      {"total_params", model.total_params()},
      {"trainable_params", model.trainable_params},
      {"frozen_params", model.frozen_params},
      {"size_mb", model.size_mb},
  };
  if (!result.callback_summary.empty()) {
    // Beside the Trainer's own keys, which keep their values.
    const nlohmann::json added = nlohmann::json::parse(result.callback_summary);
    for (const auto& [key, value] : added.items()) {
      if (!summary.contains(key)) {
        summary[key] = value;
      }
    }
  }
  write_file_atomically(
      (std::filesystem::path(run_dir) / "summary.json").string(),
      [&](std::ostream& out) { out << summary.dump(2) << "\n"; });
}

} // namespace hotloop::train
