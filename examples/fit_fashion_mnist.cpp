// Trains the Fashion-MNIST CNN from C++ with the model, data, optimizer and
// schedule of `hotloop fit --config configs/fashion_mnist.yaml` (the model's
// defaults are the config's): crop + flip + normalize, AdamW with a
// one-cycle schedule, validation every epoch; plus early stopping on
// val_loss; checkpoints and CSV/TensorBoard logs in
// runs/fashion_mnist/version_N.
//
//   fit_fashion_mnist [DATA_ROOT] [EPOCHS]
#include <hotloop/hotloop.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

using namespace hotloop;

int fit(const std::string& root, int64_t epochs) {
  data::ImageTransformOptions augment;
  augment.crop_padding = 2;
  augment.horizontal_flip = true;
  augment.mean = {0.2860};
  augment.std = {0.3530};
  data::ImageTransformOptions normalize;
  normalize.mean = augment.mean;
  normalize.std = augment.std;
  data::DataLoader train_loader(
      data::load_mnist_split(root, /*train=*/true, augment),
      data::DataLoaderOptions(256).shuffle(true).num_workers(1));
  data::DataLoader val_loader(
      data::load_mnist_split(root, /*train=*/false, normalize),
      data::DataLoaderOptions(1000));

  optim::OptimizerOptions adamw; // AdamW
  adamw.lr = 0.004;
  adamw.weight_decay = 1e-4;
  optim::SchedulerOptions one_cycle; // one-cycle, stepped every batch
  train::ImageClassifier module(
      torch::nn::AnyModule(models::FashionCnn()), adamw, one_cycle);

  train::Trainer trainer(
      train::TrainerOptions().max_epochs(epochs).name("fashion_mnist"));
  trainer.add_callback(std::make_shared<train::EarlyStopping>(
      train::EarlyStoppingOptions("val_loss").patience(3)));
  const train::FitResult result =
      trainer.fit(module, train_loader, &val_loader);
  std::cout << "val_acc " << result.metrics.at("val_acc") << ", run folder "
            << trainer.log_dir() << "\n";
  return 0;
}

int main(int argc, char** argv) {
  // Restarts once where OpenBLAS runs older kernels than this CPU has.
  use_fastest_blas_kernels(argv);
  const std::string root =
      argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int64_t epochs = 15;
  if (argc > 2) {
    char* end = nullptr;
    epochs = std::strtoll(argv[2], &end, 10);
    if (*argv[2] == '\0' || *end != '\0' || epochs < 1) {
      std::cerr << "fit_fashion_mnist: EPOCHS must be a whole number >= 1, "
                   "got '"
                << argv[2] << "'\n";
      return 2;
    }
  }
  try {
    return fit(root, epochs);
  } catch (const std::exception& error) { // a missing file, a bad option
    std::cerr << "fit_fashion_mnist: " << error.what() << "\n";
    return 1;
  }
}
