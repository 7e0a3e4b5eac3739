#pragma once

#include "hotloop/data/dataloader.h"
#include "hotloop/train/metrics.h"
#include "hotloop/train/precision.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hotloop::train {
class Callback;
class Module;
class Strategy;
class Trainer;
} // namespace hotloop::train

namespace hotloop::train::detail {

/// Which of the Module's evaluation steps a run calls.
enum class Stage { kValidate, kTest };

/// The one loop behind validate, test, predict, the sanity check and a fit's
/// validations: the module in eval mode (its mode restored afterwards),
/// no autograd (InferenceMode, or NoGradGuard when trainer.inference_mode
/// is off), batches moved as for training, under the same autocast, in the
/// loader's epoch-0 order every time.
class EvaluationLoop {
 public:
  /// `callbacks`: whose batch hooks run around each step (the fit's
  /// active callbacks, or the Trainer's own outside a fit).
  EvaluationLoop(
      Trainer& trainer,
      Module& module,
      const Precision& precision,
      const std::vector<std::shared_ptr<Callback>>& callbacks);

  /// Runs `stage`'s step over the first `limit` batches of `loader` (-1:
  /// all) and returns what it logged, summed over every process. What one
  /// process throws goes on there; the others throw DistError naming it
  /// (agree_on_failure).
  MetricCollection run(data::DataLoader& loader, Stage stage, int64_t limit);

  /// Runs predict_step over the first `limit` batches and returns its
  /// outputs, one per batch, in order.
  std::vector<at::Tensor> predict(data::DataLoader& loader, int64_t limit);

 private:
  // The steps and their callbacks, logging into `metrics`.
  void run_steps(
      data::DataLoader& loader,
      bool validate,
      int64_t limit,
      MetricCollection& metrics);
  template <typename Step>
  void for_each_batch(data::DataLoader& loader, int64_t limit, Step&& step);

  Trainer& trainer_;
  Module& module_;
  const Precision& precision_;
  const std::vector<std::shared_ptr<Callback>>& callbacks_;
};

/// Sums every metric's weighted sum and weight, and every count, over the
/// processes of `strategy`, so that the means and counts are those of the
/// whole split (a no-op for one process). Every process that logged must
/// hold the same metric names and count shapes and dtypes (DistError on
/// every process otherwise); one that logged nothing (a share without a
/// batch) takes theirs, empty, its counts on the CPU or else on `device`.
void all_reduce_metrics(
    MetricCollection& metrics,
    Strategy& strategy,
    c10::Device device = c10::kCPU);

} // namespace hotloop::train::detail
