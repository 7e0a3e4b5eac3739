// Trains the Fashion-MNIST CNN from C++ with the model, data, optimizer and
// schedule of `hotloop fit --config configs/fashion_mnist.yaml` (the model's
// defaults are the config's): crop + flip + normalize, AdamW with a
// one-cycle schedule, validation every epoch; plus early stopping on
// val_loss; checkpoints and CSV/TensorBoard logs in
// runs/fashion_mnist/version_N.
//
//   fit_fashion_mnist [DATA_ROOT] [EPOCHS]
#include <hotloop/hotloop.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  using namespace hotloop;
  // Restarts once where OpenBLAS runs older kernels than this CPU has.
  use_fastest_blas_kernels(argv);
  const std::string root =
      argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const int64_t epochs = argc > 2 ? std::stoll(argv[2]) : 15;

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
