#pragma once

#include "hotloop/train/callback.h"

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
} // namespace torch::nn

namespace hotloop::data {
class DataLoader;
} // namespace hotloop::data

namespace hotloop::train {

/// How the averaged weights follow the model's, as
/// torch.optim.swa_utils.AveragedModel's averaging functions.
struct WeightAverageOptions {
  /// "ema": average = decay x average + (1 - decay) x current
  /// (get_ema_avg_fn); "swa": the equally weighted mean of every update,
  /// average + (current - average) / (n + 1) (AveragedModel's default; on
  /// CUDA, PyTorch 2.x lerps instead, which can differ in the last bit).
  TORCH_ARG(std::string, average) = "ema";
  /// The EMA's weight of the old average; in [0, 1).
  TORCH_ARG(double, decay) = 0.999;
  /// Average the floating-point buffers (BatchNorm's running statistics)
  /// too, as Lightning's WeightAveraging does; false: they follow the
  /// model's at each update (AveragedModel's use_buffers=False since
  /// PyTorch 2.0). Integer buffers (num_batches_tracked) always follow the
  /// model's: a count is not averaged.
  TORCH_ARG(bool, use_buffers) = true;
};

/// An average of a module's weights (torch.optim.swa_utils.AveragedModel
/// without the module copy): one tensor per parameter, then per buffer, in
/// the module's order, on the module's devices. Parameters held in float16
/// or bfloat16 are averaged in float32, so that an EMA's small steps are
/// not lost to rounding.
class WeightAverage {
 public:
  /// Throws ConfigError naming the option that is out of range.
  explicit WeightAverage(WeightAverageOptions options);

  /// Folds `module`'s current weights in; the first update copies them.
  /// Throws Error when the module's parameters and buffers are not those of
  /// the first update (a layer pruned since, say).
  void update(torch::nn::Module& module);

  /// Writes the average into the module's weights (cast to their dtypes;
  /// the module's tensors keep their storage, which optimizers, CUDA graphs
  /// and data-parallel hooks hold).
  void copy_to(torch::nn::Module& module) const;

  /// Updates so far (AveragedModel's n_averaged).
  int64_t count() const {
    return count_;
  }
  /// The averaged tensors, parameters then buffers; empty before the first
  /// update.
  const std::vector<at::Tensor>& tensors() const {
    return tensors_;
  }
  /// Sets what tensors() and count() return (a checkpoint's).
  void set(std::vector<at::Tensor> tensors, int64_t count);

  const WeightAverageOptions& options() const {
    return options_;
  }

 private:
  WeightAverageOptions options_;
  std::vector<at::Tensor> tensors_;
  int64_t count_ = 0;
};

/// torch.optim.swa_utils.update_bn: the running statistics of every
/// BatchNorm (1d, 2d, 3d, SyncBatchNorm) in `model` recomputed from one
/// pass over `loader`, as cumulative means (momentum None), which an
/// average of the weights needs when its buffers were not averaged
/// (WeightAverageOptions::use_buffers false). Each batch's input goes to
/// `device` and through `forward` (the model's own, say a NetworkModule's),
/// under no_grad in training mode; the momenta and the mode are put back,
/// whatever happens. Nothing runs for a model without BatchNorm.
void update_bn(
    data::DataLoader& loader,
    torch::nn::Module& model,
    const std::function<void(const at::Tensor&)>& forward,
    c10::Device device = c10::kCPU);

/// WeightAveraging's schedule, named as Lightning's EMAWeightAveraging.
struct WeightAveragingOptions {
  TORCH_ARG(WeightAverageOptions, average);
  /// Update after every n-th optimizer step (step indexes counted from 0:
  /// 0, n, 2n, ...); 0: not after steps.
  TORCH_ARG(int64_t, update_every_n_steps) = 1;
  /// No update after a step whose index (from 0) is below this.
  TORCH_ARG(int64_t, update_starting_at_step) = 0;
  /// Update at the end of every epoch from this one (from 0) on; -1: not
  /// at epoch ends.
  TORCH_ARG(int64_t, update_starting_at_epoch) = -1;
};

/// Lightning's WeightAveraging (EMAWeightAveraging, or SWA with
/// average("swa")): keeps a WeightAverage of the model, updated after
/// optimizer steps and epochs as the options say. Validation runs on the
/// averaged weights; every checkpoint holds them as its model (so `test`,
/// `export` and `init_from` see the average), with the weights being
/// trained kept in the callback's state for a resume, which goes on bit for
/// bit (an epoch-end update that the checkpoint preceded is made on resume);
/// the fit ends with the average in the model, the trained weights kept by
/// the callback until the next fit. Before the first update
/// the average is the model itself. The average lives on the model's device
/// (one more copy of the weights, two while it is shown).
class WeightAveraging : public Callback {
 public:
  /// Throws ConfigError naming the option that is out of range.
  explicit WeightAveraging(WeightAveragingOptions options = {});

  std::string state_key() const override;
  void setup(Trainer& trainer, Module& module) override;
  void on_fit_start(Trainer& trainer, Module& module) override;
  void on_train_batch_end(
      Trainer& trainer,
      Module& module,
      const at::Tensor& loss,
      const data::Batch& batch,
      int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, Module& module) override;
  void on_validation_start(Trainer& trainer, Module& module) override;
  void on_validation_end(Trainer& trainer, Module& module) override;
  void on_save_checkpoint(Trainer& trainer, Module& module) override;
  void on_save_checkpoint_end(Trainer& trainer, Module& module) override;
  void on_fit_end(Trainer& trainer, Module& module) override;
  void on_exception(
      Trainer& trainer, Module& module, const std::exception& error) override;
  nlohmann::json summary() const override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;
  std::vector<at::Tensor> state_tensors() const override;
  void load_state_tensors(std::vector<at::Tensor> tensors) override;

  /// The average (its count is the number of updates).
  const WeightAverage& average() const {
    return average_;
  }
  const WeightAveragingOptions& options() const {
    return options_;
  }

 private:
  /// Whether the step of index `step_idx` (from 0) updates.
  bool updates_after_step(int64_t step_idx) const;
  /// Puts the average in the module, the trained weights kept aside; true
  /// when it did (there is an average and it was not shown).
  bool show(Module& module);
  /// Puts the trained weights back.
  void hide(Module& module);
  /// A checkpoint's weights in: the module's (the file's model, the
  /// average) into average_, restored_ (the trained ones) into the module.
  void restore(Module& module);

  WeightAveragingOptions options_;
  WeightAverage average_;
  int64_t latest_update_step_ = 0;
  int64_t latest_update_epoch_ = -1;
  /// The module's weights while it shows the average; empty otherwise.
  std::vector<at::Tensor> trained_;
  /// Whether on_save_checkpoint showed it, to be undone after the write.
  bool shown_for_save_ = false;
  /// Whether validation showed it, to be undone at its end.
  bool shown_for_validation_ = false;
  /// A checkpoint's tensors and count, until on_fit_start has the module.
  std::vector<at::Tensor> restored_;
  int64_t restored_count_ = 0;
};

} // namespace hotloop::train
