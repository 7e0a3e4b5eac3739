#include "hotloop/train/detail/evaluation_loop.h"

#include "hotloop/compress/parametrization.h"
#include "hotloop/core/error.h"
#include "hotloop/train/callback.h"
#include "hotloop/train/detail/agreement.h"
#include "hotloop/train/detail/cudnn_tuning.h"
#include "hotloop/train/detail/epoch_batches.h"
#include "hotloop/train/module.h"
#include "hotloop/train/strategy.h"
#include "hotloop/train/trainer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <optional>

namespace hotloop::train::detail {
namespace {

// Evaluation runs without autograd: InferenceMode by default, NoGradGuard
// when trainer.inference_mode is off.
class NoGradScope {
 public:
  explicit NoGradScope(bool inference) {
    if (inference) {
      inference_.emplace();
    } else {
      no_grad_.emplace();
    }
  }

 private:
  std::optional<c10::InferenceMode> inference_;
  std::optional<at::NoGradGuard> no_grad_;
};

} // namespace

EvaluationLoop::EvaluationLoop(
    Trainer& trainer,
    Module& module,
    const Precision& precision,
    const std::vector<std::shared_ptr<Callback>>& callbacks)
    : trainer_(trainer),
      module_(module),
      precision_(precision),
      callbacks_(callbacks) {}

template <typename Step>
void EvaluationLoop::for_each_batch(
    data::DataLoader& loader, int64_t limit, Step&& step) {
  const bool was_training = module_.is_training();
  module_.eval();
  {
    const NoGradScope no_grad(trainer_.options().inference_mode());
    // A pruned model's masked weights as its parameters are now.
    compress::PrunedForward().recompute(module_);
    const int64_t batches =
        limited(loader.length().value_or(kUntilStreamsEnd), limit);
    int64_t batch_idx = 0;
    loader.set_epoch(0); // evaluation sees the same order every time
    if (batches > 0) {
      EpochBatches pass(loader, /*done=*/0, batches);
      data::Batch loaded;
      bool last = false;
      while (pass.next(loaded, last)) {
        const data::Batch batch = trainer_.prepare_batch(precision_, loaded);
        const CudnnBenchmarkOff one_off(is_short_batch(batch, loader));
        const AutocastGuard autocast = precision_.autocast();
        step(batch, batch_idx++);
      }
    }
  }
  module_.train(was_training);
}

MetricCollection EvaluationLoop::run(
    data::DataLoader& loader, Stage stage, int64_t limit) {
  MetricCollection metrics;
  const bool validate = stage == Stage::kValidate;
  // The pass makes no collective: a process that fails in it tells the
  // others before the sums, so none waits there for it.
  std::exception_ptr failed;
  try {
    run_steps(loader, validate, limit, metrics);
  } catch (...) {
    failed = std::current_exception();
  }
  agree_on_failure(
      trainer_.strategy(), validate ? "validation" : "test", failed);
  all_reduce_metrics(metrics, trainer_.strategy(), trainer_.device());
  return metrics;
}

void EvaluationLoop::run_steps(
    data::DataLoader& loader,
    bool validate,
    int64_t limit,
    MetricCollection& metrics) {
  for_each_batch(loader, limit, [&](const data::Batch& batch, int64_t idx) {
    for (const auto& c : callbacks_) {
      if (validate) {
        c->on_validation_batch_start(trainer_, module_, batch, idx);
      } else {
        c->on_test_batch_start(trainer_, module_, batch, idx);
      }
    }
    if (validate) {
      module_.validation_step(batch, idx, metrics);
    } else {
      module_.test_step(batch, idx, metrics);
    }
    for (const auto& c : callbacks_) {
      if (validate) {
        c->on_validation_batch_end(trainer_, module_, batch, idx);
      } else {
        c->on_test_batch_end(trainer_, module_, batch, idx);
      }
    }
  });
}

std::vector<at::Tensor> EvaluationLoop::predict(
    data::DataLoader& loader, int64_t limit) {
  std::vector<at::Tensor> outputs;
  for_each_batch(loader, limit, [&](const data::Batch& batch, int64_t idx) {
    // A result that views the batch keeps that buffer out of the loader's
    // pool, so no copy is needed.
    outputs.push_back(module_.predict_step(batch, idx));
    for (const auto& c : callbacks_) {
      c->on_predict_batch_end(trainer_, module_, outputs.back(), batch, idx);
    }
  });
  return outputs;
}

namespace {

// Names joined, each ended by a zero byte, as a uint8 tensor.
template <typename Map>
at::Tensor joined_names(const Map& named) {
  std::string joined;
  for (const auto& item : named) {
    joined += item.first;
    joined.push_back('\0');
  }
  return text_tensor(joined);
}

std::vector<std::string> split_names(const at::Tensor& joined) {
  std::vector<std::string> out;
  std::string name;
  for (const char c : text_of(joined)) {
    if (c == '\0') {
      out.push_back(name);
      name.clear();
    } else {
      name.push_back(c);
    }
  }
  return out;
}

// When the processes logged different metrics: those that logged any must
// have logged the same names and count shapes (else DistError on every
// process alike), and one that logged none takes them, with nothing in
// them (weight 0, zero counts).
void take_names_of_the_others(
    MetricCollection& metrics, Strategy& strategy, c10::Device device) {
  std::vector<at::Tensor> mine = {
      joined_names(metrics.state()), joined_names(metrics.counts())};
  for (const auto& [name, total] : metrics.counts()) {
    // Zeros of its dtype, on the CPU or else on the process's device.
    mine.push_back(at::zeros_like(total));
  }
  const auto all = gather_everywhere(strategy, mine, device);
  const std::vector<at::Tensor>* logged = nullptr;
  for (const auto& theirs : all) {
    if (theirs[0].numel() == 0 && theirs[1].numel() == 0) {
      continue;
    }
    const bool same =
        logged == nullptr || (theirs.size() == logged->size() &&
                              std::equal(
                                  theirs.begin(),
                                  theirs.end(),
                                  logged->begin(),
                                  [](const at::Tensor& a, const at::Tensor& b) {
                                    return a.scalar_type() == b.scalar_type() &&
                                           a.sizes() == b.sizes() && a.equal(b);
                                  }));
    HOTLOOP_CHECK_AS(
        DistError,
        same,
        "the evaluation's metrics differ across the ",
        strategy.world_size(),
        " processes (this one, rank ",
        strategy.rank(),
        ", logged ",
        metrics.state().size(),
        " and counted ",
        metrics.counts().size(),
        "): every process must log the same metrics and counts of the "
        "same shapes");
    logged = &theirs;
  }
  if (logged == nullptr || mine[0].numel() > 0 || mine[1].numel() > 0) {
    return;
  }
  std::map<std::string, std::pair<double, double>> nothing;
  for (const std::string& name : split_names((*logged)[0])) {
    nothing[name] = {0.0, 0.0};
  }
  metrics.load_state(nothing);
  const std::vector<std::string> counted = split_names((*logged)[1]);
  for (size_t i = 0; i < counted.size(); ++i) {
    metrics.count(counted[i], (*logged)[2 + i]);
  }
}

} // namespace

void all_reduce_metrics(
    MetricCollection& metrics, Strategy& strategy, c10::Device device) {
  if (strategy.world_size() == 1) {
    return;
  }
  auto state = metrics.state();
  // One collective for all of them: [sum, weight] per metric by name, then
  // every count's cells (as doubles: exact to 2^53).
  int64_t size = 2 * static_cast<int64_t>(state.size());
  Digest names;
  for (const auto& [name, sum_weight] : state) {
    names.add(name);
  }
  for (const auto& [name, total] : metrics.counts()) {
    size += total.numel();
    names.add(name);
  }
  // Buffers of different sizes would hang the sum, or mix other metrics'
  // values: every process checks first that all logged the same. A
  // process whose share had no batch logged nothing: it takes the others'
  // names with nothing in them.
  const bool logged = !state.empty() || !metrics.counts().empty();
  if (!same_everywhere(strategy, {size, names.value(), logged ? 1 : 0})) {
    take_names_of_the_others(metrics, strategy, device);
    state = metrics.state();
    size = 2 * static_cast<int64_t>(state.size());
    for (const auto& [name, total] : metrics.counts()) {
      size += total.numel();
    }
  }
  at::Tensor values = at::empty({size}, at::TensorOptions(at::kDouble));
  auto* value = values.data_ptr<double>();
  for (const auto& [name, sum_weight] : state) {
    *value++ = sum_weight.first;
    *value++ = sum_weight.second;
  }
  int64_t offset = 2 * static_cast<int64_t>(state.size());
  for (const auto& [name, total] : metrics.counts()) {
    values.narrow(0, offset, total.numel()).copy_(total.reshape({-1}));
    offset += total.numel();
  }
  strategy.all_reduce(values, Reduction::kSum);
  values = values.cpu();
  value = values.data_ptr<double>();
  for (auto& [name, sum_weight] : state) {
    sum_weight.first = *value++;
    sum_weight.second = *value++;
  }
  metrics.load_state(state);
  offset = 2 * static_cast<int64_t>(state.size());
  for (const auto& [name, total] : metrics.counts()) {
    // The same storage as the collection's: summed in place.
    at::Tensor summed = total;
    summed.copy_(values.narrow(0, offset, total.numel()).view(total.sizes()));
    offset += total.numel();
  }
}

} // namespace hotloop::train::detail
