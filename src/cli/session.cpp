#include "hotloop/cli/session.h"

#include "hotloop/cli/registry.h"
#include "hotloop/cli/trained_data.h"

#include "hotloop/core/error.h"
#include "hotloop/data/csv_dataset.h"
#include "hotloop/data/fashion_mnist.h"
#include "hotloop/data/image_folder.h"
#include "hotloop/data/subset.h"
#include "hotloop/data/tensor_dataset.h"
#include "hotloop/data/token_dataset.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/gpt.h"
#include "hotloop/models/init.h"
#include "hotloop/models/mlp.h"
#include "hotloop/models/resnet.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/language_model.h"
#include "hotloop/train/regressor.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <tuple>

namespace hotloop::cli {
namespace {

// The image model named by model.name, with its forward FLOPs per image
// where known (0 otherwise). A table's rows come as [features, 1, 1].
std::pair<torch::nn::AnyModule, double> image_network(
    const FitConfig& config, int64_t channels, int64_t height, int64_t width) {
  const int64_t classes = config.model.num_classes;
  if (const ModelRegistration* own = find_model(config.model_name)) {
    const ModelInputs inputs{*config.config, channels, height, width, classes};
    return {own->builder()(inputs), 0.0};
  }
  const int64_t size = height;
  if (config.model_name == "mlp") {
    const models::Mlp mlp(models::MlpOptions(channels * size * size, classes)
                              .hidden(config.mlp_hidden)
                              .dropout(config.model.dropout));
    double flops = 0;
    int64_t width = channels * size * size;
    for (int64_t hidden : config.mlp_hidden) {
      flops += 2.0 * width * hidden;
      width = hidden;
    }
    return {torch::nn::AnyModule(mlp), flops + 2.0 * width * classes};
  }
  if (models::is_resnet_name(config.model_name)) {
    const models::ResNet resnet(
        models::resnet_options(config.model_name)
            .num_classes(classes)
            .in_channels(channels)
            .stem(config.stem)
            .zero_init_residual(config.zero_init_residual)
            .activation_checkpointing(config.activation_checkpointing)
            .sync_batchnorm(config.ddp.sync_batchnorm()));
    return {torch::nn::AnyModule(resnet), resnet->flops_per_sample(size, size)};
  }
  models::FashionCnnOptions options = config.model;
  options.in_channels = channels;
  options.image_size = size;
  const models::FashionCnn cnn(options);
  return {torch::nn::AnyModule(cnn), cnn->flops_per_sample()};
}

// data.dataset=synthetic: uniformly random uint8 images and labels, the
// same for a given seed (torchvision's FakeData), for measuring speed on a
// shape no real dataset here has. Nothing can be learnt from them.
std::shared_ptr<data::ImageClassificationDataset> synthetic_split(
    const FitConfig& config,
    bool train,
    const data::ImageTransformOptions& transform) {
  const auto& shape = config.data.image_shape;
  const int64_t n = train
                        ? config.data.synthetic_size
                        : std::max<int64_t>(config.data.synthetic_size / 5, 1);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(
      config.seed * 2 + (train ? 0 : 1));
  at::Tensor images = at::randint(
      0, 256, {n, shape[0], shape[1], shape[2]}, generator, at::kByte);
  at::Tensor labels =
      at::randint(0, config.model.num_classes, {n}, generator, at::kLong);
  return std::make_shared<data::ImageClassificationDataset>(
      std::move(images), std::move(labels), transform);
}

// The transform of validation, test and predict images: the training one's
// normalization and output type, without augmentation.
data::ImageTransformOptions evaluation(
    const data::ImageTransformOptions& training) {
  data::ImageTransformOptions eval;
  eval.mean = training.mean;
  eval.std = training.std;
  eval.dtype = training.dtype;
  return eval;
}

// The model named by model.name for [C, H, W] images of `classes` classes,
// in an ImageClassifier.
void add_image_classifier(
    Session& session,
    const FitConfig& config,
    const std::array<int64_t, 3>& shape,
    int64_t classes) {
  FitConfig sized = config;
  sized.model.num_classes = classes;
  auto [network, flops] = image_network(sized, shape[0], shape[1], shape[2]);
  auto module = std::make_shared<train::ImageClassifier>(
      std::move(network),
      config.optimizer,
      config.scheduler,
      classifier_options(config, classes));
  module->set_flops_per_sample(flops);
  session.module = module;
  session.data.num_classes = classes;
}

Session image_session(const FitConfig& config, bool with_train) {
  Session session;
  const data::ImageTransformOptions eval_transform =
      evaluation(config.data.transform);
  const auto split = [&](bool train) {
    const auto& transform = train ? config.data.transform : eval_transform;
    if (const DatasetRegistration* own = find_dataset(config.data.dataset)) {
      auto set =
          own->builder()(DatasetInputs{*config.config, train, transform});
      HOTLOOP_CHECK_AS(
          DataError,
          set != nullptr,
          "data.dataset=",
          config.data.dataset,
          ": its build function gave no ",
          train ? "training" : "validation",
          " split");
      return set;
    }
    HOTLOOP_CHECK(
        config.data.dataset == "synthetic",
        "image_session: data.dataset=",
        config.data.dataset);
    return synthetic_split(config, train, transform);
  };
  if (with_train) {
    session.train_set = split(true);
  }
  const auto val_set = split(false);
  session.val_set = val_set;
  session.val_labels = val_set->labels();
  const auto& images = val_set->images();
  add_image_classifier(
      session,
      config,
      {images.size(1), images.size(2), images.size(3)},
      config.model.num_classes);
  return session;
}

// data.dataset=idx (fashion_mnist: the same with Fashion-MNIST's folder
// and statistics): an MNIST-family folder's training and test splits, the
// image shape and, for idx, the class count and (unless given) the
// normalization statistics from the files.
Session idx_session(const FitConfig& config, bool with_train) {
  const DataConfig& d = config.data;
  const bool idx = d.dataset == "idx";
  const auto val = data::load_mnist_split(
      d.root, /*train=*/false, std::nullopt, d.idx_prefix);
  std::shared_ptr<data::ImageClassificationDataset> train;
  if (with_train || d.stats_from_data) {
    train = data::load_mnist_split(
        d.root, /*train=*/true, std::nullopt, d.idx_prefix);
  }
  data::ImageTransformOptions train_transform = d.transform;
  if (d.stats_from_data) {
    std::tie(train_transform.mean, train_transform.std) =
        data::channel_statistics(train->images());
  }
  const data::ImageTransformOptions eval_transform =
      evaluation(train_transform);
  Session session;
  if (with_train) {
    session.train_set = std::make_shared<data::ImageClassificationDataset>(
        train->images(), train->labels(), train_transform);
  }
  session.val_set = std::make_shared<data::ImageClassificationDataset>(
      val->images(), val->labels(), eval_transform);
  session.val_labels = val->labels();
  int64_t classes = config.model.num_classes;
  if (idx) {
    classes = val->num_classes();
    if (train != nullptr) {
      classes = std::max(classes, train->num_classes());
    }
  }
  if (d.stats_from_data) {
    session.settings.emplace_back(
        "data.mean", float_list_text(train_transform.mean));
    session.settings.emplace_back(
        "data.std", float_list_text(train_transform.std));
  }
  if (idx) {
    session.settings.emplace_back("model.num_classes", std::to_string(classes));
  } else if (classes == 10) {
    // Fashion-MNIST's own names: test, predict and the report show them.
    session.data.class_names = data::fashion_mnist_classes();
  }
  const auto& images = val->images();
  add_image_classifier(
      session,
      config,
      {images.size(1), images.size(2), images.size(3)},
      classes);
  return session;
}

// data.path's table: the label column, the feature columns and the class
// names given (a checkpoint's) or as the config names them.
std::shared_ptr<data::CsvDataset> read_table(
    const FitConfig& config,
    const std::string& path,
    const TrainedData* trained,
    bool label_optional = false) {
  const DataConfig& d = config.data;
  data::CsvDatasetOptions options;
  options.delimiter('\0')
      .label_column(d.label_column)
      .feature_columns(d.feature_columns)
      .regression(config.task == "regression")
      .label_optional(label_optional);
  if (trained != nullptr) {
    options.label_column(trained->label_name)
        .feature_columns(trained->feature_names)
        .classes(trained->class_names);
  }
  return std::make_shared<data::CsvDataset>(path, options);
}

// data.dataset=csv: the table in data.path, a seeded data.val_fraction of
// its rows validating; features standardized with the training rows' mean
// and std; an MLP (or a registered model, given [features, 1, 1]). With a
// checkpoint's description (`trained`), the columns, classes and
// statistics are the trained ones, and data.predict_path can be predicted
// on without data.path.
Session csv_session(
    const FitConfig& config, bool with_train, const TrainedData* trained) {
  const DataConfig& d = config.data;
  const bool regression = config.task == "regression";
  const bool predict = !with_train && !d.predict_path.empty();
  const bool described = trained != nullptr && !trained->feature_names.empty();
  Session session;
  std::shared_ptr<data::CsvDataset> table;
  std::vector<int64_t> train_rows;
  std::vector<int64_t> val_rows;
  const auto split = [&] {
    std::tie(train_rows, val_rows) =
        data::random_split(table->size(), d.val_fraction, config.seed);
  };
  if (described) {
    session.data = *trained;
  } else {
    // The training rows' columns, classes and statistics.
    HOTLOOP_CHECK_AS(
        ConfigError,
        !d.path.empty(),
        "data.path: the checkpoint keeps no table statistics (an older "
        "one), so data.path must name the table it was trained on");
    table = read_table(config, d.path, nullptr);
    split();
    const at::Tensor train_inputs =
        table->inputs().index_select(0, at::tensor(train_rows, at::kLong));
    const at::Tensor mean = train_inputs.mean(0);
    at::Tensor std = train_inputs.std(0, /*unbiased=*/false);
    std = at::where(std > 0, std, at::ones_like(std)); // constant columns
    TrainedData& data = session.data;
    data.num_classes = table->num_classes();
    data.class_names = table->class_names();
    data.label_name = table->label_name();
    data.feature_names = table->feature_names();
    data.feature_mean = std::vector<double>(
        mean.data_ptr<float>(), mean.data_ptr<float>() + mean.numel());
    data.feature_std = std::vector<double>(
        std.data_ptr<float>(), std.data_ptr<float>() + std.numel());
    if (regression) {
      // The target too: the network learns it standardized, whatever its
      // units (a target near 250 would otherwise take many epochs to
      // reach from outputs near 0).
      const at::Tensor targets =
          table->targets()
              .index_select(0, at::tensor(train_rows, at::kLong))
              .to(at::kDouble);
      const double target_std = targets.std(/*unbiased=*/false).item<double>();
      data.target_mean = targets.mean().item<double>();
      data.target_std = target_std > 0 ? target_std : 1.0;
    }
  }
  if (predict) {
    table = read_table(config, d.predict_path, &session.data, true);
    train_rows.clear();
    val_rows.resize(table->size());
    std::iota(val_rows.begin(), val_rows.end(), 0);
    session.labeled = table->labeled();
  } else if (described) {
    table = read_table(config, d.path, &session.data);
    split();
  }
  const TrainedData& data = session.data;
  const auto stats = [](const std::vector<double>& values) {
    return at::tensor(values, at::kDouble).to(at::kFloat);
  };
  auto standardized = std::make_shared<data::TensorDataset>(
      (table->inputs() - stats(data.feature_mean)) / stats(data.feature_std),
      table->targets());
  const at::Tensor val_index = at::tensor(val_rows, at::kLong);
  if (with_train) {
    session.train_set =
        std::make_shared<data::Subset>(standardized, std::move(train_rows));
  }
  if (predict) {
    session.val_set = standardized; // every row, in file order
  } else {
    session.val_set =
        std::make_shared<data::Subset>(standardized, std::move(val_rows));
  }
  const auto features = static_cast<int64_t>(data.feature_names.size());
  int64_t outputs = 1;
  if (!regression) {
    if (session.labeled) {
      session.val_labels = table->targets().index_select(0, val_index);
    }
    outputs = data.num_classes;
    HOTLOOP_CHECK_AS(
        DataError,
        outputs >= 2,
        d.path,
        ": the label column holds one class; classification needs two or "
        "more (for a number to predict: model.task=regression)");
  }
  // A row is a [features, 1, 1] "image" to the MLP or a registered model.
  FitConfig sized = config;
  sized.model.num_classes = outputs;
  auto [network, flops] = image_network(sized, features, 1, 1);
  std::shared_ptr<train::NetworkModule> module;
  if (regression) {
    auto regressor = std::make_shared<train::Regressor>(
        std::move(network), config.optimizer, config.scheduler);
    if (data.target_mean && data.target_std) {
      regressor->set_target_scale(*data.target_mean, *data.target_std);
    }
    module = regressor;
  } else {
    module = std::make_shared<train::ImageClassifier>(
        std::move(network),
        config.optimizer,
        config.scheduler,
        classifier_options(config, outputs));
  }
  module->set_flops_per_sample(flops);
  session.module = module;
  return session;
}

// data.dataset=image_folder: data.root's class folders, validated on
// data.val_root's or on a seeded data.val_fraction of data.root's images.
Session image_folder_session(
    const FitConfig& config, bool with_train, const TrainedData* trained) {
  const DataConfig& d = config.data;
  data::ImageFolderOptions options(d.image_size);
  options.channels(d.channels)
      .crop_scale(d.crop_scale)
      .crop_ratio(d.crop_ratio)
      .resize_size(d.resize_size)
      .jpeg_draft(d.jpeg_draft)
      .on_bad_sample(d.on_bad_sample);
  data::ImageFolderOptions train_options = options;
  train_options.crop(d.train_crop).transform(d.transform);
  data::ImageFolderOptions eval_options = options;
  eval_options.crop(d.val_crop).transform(evaluation(d.transform));

  Session session;
  const bool predict = !with_train && !d.predict_root.empty();
  const bool described = trained != nullptr && !trained->class_names.empty();
  std::shared_ptr<data::ImageFolder> train_folder;
  if (!(predict && described)) {
    train_folder = std::make_shared<data::ImageFolder>(d.root, train_options);
    session.data.class_names = train_folder->classes();
    if (described) {
      require_same_data(*trained, session.data);
    }
  } else {
    session.data.class_names = trained->class_names;
  }
  std::shared_ptr<data::ImageFolder> val_folder;
  std::vector<int64_t> val_indices;
  if (predict) {
    // Images to predict: no labels, the trained classes' names.
    eval_options.classes(session.data.class_names).unlabeled(true);
    val_folder =
        std::make_shared<data::ImageFolder>(d.predict_root, eval_options);
    session.val_set = val_folder;
    session.labeled = false;
  } else if (d.val_root.empty()) {
    val_folder = std::make_shared<data::ImageFolder>(d.root, eval_options);
    auto [train_indices, held_out] =
        data::random_split(train_folder->size(), d.val_fraction, config.seed);
    if (with_train) {
      session.train_set = std::make_shared<data::Subset>(
          train_folder, std::move(train_indices));
    }
    val_indices = std::move(held_out);
    session.val_set = std::make_shared<data::Subset>(val_folder, val_indices);
  } else {
    eval_options.classes(train_folder->classes());
    val_folder = std::make_shared<data::ImageFolder>(d.val_root, eval_options);
    if (with_train) {
      session.train_set = train_folder;
    }
    session.val_set = val_folder;
  }
  if (val_indices.empty()) { // the whole folder, in order
    val_indices.resize(val_folder->size());
    std::iota(val_indices.begin(), val_indices.end(), 0);
  }
  std::vector<int64_t> labels;
  for (const int64_t index : val_indices) {
    labels.push_back(val_folder->samples()[index].target);
    session.val_names.push_back(val_folder->samples()[index].path);
  }
  if (!predict) {
    session.val_labels = at::tensor(labels, at::kLong);
  }
  for (const auto& folder : {train_folder, val_folder}) {
    if (folder != nullptr) {
      session.image_folders.push_back(folder);
    }
  }
  add_image_classifier(
      session,
      config,
      {d.channels, d.image_size[0], d.image_size[1]},
      static_cast<int64_t>(session.data.class_names.size()));
  return session;
}

Session text_session(const FitConfig& config) {
  Session session;
  const auto& d = config.data;
  auto tokens = std::make_shared<data::TokenDataset>(
      d.path,
      data::TokenDatasetOptions(d.block_size)
          .stride(d.stride > 0 ? d.stride : d.block_size)
          .token_bytes(d.token_bytes)
          .vocab_size(config.gpt.vocab_size()));
  // The file's last windows validate; the rest train.
  const int64_t windows = tokens->size();
  const auto val_windows = static_cast<int64_t>(
      std::floor(d.val_fraction * static_cast<double>(windows)));
  HOTLOOP_CHECK_AS(
      DataError,
      val_windows >= 1 && val_windows < windows,
      d.path,
      ": ",
      windows,
      " windows of data.block_size=",
      d.block_size,
      " tokens leave none for ",
      val_windows < 1 ? "validation" : "training",
      " at data.val_fraction=",
      d.val_fraction);
  // Subsets, not samplers: the loaders shuffle them, and under data
  // parallelism a DistributedSampler splits them across the processes.
  std::vector<int64_t> train_indices(windows - val_windows);
  std::iota(train_indices.begin(), train_indices.end(), 0);
  std::vector<int64_t> val_indices(val_windows);
  std::iota(val_indices.begin(), val_indices.end(), windows - val_windows);
  session.train_set =
      std::make_shared<data::Subset>(tokens, std::move(train_indices));
  session.val_set =
      std::make_shared<data::Subset>(tokens, std::move(val_indices));
  const models::Gpt gpt(config.gpt);
  auto module = std::make_shared<train::LanguageModel>(
      torch::nn::AnyModule(gpt), config.optimizer, config.scheduler);
  // nanoGPT's estimate: 2 FLOPs per parameter and token, plus attention.
  module->set_flops_per_sample(
      static_cast<double>(d.block_size) *
      gpt->forward_flops_per_token(d.block_size));
  session.module = module;
  return session;
}

// The datasets and model data.dataset names.
Session data_and_model(
    const FitConfig& config, bool with_train, const TrainedData* trained) {
  if (config.data.dataset == "text") {
    return text_session(config);
  }
  if (config.data.dataset == "image_folder") {
    return image_folder_session(config, with_train, trained);
  }
  if (config.data.dataset == "csv") {
    return csv_session(config, with_train, trained);
  }
  if (config.data.dataset == "idx" || config.data.dataset == "fashion_mnist") {
    return idx_session(config, with_train);
  }
  return image_session(config, with_train);
}

} // namespace

Session build_session(
    const FitConfig& config, bool with_train, const TrainedData* trained) {
  train::seed_everything(config.seed);
  Session session = data_and_model(config, with_train, trained);
  // After the seed and the model's own init: the same weights every run.
  models::init_weights(*session.module, config.init);
  return session;
}

data::DataLoaderOptions loader_options(
    const FitConfig& config, const Session& session, bool train) {
  const auto& d = config.data;
  auto options =
      data::DataLoaderOptions(train ? d.batch_size : d.val_batch_size)
          .shuffle(train && d.shuffle)
          .drop_last(train && d.drop_last)
          .num_workers(d.num_workers)
          .pin_memory(d.pin_memory)
          .timeout(d.timeout)
          .seed(config.seed);
  if (d.num_workers > 0) {
    // Both only mean something with loader threads (PyTorch rejects them
    // otherwise), so the config's values apply only then.
    options.prefetch_factor(d.prefetch_factor)
        .persistent_workers(d.persistent_workers);
  }
  return options;
}

} // namespace hotloop::cli
