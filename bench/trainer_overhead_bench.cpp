// The Trainer's cost over a hand-written LibTorch loop: the same model,
// data, optimizer and schedule, stepped by each, printed side by side.
//
//   build/bench/trainer_overhead_bench [--batches N] [--repeats R] [--root DIR]

#include "bench_util.h"

#include <hotloop/core/compat.h>
#include <hotloop/core/memory.h>
#include <hotloop/core/threads.h>
#include <hotloop/data.h>
#include <hotloop/models/fashion_cnn.h>
#include <hotloop/optim/lr_scheduler.h>
#include <hotloop/optim/optimizer_factory.h>
#include <hotloop/train/classifier.h>
#include <hotloop/train/trainer.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
namespace data = hotloop::data;

struct Setup {
  std::shared_ptr<data::ImageClassificationDataset> dataset;
  hotloop::models::FashionCnnOptions model;
  hotloop::optim::OptimizerOptions optimizer;
  hotloop::optim::SchedulerOptions scheduler;
};

data::DataLoaderOptions loader_options() {
  return data::DataLoaderOptions(256)
      .shuffle(true)
      .num_workers(1)
      .persistent_workers(true);
}

// The loop a LibTorch user writes by hand, with the same speed-ups the
// Trainer applies (set_to_none, no logging sync): the fair baseline.
double hand_written(const Setup& setup, int64_t batches) {
  at::manual_seed(0);
  hotloop::models::FashionCnn model(setup.model);
  auto optimizer = hotloop::optim::make_optimizer(*model, setup.optimizer);
  auto scheduler =
      hotloop::optim::make_scheduler(*optimizer, setup.scheduler, batches);
  data::DataLoader loader(setup.dataset, loader_options());
  model->train();
  int64_t done = 0;
  const auto start = Clock::now();
  for (auto& batch : loader) {
    hotloop::compat::zero_grad_set_to_none(*optimizer);
    const at::Tensor loss =
        at::cross_entropy_loss(model->forward(batch.input), batch.target);
    loss.backward();
    optimizer->step();
    scheduler->step();
    if (++done == batches) {
      break;
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct TrainerTimes {
  // The training steps (first batch wait to last step's end), as the
  // Trainer's step profile times them.
  double steps;
  // The whole fit call: setup, model summary and teardown too.
  double fit;
};

TrainerTimes with_trainer(const Setup& setup, int64_t batches) {
  at::manual_seed(0);
  hotloop::train::ImageClassifier module(
      torch::nn::AnyModule(hotloop::models::FashionCnn(setup.model)),
      setup.optimizer,
      setup.scheduler);
  data::DataLoader loader(setup.dataset, loader_options());
  // The Trainer's defaults (progress lines, signal handling, the step
  // profile) with their output thrown away; only the run folder is off, as
  // the hand-written loop writes no files either.
  std::ostream discard(nullptr);
  hotloop::train::Trainer trainer(
      hotloop::train::TrainerOptions()
          .max_epochs(1)
          .limit_train_batches(batches)
          .default_root_dir("")
          .num_sanity_val_steps(0),
      discard);
  const auto result = trainer.fit(module, loader);
  return {result.profile.step_seconds(), result.wall_s};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  int64_t batches = 100;
  int64_t repeats = 5;
  std::string root = data::kFashionMnistDefaultRoot;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--batches" || arg == "--repeats" || arg == "--root") &&
        i + 1 < argc) {
      const std::string value = argv[++i];
      if (arg == "--root") {
        root = value;
      } else {
        (arg == "--batches" ? batches : repeats) = std::stoll(value);
      }
    } else {
      std::cerr << "usage: trainer_overhead_bench [--batches N] [--repeats R] "
                   "[--root DIR]\n";
      return 2;
    }
  }
  try {
    // Both sides run with the Trainer's process settings.
    hotloop::configure_intra_op_threads(0, 1);
    hotloop::set_blas_threads(1); // as Trainer::fit does by default
    hotloop::retain_freed_host_memory();
    Setup setup;
    data::ImageTransformOptions transform;
    transform.crop_padding = 2;
    transform.horizontal_flip = true;
    transform.mean = {data::kFashionMnistMean};
    transform.std = {data::kFashionMnistStd};
    setup.dataset = data::load_mnist_split(root, /*train=*/true, transform);
    setup.model.channels = {16, 32};
    setup.optimizer.lr = 4e-3;
    setup.optimizer.weight_decay = 1e-4;

    hotloop::bench::Machine machine = hotloop::bench::describe_machine();
    hand_written(setup, 10); // warm up allocator and kernels
    // Each repeat runs hand-written, Trainer, hand-written (ABA): the
    // Trainer is compared with the mean of the runs around it, which cancels
    // drift in the machine's speed, and the two hand-written runs show how
    // much the same loop varies by itself - the resolution of the result.
    std::vector<double> hand, steps, fits, ratios, fit_ratios, noise;
    for (int64_t r = 0; r < repeats; ++r) {
      const double before = hand_written(setup, batches);
      const TrainerTimes with = with_trainer(setup, batches);
      const double after = hand_written(setup, batches);
      hand.push_back(before);
      hand.push_back(after);
      steps.push_back(with.steps);
      fits.push_back(with.fit);
      ratios.push_back(with.steps / ((before + after) / 2));
      fit_ratios.push_back(with.fit / ((before + after) / 2));
      noise.push_back(std::abs(after / before - 1));
    }
    machine.load_after = hotloop::bench::load_average();
    const double h = median(hand);
    std::printf("hotloop Trainer overhead benchmark\n");
    hotloop::bench::print_machine(machine);
    std::printf(
        "work:    Fashion-MNIST CNN [16, 32], batch 256, crop+flip+normalize, "
        "AdamW + one-cycle, 1 loader thread; %lld batches per run, %lld "
        "repeats of hand/Trainer/hand\n\n",
        static_cast<long long>(batches),
        static_cast<long long>(repeats));
    std::printf(
        "%-36s %10s %12s %10s\n", "loop", "seconds", "steps/s", "x hand");
    std::printf(
        "%-36s %10.3f %12.1f %10s\n",
        "hand-written LibTorch (the loop)",
        h,
        batches / h,
        "1.0000x");
    const double ratio = median(ratios);
    const double fit_ratio = median(fit_ratios);
    std::printf(
        "%-36s %10.3f %12.1f %9.4fx\n",
        "hotloop Trainer (its training steps)",
        median(steps),
        batches / median(steps),
        ratio);
    std::printf(
        "%-36s %10.3f %12s %9.4fx\n",
        "hotloop Trainer (the whole fit call)",
        median(fits),
        "",
        fit_ratio);
    const double overhead = 100.0 * (ratio - 1);
    const double resolution = 100.0 * median(noise);
    std::printf(
        "\nstep time, Trainer / hand-written: %.4fx, median of %lld paired "
        "runs (overhead %+.2f%%; range %.4fx to %.4fx)\n",
        ratio,
        static_cast<long long>(repeats),
        overhead,
        *std::min_element(ratios.begin(), ratios.end()),
        *std::max_element(ratios.begin(), ratios.end()));
    std::printf(
        "hand-written vs itself: %.2f%% apart (median), the resolution of "
        "this measurement\n",
        resolution);
    std::printf(
        "target: step-time overhead < 1%%: %s%s\n",
        overhead < 1.0 ? "PASS" : "MISS",
        resolution >= 1.0 ? " (within this machine's noise; use more "
                            "--batches/--repeats on a quieter machine)"
                          : "");
  } catch (const std::exception& e) {
    std::cerr << "trainer_overhead_bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
