// Training on data that comes as a stream - a simulator, a sensor, a
// socket - rather than by index: an IterableDataset. Every epoch each
// loader worker opens a stream of its own; the dataset splits its samples
// among them by the StreamContext it is given, as in PyTorch. Here a
// simulated sensor gives 8 readings and the value they measure
// (y = x . w + noise), and the Trainer fits a small regressor on it.
//
//   stream_regression [EPOCHS]
#include <hotloop/hotloop.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdlib>
#include <iostream>

using namespace hotloop;

// One worker's share of an epoch's readings, from a generator of its own.
class Readings : public data::SampleStream {
 public:
  Readings(const data::StreamContext& context, int64_t samples)
      : left_(
            samples / context.num_workers +
            (context.worker_id < samples % context.num_workers ? 1 : 0)),
        generator_(at::make_generator<at::CPUGeneratorImpl>(
            context.seed + 1000 * context.epoch + context.worker_id)),
        weights_(at::linspace(-1, 1, 8)) {}

  std::optional<data::Example> next() override {
    if (left_ == 0) {
      return std::nullopt; // this worker's share of the epoch is read
    }
    --left_;
    const at::Tensor x = at::randn({8}, generator_);
    const at::Tensor noise = at::randn({}, generator_) * 0.01;
    return data::Example{x, x.dot(weights_) + noise};
  }

 private:
  int64_t left_;
  at::Generator generator_;
  at::Tensor weights_;
};

class Sensor : public data::IterableDataset {
 public:
  explicit Sensor(int64_t samples) : samples_(samples) {}

  data::SampleSpec spec() const override {
    return {{8}, at::kFloat, {}, at::kFloat}; // readings -> value
  }
  std::unique_ptr<data::SampleStream> stream(
      const data::StreamContext& context) const override {
    return std::make_unique<Readings>(context, samples_);
  }
  std::optional<int64_t> size() const override {
    return samples_; // per epoch; leave it out when a stream has no end
  }

 private:
  int64_t samples_;
};

// Readings [B, 8] -> the value [B, 1].
struct RegressorNetImpl : torch::nn::Module {
  RegressorNetImpl()
      : hidden(register_module("hidden", torch::nn::Linear(8, 32))),
        out(register_module("out", torch::nn::Linear(32, 1))) {}

  at::Tensor forward(const at::Tensor& readings) {
    return out(hidden(readings).relu());
  }

  torch::nn::Linear hidden, out;
};
TORCH_MODULE(RegressorNet);

int main(int argc, char** argv) {
  int64_t epochs = 5;
  if (argc > 1) {
    char* end = nullptr;
    epochs = std::strtoll(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || epochs < 1) {
      std::cerr << "stream_regression: EPOCHS must be a whole number >= 1, "
                   "got '"
                << argv[1] << "'\n";
      return 2;
    }
  }
  train::seed_everything(0); // the network's initial weights
  data::DataLoader train_loader(
      std::make_shared<Sensor>(8192),
      data::DataLoaderOptions(128).num_workers(2));
  data::DataLoader val_loader(
      std::make_shared<Sensor>(1024),
      data::DataLoaderOptions(512).seed(1000000)); // none of training's

  optim::OptimizerOptions adam;
  adam.name = "adam";
  adam.lr = 1e-2;
  train::Regressor module(
      torch::nn::AnyModule(RegressorNet()), adam, optim::SchedulerOptions{});

  train::Trainer trainer(train::TrainerOptions()
                             .max_epochs(epochs)
                             .default_root_dir("")
                             .enable_progress_bar(false));
  const train::FitResult result =
      trainer.fit(module, train_loader, &val_loader);
  std::cout << "val_rmse " << result.metrics.at("val_rmse") << "\n";
  return 0;
}
