#pragma once

#include "hotloop/cli/config.h"
#include "hotloop/cli/init_from.h"
#include "hotloop/cli/pruning_config.h"
#include "hotloop/cli/quantization_config.h"
#include "hotloop/data/transforms.h"
#include "hotloop/dist/distributed_data_parallel.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/gpt.h"
#include "hotloop/models/init.h"
#include "hotloop/optim/optimizer_factory.h"
#include "hotloop/train/batch_mixing.h"
#include "hotloop/train/batch_size_finder.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/early_stopping.h"
#include "hotloop/train/lr_finder.h"
#include "hotloop/train/model_checkpoint.h"
#include "hotloop/train/trainer.h"
#include "hotloop/train/weight_averaging.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hotloop::cli {

/// The `data:` section.
struct DataConfig {
  /// fashion_mnist (its IDX files in root), idx (any MNIST-family
  /// folder), image_folder (a folder per class
  /// in root), text (windows of the file `path`) or synthetic (random
  /// images of image_shape, for speed measurements).
  std::string dataset = "fashion_mnist";
  /// synthetic: [C, H, W] of each image; training images (validation gets
  /// a fifth as many).
  std::vector<int64_t> image_shape = {3, 32, 32};
  int64_t synthetic_size = 50000;
  std::string root;
  std::string path;
  int64_t token_bytes = 1;
  int64_t block_size = 64;
  /// Tokens between window starts; 0: block_size.
  int64_t stride = 0;
  double val_fraction = 0.1;
  /// image_folder: validation images in the same class folders; empty: a
  /// seeded val_fraction of root.
  std::string val_root;
  /// image_folder: predict on every image under this folder (no classes)
  /// instead of the validation split.
  std::string predict_root;
  /// image_folder: [height, width] of every image after its crop.
  std::vector<int64_t> image_size = {224, 224};
  /// image_folder: 3 (RGB) or 1 (grayscale).
  int64_t channels = 3;
  /// image_folder: the crop of training and of evaluation images
  /// (data::ImageFolderOptions::crop) and its parameters.
  std::string train_crop = "random_resized_crop";
  std::string val_crop = "center_crop";
  std::vector<double> crop_scale = {0.08, 1.0};
  std::vector<double> crop_ratio = {3.0 / 4.0, 4.0 / 3.0};
  int64_t resize_size = 0;
  bool jpeg_draft = true;
  /// image_folder: "fail" or "skip" an unreadable file
  /// (data::ImageFolderOptions::on_bad_sample).
  std::string on_bad_sample = "fail";
  /// csv: the label column's header name ("": the last column) and the
  /// feature columns' (empty: every other column).
  std::string label_column;
  std::vector<std::string> feature_columns;
  /// csv: predict on this table (its label column optional) instead of
  /// the validation rows.
  std::string predict_path;
  /// idx: the files' name prefix (EMNIST's "emnist-letters-"); "": none,
  /// or the only one in root.
  std::string idx_prefix;
  /// idx: transform.mean/std are computed from the training images (they
  /// were not given).
  bool stats_from_data = false;
  int64_t batch_size = 256;
  int64_t val_batch_size = 1000;
  int64_t num_workers = 1;
  int64_t prefetch_factor = 2;
  bool persistent_workers = true;
  bool pin_memory = false;
  bool shuffle = true;
  bool drop_last = false;
  double timeout = 0;
  /// Training-split augmentation and normalization; validation and test
  /// use the same mean/std without augmentation.
  data::ImageTransformOptions transform;
};

/// The `tuner:` section: searches run before a fit.
struct TunerConfig {
  /// "power" or "binsearch": find the largest batch size first; "": off.
  std::string batch_size;
  train::BatchSizeFinderOptions batch_size_finder;
  /// How optimizer.lr follows a found batch size: none, linear or sqrt.
  std::string scale_lr = "none";
  /// Run the learning-rate range test first and train at its suggestion.
  bool lr_find = false;
  train::LrFinderOptions lr_finder;
};

