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

double with_trainer(const Setup& setup, int64_t batches) {
  at::manual_seed(0);
  hotloop::train::ImageClassifier module(
      torch::nn::AnyModule(hotloop::models::FashionCnn(setup.model)),
      setup.optimizer,
      setup.scheduler);
  data::DataLoader loader(setup.dataset, loader_options());
  hotloop::train::Trainer trainer(hotloop::train::TrainerOptions()
                                      .max_epochs(1)
                                      .limit_train_batches(batches)
                                      .default_root_dir("")
                                      .enable_progress_bar(false)
                                      .num_sanity_val_steps(0)
                                      .handle_signals(false));
  const auto result = trainer.fit(module, loader);
  return result.wall_s;
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
    std::vector<double> hand, trainer;
    for (int64_t r = 0; r < repeats; ++r) {
      // Alternate so drift in the machine's speed hits both alike.
      hand.push_back(hand_written(setup, batches));
      trainer.push_back(with_trainer(setup, batches));
    }
    machine.load_after = hotloop::bench::load_average();
    const double h = median(hand), t = median(trainer);
    std::printf("hotloop Trainer overhead benchmark\n");
    hotloop::bench::print_machine(machine);
    std::printf(
        "work:    Fashion-MNIST CNN [16, 32], batch 256, crop+flip+normalize, "
        "AdamW + one-cycle, 1 loader thread; %lld batches, median of %lld\n\n",
        static_cast<long long>(batches),
        static_cast<long long>(repeats));
    std::printf("%-28s %10s %12s\n", "loop", "seconds", "steps/s");
    std::printf(
        "%-28s %10.3f %12.1f\n", "hand-written LibTorch", h, batches / h);
    std::printf("%-28s %10.3f %12.1f\n", "hotloop Trainer", t, batches / t);
    const double overhead = 100.0 * (t - h) / h;
    std::printf(
        "\nTrainer / hand-written: %.4fx (overhead %+.2f%%; target < 1%%: "
        "%s)\n",
        t / h,
        overhead,
        overhead < 1.0 ? "PASS" : "MISS");
  } catch (const std::exception& e) {
    std::cerr << "trainer_overhead_bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
