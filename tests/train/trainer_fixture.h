#pragma once

// The small classification setup the Trainer and callback tests share:
// quadrant images that a tiny CNN learns in a few steps.

#include "hotloop/data/dataloader.h"
#include "hotloop/data/image_dataset.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/trainer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace hotloop::train {

constexpr int64_t kSize = 12;

inline std::shared_ptr<data::ImageClassificationDataset> quadrants(
    int64_t n, uint64_t seed) {
  auto [images, labels] = hotloop::testing::quadrant_images(n, kSize, seed);
  data::ImageTransformOptions transform;
  transform.mean = {0.3};
  transform.std = {0.3};
  return std::make_shared<data::ImageClassificationDataset>(
      images, labels, transform);
}

// A small classifier with a horizon-independent schedule (halve the LR
// every 5 steps), so a run cut short is a prefix of a longer one.
inline models::FashionCnnOptions small_model() {
  models::FashionCnnOptions model;
  model.channels = {8};
  model.hidden = 16;
  model.num_classes = 4;
  model.image_size = kSize;
  return model;
}

inline std::shared_ptr<ImageClassifier> make_module(
    uint64_t seed, int64_t top_k = 1) {
  seed_everything(seed);
  const models::FashionCnnOptions model = small_model();
  optim::OptimizerOptions optimizer;
  optimizer.name = "adam";
  optimizer.lr = 1e-2;
  optim::SchedulerOptions scheduler;
  scheduler.name = "step";
  scheduler.step_size = 5;
  scheduler.gamma = 0.5;
  return std::make_shared<ImageClassifier>(
      torch::nn::AnyModule(models::FashionCnn(model)),
      optimizer,
      scheduler,
      top_k);
}

// A classifier that hands the loss of its `at_step`-th training step (from
// 1), or of each of `at_steps`, to `action` and trains on what it returns
// (the loss it logs is its own): a test raises a signal there, throws, or
// makes the loss infinite.
class OnStepClassifier : public ImageClassifier {
 public:
  using Action = std::function<at::Tensor(const at::Tensor& loss)>;
  OnStepClassifier(ImageClassifier&& base, int64_t at_step, Action action)
      : OnStepClassifier(
            std::move(base), std::vector<int64_t>{at_step}, std::move(action)) {
  }
  OnStepClassifier(
      ImageClassifier&& base, std::vector<int64_t> at_steps, Action action)
      : ImageClassifier(std::move(base)),
        at_steps_(std::move(at_steps)),
        action_(std::move(action)) {}
  at::Tensor training_step(
      const data::Batch& batch,
      int64_t batch_idx,
      MetricCollection& metrics) override {
    at::Tensor loss = ImageClassifier::training_step(batch, batch_idx, metrics);
    ++steps_;
    const bool chosen = std::find(at_steps_.begin(), at_steps_.end(), steps_) !=
                        at_steps_.end();
    return chosen ? action_(loss) : loss;
  }

 private:
  std::vector<int64_t> at_steps_;
  int64_t steps_ = 0;
  Action action_;
};

// An OnStepClassifier action: the process gets `signal` during the step,
// as from Ctrl-C (SIGINT) or a scheduler (SIGTERM).
inline OnStepClassifier::Action raise_signal(int signal) {
  return [signal](const at::Tensor& loss) {
    std::raise(signal);
    return loss;
  };
}

// A map-style dataset read as a stream: reader r of R (StreamContext::
// reader(), all processes' workers counted) reads samples r, r + R,
// r + 2R, ... below `end` in order, with the loader's seed and epoch.
// `end` short of the dataset's size makes a stream shorter than size()
// says.
class StreamOf : public data::IterableDataset {
 public:
  StreamOf(
      std::shared_ptr<const data::Dataset> dataset,
      bool sized,
      int64_t end = INT64_MAX)
      : dataset_(std::move(dataset)),
        sized_(sized),
        end_(std::min(end, dataset_->size())) {}
  data::SampleSpec spec() const override {
    return dataset_->spec();
  }
  std::optional<int64_t> size() const override {
    return sized_ ? std::optional(dataset_->size()) : std::nullopt;
  }
  std::unique_ptr<data::SampleStream> stream(
      const data::StreamContext& context) const override {
    return std::make_unique<Reader>(*dataset_, context, end_);
  }
  bool splits_by_process() const override {
    return true;
  }

 private:
  class Reader : public data::SampleStream {
   public:
    Reader(
        const data::Dataset& dataset,
        const data::StreamContext& context,
        int64_t end)
        : dataset_(dataset),
          context_(context),
          next_(context.reader()),
          end_(end) {}
    std::optional<data::Example> next() override {
      if (next_ >= end_) {
        return std::nullopt;
      }
      const int64_t index = next_;
      next_ += context_.readers();
      return dataset_.get(
          index, data::SampleContext{context_.seed, context_.epoch});
    }

   private:
    const data::Dataset& dataset_;
    data::StreamContext context_;
    int64_t next_;
    int64_t end_;
  };
  std::shared_ptr<const data::Dataset> dataset_;
  bool sized_;
  int64_t end_;
};

class TrainerTest : public ::testing::Test {
 protected:
  // On the CPU wherever the machine has a GPU too: these tests compare with
  // CPU tensors and expect CPU behaviour; the CUDA tests name "cuda".
  TrainerOptions options() {
    return TrainerOptions()
        .accelerator("cpu")
        .default_root_dir(dir_.path())
        .name("t")
        .enable_progress_bar(false);
  }
  data::DataLoader train_loader(int64_t workers = 0) {
    return data::DataLoader(
        train_set_,
        data::DataLoaderOptions(32).shuffle(true).seed(3).num_workers(workers));
  }
  hotloop::testing::TempDir dir_;
  std::shared_ptr<data::ImageClassificationDataset> train_set_ =
      quadrants(256, 1);
  std::shared_ptr<data::ImageClassificationDataset> val_set_ = quadrants(64, 2);
  data::DataLoader val_loader_{val_set_, data::DataLoaderOptions(40)};
};

} // namespace hotloop::train