/// Everything `hotloop fit|validate|test` needs, resolved from a Config.
struct FitConfig {
  /// The config this was read from: registered models and datasets read
  /// their own options from it.
  std::shared_ptr<const Config> config;
  uint64_t seed = 0;
  train::TrainerOptions trainer;
  /// trainer.strategy, trainer.num_nodes; trainer.process_group_backend and
  /// trainer.dist_timeout; the ddp section.
  std::string strategy = "auto";
  int64_t num_nodes = 1;
  dist::ProcessGroupOptions group;
  dist::DistributedDataParallelOptions ddp;
  std::string model_name;
  /// fashion_cnn's shape (channels, hidden, dropout, num_classes).
  models::FashionCnnOptions model;
  /// mlp's hidden widths; resnet's stem and zero_init_residual.
  std::vector<int64_t> mlp_hidden;
  std::string stem = "cifar";
  bool zero_init_residual = false;
  /// model.activation_checkpointing (resnet; gpt's is in `gpt`).
  bool activation_checkpointing = false;
  /// gpt's shape (vocab_size resolved, block_size = data.block_size).
  models::GptOptions gpt;
  /// model.top_k: the extra top-k accuracy the classifier logs.
  int64_t top_k = 5;
  /// model.label_smoothing: a classifier's training-loss label smoothing.
  double label_smoothing = 0.0;
  /// model.class_weights: a classifier's training-loss weight of each
  /// class; empty: none.
  std::vector<double> class_weights;
  /// model.mixup_alpha and model.cutmix_alpha: a classifier's MixUp/CutMix.
  train::BatchMixingOptions mixing;
  /// model.init and its options: how the network's weights are drawn.
  models::InitOptions init;
  /// model.init_from and its options: weights made elsewhere to start from.
  InitFromConfig init_from;
  /// model.task: classification, or regression (csv: a number per row).
  std::string task = "classification";
  /// The model_checkpoint section (used when trainer.enable_checkpointing).
  train::ModelCheckpointOptions checkpoint;
  /// The early_stopping section; empty unless early_stopping.enabled.
  std::optional<train::EarlyStoppingOptions> early_stopping;
  /// trainer.logger: CSV and TensorBoard loggers in the run folder.
  bool logger = true;
  /// trainer.histogram_every_n_epochs and trainer.log_images: what the
  /// TensorBoard logger records besides the scalars.
  int64_t histogram_every_n_epochs = 0;
  bool log_images = true;
  /// The weight_averaging section: a WeightAveraging callback when
  /// weight_averaging.enabled.
  std::optional<train::WeightAveragingOptions> weight_averaging;
  /// The lr_monitor section.
  bool lr_monitor = true;
  std::string lr_monitor_interval;
  bool lr_monitor_momentum = false;
  DataConfig data;
  optim::OptimizerOptions optimizer;
  optim::SchedulerOptions scheduler;
  TunerConfig tuner;
  /// The pruning section: a ModelPruning callback when pruning.enabled.
  std::optional<compress::ModelPruningOptions> pruning;
  /// The quantization section: quantization-aware training when
  /// quantization.qat.
  std::optional<QuantizationConfig> quantization;
};

/// Every key of the fit/validate/test config with its default, type, range
/// and help line. The YAML sections are trainer, model, data, optimizer and
/// lr_scheduler, as in LightningCLI.
const ConfigSchema& fit_schema();

/// Reads the typed settings out of `config` (built on fit_schema()). Checks
/// that need several keys at once throw ConfigError naming the keys.
FitConfig to_fit_config(const Config& config);

/// The classifier's options of `config` (model.top_k, label_smoothing,
/// class_weights, mixup_alpha, cutmix_alpha). With `classes` > 0, throws
/// ConfigError when class_weights has another count.
train::ClassifierOptions classifier_options(
    const FitConfig& config, int64_t classes = 0);

/// `config` with every default that to_fit_config derives from other keys
/// written out as a setting: the model a table resolves to, an image
/// folder's ImageNet statistics and unpadded crop, `[side]` as
/// `[side, side]`, a byte file's vocabulary. A run's config.yaml and
/// `--print_config` hold this, so that reading them back runs the same
/// settings whatever the defaults of the keys they came from.
Config resolve_config(const Config& config);

/// YAML flow text of `values` that reads back as exactly the same doubles:
/// `[0.48500000000000004, 0.456]`.
std::string float_list_text(const std::vector<double>& values);

} // namespace hotloop::cli
