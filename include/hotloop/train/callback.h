#pragma once

#include "hotloop/data/batch.h"

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <exception>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
} // namespace torch::optim

namespace hotloop::train {

class Module;
class Trainer;

/// Code that runs at fixed points of a Trainer's loops (Lightning's
/// Callback). Every hook is a no-op; subclass and override the ones you need.
/// Hooks see the Trainer (progress, callback_metrics, should_stop,
/// save_checkpoint) and the Module. They run on the training thread, in the
/// order the callbacks were added.
///
/// A callback with state overrides state_dict/load_state_dict: the Trainer
/// stores it in every checkpoint under state_key() and gives it back on
/// resume, so a resumed run continues exactly where the callback was.
class Callback {
 public:
  virtual ~Callback() = default;

  /// The name of this callback's state in checkpoints; must be unique among
  /// the Trainer's callbacks. Defaults to the class name.
  virtual std::string state_key() const;

  /// At the start of fit, before a checkpoint's state is restored into
  /// the callbacks: resolve paths and settings here.
  virtual void setup(Trainer& trainer, Module& module) {}
  /// Before the first training batch (after a resume's state is restored).
  virtual void on_fit_start(Trainer& trainer, Module& module) {}
  /// After the last epoch, or when the fit stopped early.
  virtual void on_fit_end(Trainer& trainer, Module& module) {}
  virtual void on_train_epoch_start(Trainer& trainer, Module& module) {}
  /// After the epoch's batches and its validation; `callback_metrics` hold
  /// the epoch's training means and the latest validation metrics.
  virtual void on_train_epoch_end(Trainer& trainer, Module& module) {}
  virtual void on_train_batch_start(
      Trainer& trainer,
      Module& module,
      const data::Batch& batch,
      int64_t batch_idx) {}
  /// `loss`: the batch's loss, detached, before the accumulation division.
  virtual void on_train_batch_end(
      Trainer& trainer,
      Module& module,
      const at::Tensor& loss,
      const data::Batch& batch,
      int64_t batch_idx) {}
  /// Before each backward (every micro-batch's), with the loss it starts
  /// from: divided by accumulate_grad_batches, not yet scaled (fp16).
  virtual void on_before_backward(
      Trainer& trainer, Module& module, const at::Tensor& loss) {}
  /// After each backward: the gradients summed over the micro-batches so
  /// far (over the processes too after a step's last one), still scaled
  /// under fp16 until on_before_optimizer_step.
  virtual void on_after_backward(Trainer& trainer, Module& module) {}
  /// Once per optimizer step, after the micro-batches' gradients are summed
  /// and unscaled (fp16), before clipping and the step.
  virtual void on_before_optimizer_step(
      Trainer& trainer, Module& module, torch::optim::Optimizer& optimizer) {}
  /// Once per optimizer after its step, before its gradients are dropped.
  /// Under trainer.cuda_graphs the four step hooks run after each replayed
  /// step, whose backward and update ran inside the graph.
  virtual void on_before_zero_grad(
      Trainer& trainer, Module& module, torch::optim::Optimizer& optimizer) {}
  virtual void on_validation_start(Trainer& trainer, Module& module) {}
  /// After a validation run during fit (not the sanity check) and after
  /// Trainer::validate; `callback_metrics` hold its metrics.
  virtual void on_validation_end(Trainer& trainer, Module& module) {}
  virtual void on_test_start(Trainer& trainer, Module& module) {}
  virtual void on_test_end(Trainer& trainer, Module& module) {}
  /// Around each validation batch's validation_step, the sanity check's
  /// included (`trainer.sanity_checking()` tells), with the batch on its
  /// device; under no_grad or inference mode, as the step runs.
  virtual void on_validation_batch_start(
      Trainer& trainer,
      Module& module,
      const data::Batch& batch,
      int64_t batch_idx) {}
  virtual void on_validation_batch_end(
      Trainer& trainer,
      Module& module,
      const data::Batch& batch,
      int64_t batch_idx) {}
  /// Around each test batch's test_step.
  virtual void on_test_batch_start(
      Trainer& trainer,
      Module& module,
      const data::Batch& batch,
      int64_t batch_idx) {}
  virtual void on_test_batch_end(
      Trainer& trainer,
      Module& module,
      const data::Batch& batch,
      int64_t batch_idx) {}
  /// After each predict batch, with what predict_step returned for it.
  virtual void on_predict_batch_end(
      Trainer& trainer,
      Module& module,
      const at::Tensor& outputs,
      const data::Batch& batch,
      int64_t batch_idx) {}
  /// When fit ends with an exception, before it propagates.
  virtual void on_exception(
      Trainer& trainer, Module& module, const std::exception& error) {}

  /// The metric this callback needs whenever it acts (a ModelCheckpoint's
  /// or a strict EarlyStopping's monitor); empty for none. A fit that has
  /// seen every metric its steps log (after its first training step, and
  /// the sanity check when it validates) stops with ConfigError when this
  /// one is not among them, before a whole epoch is spent.
  virtual std::string required_metric() const {
    return "";
  }

  /// What this callback adds to the fit's summary.json: an object whose
  /// members go beside the Trainer's own (such as ModelPruning's
  /// `pruning`), asked for after on_fit_end; null (the default) for none.
  virtual nlohmann::json summary() const;

  /// This callback's state for checkpoints; null when it has none.
  virtual nlohmann::json state_dict() const;
  /// Restores what state_dict returned.
  virtual void load_state_dict(const nlohmann::json& state);

  /// Tensors of this callback's state (WeightAveraging's weights), kept in
  /// checkpoints beside state_dict() in this order; empty for none.
  virtual std::vector<at::Tensor> state_tensors() const;
  /// Restores what state_tensors returned, on the model's device; called
  /// after load_state_dict, before on_fit_start.
  virtual void load_state_tensors(std::vector<at::Tensor> tensors);

  /// Just before the Trainer writes a checkpoint (on the process that
  /// writes it): a callback may put in the module what the file's model is
  /// to hold (WeightAveraging: the averaged weights). The checkpoint then
  /// takes every callback's state.
  virtual void on_save_checkpoint(Trainer& trainer, Module& module) {}
  /// After that write, whether it succeeded or threw: what
  /// on_save_checkpoint changed is put back.
  virtual void on_save_checkpoint_end(Trainer& trainer, Module& module) {}
};

} // namespace hotloop::train
