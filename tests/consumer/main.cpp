// Builds against an installed hotloop and trains a few steps on synthetic
// images, to check the installed headers, library and CMake package work.
#include <hotloop/hotloop.h>

#include <ATen/ATen.h>

#include <iostream>

int main() {
  using namespace hotloop;
  train::seed_everything(0);
  at::Tensor images = at::randint(0, 256, {64, 1, 8, 8}).to(at::kByte);
  at::Tensor labels =
      (images.to(at::kFloat).mean({1, 2, 3}) > 127.5).to(at::kLong);
  auto dataset =
      std::make_shared<data::ImageClassificationDataset>(images, labels);
  data::DataLoader loader(dataset, data::DataLoaderOptions(16).shuffle(true));
  models::FashionCnnOptions model_options;
  model_options.channels = {4};
  model_options.hidden = 8;
  model_options.num_classes = 2;
  model_options.image_size = 8;
  train::ImageClassifier module(
      torch::nn::AnyModule(models::FashionCnn(model_options)), {}, {});
  train::Trainer trainer(train::TrainerOptions()
                             .max_epochs(2)
                             .default_root_dir("")
                             .enable_progress_bar(false));
  const auto result = trainer.fit(module, loader, &loader);
  std::cout << "consumer: " << result.steps << " steps, val_acc "
            << result.metrics.at("val_acc") << " (hotloop " << HOTLOOP_VERSION
            << ")\n";
  return result.steps == 8 ? 0 : 1;
}
