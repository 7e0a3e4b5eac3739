#include "hotloop/cli/fit_config.h"

#include "hotloop/cli/registry.h"

#include "hotloop/core/error.h"
#include "hotloop/data/fashion_mnist.h"

#include <c10/util/ArrayRef.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace hotloop::cli {
namespace {

OptionSpec opt(
    std::string key,
    OptionType type,
    std::string default_value,
    std::string help,
    std::optional<double> min = std::nullopt,
    std::optional<double> max = std::nullopt) {
  OptionSpec spec;
  spec.key = std::move(key);
  spec.type = type;
  spec.default_value = std::move(default_value);
  spec.help = std::move(help);
  spec.min = min;
  spec.max = max;
  return spec;
}

OptionSpec choice(
    std::string key,
    std::string default_value,
    std::vector<std::string> choices,
    std::string help) {
  OptionSpec spec =
      opt(std::move(key),
          OptionType::kString,
          std::move(default_value),
          std::move(help));
  spec.choices = std::move(choices);
  return spec;
}

// YAML text of a library default, so that the CLI and the library share one
// source of defaults (models::FashionCnnOptions for the model section).
std::string default_text(int64_t value) {
  return std::to_string(value);
}
std::string default_text(bool value) {
  return value ? "true" : "false";
}
std::string default_text(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}
std::string default_text(const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(values[i]);
  }
  return text + "]";
}

// trainer.name when none is given: the data, and the model where it is not
// the data's default, so that runs of other data or another model never
// share a folder (and --ckpt_path=last never takes another model's run).
std::string run_name(const FitConfig& f) {
  const DataConfig& d = f.data;
  const auto base = [](const std::string& path, bool stem) {
    std::filesystem::path p(path);
    while (!p.empty() && p.filename().empty()) {
      p = p.parent_path(); // "flowers/" names flowers
    }
    const std::string name = (stem ? p.stem() : p.filename()).string();
    return name.empty() || name == "." || name == ".." ? std::string("data")
                                                       : name;
  };
  std::string name = d.dataset;
  std::string default_model = "fashion_cnn";
  if (d.dataset == "idx" || d.dataset == "image_folder") {
    name = base(d.root, false);
  } else if (d.dataset == "csv") {
    name = base(d.path.empty() ? d.predict_path : d.path, true);
    default_model = "mlp";
  } else if (d.dataset == "text") {
    name = base(d.path, true);
    default_model = "gpt";
  }
  if (f.model_name != default_model) {
    name += "_" + f.model_name;
  }
  return name;
}

// A number, or "" for none: the config's way of writing Python's None.
std::optional<double> optional_number(const Config& c, const std::string& key) {
  const std::string text = c.get_string(key);
  if (text.empty()) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  HOTLOOP_CHECK_AS(
      ConfigError,
      end == text.c_str() + text.size() && std::isfinite(value),
      key,
      ": expected a number or \"\" (off), got '",
      text,
      "'");
  return value;
}

// The built-in names followed by those registered from the user's code.
template <typename R>
std::vector<std::string> with_registered(
    const std::vector<std::string>& built_in,
    const std::vector<R>& registered) {
  std::vector<std::string> names = built_in;
  for (const R& r : registered) {
    names.push_back(r.name());
  }
  return names;
}

// "; tiny_net: two linear layers" for each registration.
template <typename R>
std::string registered_help(const std::vector<R>& registered) {
  std::string help;
  for (const R& r : registered) {
    help += "; " + r.name() + ": " + r.help();
  }
  return help;
}

// The options of registered models and datasets, after hotloop's own.
template <typename R>
void add_registered_options(
    ConfigSchema& s, const std::vector<R>& registered, const char* what) {
  for (const R& r : registered) {
    for (const OptionSpec& spec : r.options()) {
      try {
        s.add(spec);
      } catch (const std::logic_error& e) {
        throw std::logic_error(
            std::string("register_") + what + "(" + r.name() + "): option " +
            spec.key + ": " + e.what());
      }
    }
  }
}

ConfigSchema make_schema() {
  using T = OptionType;
  ConfigSchema s;
  // trainer: Lightning's Trainer flags.
  s.add(
      opt("trainer.max_epochs",
          T::kInt,
          "15",
          "epochs to train; -1: no limit (max_steps, max_time or early "
          "stopping ends the fit)",
          -1));
  s.add(
      opt("trainer.min_epochs",
          T::kInt,
          "0",
          "train at least this many epochs, whatever early stopping says",
          0));
  s.add(
      opt("trainer.max_steps",
          T::kInt,
          "-1",
          "stop after this many optimizer steps; -1: no limit",
          -1));
  s.add(
      opt("trainer.limit_train_batches",
          T::kFloat,
          "-1",
          "batches per training epoch: -1 all, a fraction in (0, 1), or a "
          "count",
          -1));
  s.add(
      opt("trainer.limit_val_batches",
          T::kFloat,
          "-1",
          "batches per validation: -1 all, 0 none, a fraction in (0, 1), "
          "or a count",
          -1));
  s.add(
      opt("trainer.limit_test_batches",
          T::kFloat,
          "-1",
          "batches per test run: -1 all, a fraction in (0, 1), or a count",
          -1));
  s.add(
      opt("trainer.limit_predict_batches",
          T::kFloat,
          "-1",
          "batches per predict run: -1 all, a fraction in (0, 1), or a "
          "count",
          -1));
  s.add(
      opt("trainer.val_check_interval",
          T::kFloat,
          "1.0",
          "validate every this fraction of an epoch (<= 1) or every this "
          "many training batches (> 1)",
          0));
  s.add(
      opt("trainer.overfit_batches",
          T::kFloat,
          "0",
          "train on the same first n batches (or fraction) every epoch, "
          "validate on the first n; 0: off",
          0));
  s.add(
      opt("trainer.check_val_every_n_epoch",
          T::kInt,
          "1",
          "validate every n epochs (and after the last)",
          1));
  s.add(
      opt("trainer.accumulate_grad_batches",
          T::kInt,
          "1",
          "batches whose gradients are summed per optimizer step",
          1));
  s.add(choice(
      "trainer.precision",
      "32-true",
      {"32-true",
       "32",
       "16-mixed",
       "16",
       "bf16-mixed",
       "bf16",
       "bf16-true",
       "64-true",
       "64"},
      "numeric precision, as Lightning spells it (16-mixed: float16 "
      "autocast + loss scaling, CUDA; 64-true: float64 weights and inputs; "
      "32, 16, bf16 and 64 are 32-true, 16-mixed, bf16-mixed and 64-true)"));
  s.add(
      opt("trainer.zero_grad_set_to_none",
          T::kBool,
          "true",
          "drop gradients after each step instead of zero-filling them"));
  s.add(
      opt("trainer.gradient_clip_val",
          T::kFloat,
          "0",
          "clip the global gradient norm to this; 0: off",
          0));
  s.add(choice(
      "trainer.gradient_clip_algorithm",
      "norm",
      {"norm", "value"},
      "clip the global norm, or each gradient element"));
  s.add(
      opt("trainer.max_time",
          T::kFloat,
          "0",
          "stop after this many seconds; 0: no limit",
          0));
  s.add(
      opt("trainer.fast_dev_run",
          T::kInt,
          "0",
          "run n training and validation batches once, writing nothing; 0: off",
          0));
  s.add(
      opt("trainer.num_sanity_val_steps",
          T::kInt,
          "2",
          "validation batches run before training starts; -1: all",
          -1));
  s.add(
      opt("trainer.deterministic",
          T::kBool,
          "false",
          "use deterministic algorithms only"));
  s.add(
      opt("trainer.benchmark",
          T::kBool,
          "true",
          "let cuDNN pick the fastest convolution algorithm per shape"));
  s.add(
      opt("trainer.benchmark_limit",
          T::kInt,
          "10",
          "with trainer.benchmark, the most algorithms cuDNN times per shape "
          "(its heuristics' first; PyTorch's cudnn.benchmark_limit); 0: all",
          0,
          1000000));
  s.add(choice(
      "trainer.sdpa_backend",
      "auto",
      {"auto", "flash", "efficient", "cudnn", "math"},
      "the attention kernel (a GPT's): auto as LibTorch chooses, or that "
      "one alone (LibTorch 2.x; 1.13 has math only)"));
  s.add(
      opt("trainer.detect_anomaly",
          T::kBool,
          "false",
          "autograd anomaly detection (slow; for debugging NaNs)"));
  s.add(
      opt("trainer.logger",
          T::kBool,
          "true",
          "write metrics.csv and TensorBoard event files into the run folder"));
  s.add(choice(
      "trainer.on_nonfinite_loss",
      "stop",
      {"stop", "skip_step", "ignore"},
      "a NaN or infinite loss: stop the fit naming the step, skip that "
      "optimizer step, or train on"));
  s.add(
      opt("trainer.new_folder_on_resume",
          T::kBool,
          "false",
          "--ckpt_path from a run folder: train on in a new version folder "
          "instead of continuing that folder's history"));
  s.add(choice(
      "trainer.profiler",
      "",
      {"", "pytorch"},
      "pytorch: also write a Chrome trace of a few steps to trace.json"));
  s.add(
      opt("trainer.profiler_steps",
          T::kInt,
          "5",
          "optimizer steps the pytorch profiler records",
          1));
  s.add(
      opt("trainer.profiler_skip_steps",
          T::kInt,
          "2",
          "steps before the ones the pytorch profiler records (0: from the "
          "first)",
          0));
  s.add(
      opt("trainer.peak_tflops",
          T::kFloat,
          "0",
          "device peak (TFLOP/s) for the step profile's MFU and verdict; 0: "
          "measure the matmul rate",
          0));
  s.add(
      opt("trainer.inference_mode",
          T::kBool,
          "true",
          "evaluate under inference mode (false: under no_grad)"));
  s.add(
      opt("trainer.accelerator",
          T::kString,
          "auto",
          "auto, cpu, cuda, gpu or cuda:N (N counts CUDA_VISIBLE_DEVICES)"));
  s.add(
      opt("trainer.devices",
          T::kString,
          "auto",
          "auto, 1, or one device index as [N]"));
  s.add(choice(
      "trainer.strategy",
      "auto",
      {"auto", "ddp"},
      "ddp: one process per device (trainer.devices of them on each of "
      "trainer.num_nodes nodes), gradients all-reduced during backward; "
      "auto: ddp when torchrun or SLURM started several processes"));
  s.add(
      opt("trainer.num_nodes",
          T::kInt,
          "1",
          "machines of a ddp run (each started with NODE_RANK, MASTER_ADDR "
          "and MASTER_PORT, or by torchrun or SLURM)",
          1));
  s.add(choice(
      "trainer.process_group_backend",
      "",
      {"", "gloo", "nccl"},
      "c10d backend of a ddp run; \"\": gloo on the CPU, nccl on CUDA"));
  s.add(
      opt("trainer.sync_batchnorm",
          T::kBool,
          "false",
          "BatchNorm statistics over the batches of every ddp process "
          "(SyncBatchNorm), not each process's own"));
  s.add(
      opt("trainer.dist_timeout",
          T::kFloat,
          "1800",
          "seconds a ddp run waits for a process (rendezvous, every "
          "collective) before it stops with an error",
          0.001));
  s.add(
      opt("ddp.bucket_cap_mb",
          T::kFloat,
          "25",
          "gradients are all-reduced in buckets of this many MiB (the first "
          "1 MiB)",
          0.001));
  s.add(
      opt("ddp.find_unused_parameters",
          T::kBool,
          "false",
          "find parameters a step does not use (for models that skip some)"));
  s.add(
      opt("ddp.gradient_as_bucket_view",
          T::kBool,
          "false",
          "gradients are views into the all-reduce buckets (less memory)"));
  s.add(
      opt("ddp.static_graph",
          T::kBool,
          "false",
          "the parameters used never change: less bookkeeping per step"));
  s.add(
      opt("ddp.broadcast_buffers",
          T::kBool,
          "true",
          "rank 0's buffers (BatchNorm statistics) to every process after "
          "each step"));
  s.add(
      opt("trainer.channels_last",
          T::kBool,
          "false",
          "channels-last memory format for 4-D weights and inputs"));
  s.add(
      opt("trainer.cuda_graphs",
          T::kBool,
          "false",
          "capture the training step as a CUDA graph after 3 warm-up steps "
          "and replay it (CUDA; one process, no accumulation, no fp16 loss "
          "scaling; sgd, adam or adamw)"));
  s.add(
      opt("trainer.default_root_dir",
          T::kString,
          "runs",
          "runs go to <default_root_dir>/<name>/version_N; \"\" (in YAML): no "
          "files"));
  s.add(
      opt("trainer.name",
          T::kString,
          "",
          "run name, the folder under default_root_dir; empty: named after "
          "the data and a model not its default (fashion_mnist, flowers, "
          "flowers_resnet18, iris)"));
  s.add(
      opt("trainer.seed",
          T::kInt,
          "0",
          "seed of model init, shuffling and augmentation",
          0));
  s.add(
      opt("trainer.num_threads",
          T::kInt,
          "0",
          "LibTorch intra-op threads; 0: auto (every core, less excess loader "
          "threads)",
          0,
          1024));
  s.add(
      opt("trainer.blas_threads",
          T::kInt,
          "1",
          "OpenBLAS's own threads; 1 leaves the cores to LibTorch's threads, "
          "0: the library's default",
          0,
          1024));
  s.add(
      opt("trainer.retain_host_memory",
          T::kBool,
          "true",
          "keep freed host memory for reuse (no page faults on every step's "
          "activations)"));
  s.add(
      opt("trainer.enable_checkpointing",
          T::kBool,
          "true",
          "save checkpoints as the model_checkpoint section says"));
  s.add(opt(
      "trainer.handle_signals",
      T::kBool,
      "true",
      "on Ctrl-C/SIGTERM finish the step, checkpoint and exit (resumable)"));
  s.add(
      opt("trainer.enable_progress_bar",
          T::kBool,
          "true",
          "live progress bar (a line every log_every_n_steps when not a "
          "terminal) and a line per epoch"));
  s.add(
      opt("trainer.log_every_n_steps",
          T::kInt,
          "50",
          "optimizer steps between logged records (and progress lines when "
          "output is not a terminal)",
          0));
  s.add(
      opt("trainer.histogram_every_n_epochs",
          T::kInt,
          "0",
          "TensorBoard: weight histograms at the end of every n-th epoch and "
          "gradient histograms at its first optimizer step; 0: none (they "
          "cost the step they land in)",
          0));
  s.add(
      opt("trainer.log_images",
          T::kBool,
          "true",
          "TensorBoard: a grid of the first training batch's images (up to "
          "64), once per fit"));
  s.add(
      opt("trainer.flush_logs_every_n_steps",
          T::kInt,
          "100",
          "optimizer steps between writes of metrics.csv and the event file "
          "(also at every epoch end); 0: only at epoch ends",
          0));
  // model
  s.add(choice(
      "model.name",
      "fashion_cnn",
      with_registered(built_in_models(), registered_models()),
      "the network (gpt needs data.dataset=text)" +
          registered_help(registered_models())));
  s.add(
      opt("model.mlp_hidden",
          T::kIntList,
          "[512, 256]",
          "mlp: hidden layer widths",
          1));
  s.add(choice(
      "model.stem",
      "cifar",
      {"cifar", "imagenet"},
      "resnet: 3x3 stride-1 stem (small images) or torchvision's 7x7 + pool"));
  s.add(
      opt("model.zero_init_residual",
          T::kBool,
          "false",
          "resnet: zero the last BatchNorm of each block"));
  s.add(opt("model.n_layer", T::kInt, "4", "gpt: transformer blocks", 1));
  s.add(opt("model.n_head", T::kInt, "4", "gpt: attention heads", 1));
  s.add(opt("model.n_embd", T::kInt, "128", "gpt: embedding width", 1));
  s.add(
      opt("model.vocab_size",
          T::kInt,
          "0",
          "gpt: vocabulary; 0: 256 for data.token_bytes=1, else required",
          0));
  s.add(opt("model.bias", T::kBool, "true", "gpt: biases in linear layers"));
  s.add(
      opt("model.loss_chunk_size",
          T::kInt,
          "4096",
          "gpt: positions per chunk of the output layer and training loss "
          "(no float32 logits for the whole batch); 0: the whole batch's "
          "logits",
          0));
  s.add(
      opt("model.fused_layer_norm",
          T::kBool,
          "true",
          "gpt: each residual add and the LayerNorm after it in one CUDA "
          "kernel each way (elsewhere the same ATen ops)"));
  s.add(
      opt("model.fused_cross_entropy",
          T::kBool,
          "true",
          "gpt: each loss chunk's log-softmax, loss and gradient in one "
          "CUDA kernel (with model.loss_chunk_size > 0; elsewhere the same "
          "ATen ops)"));
  s.add(
      opt("model.fused_bias_gradient",
          T::kBool,
          "true",
          "gpt: each Linear's bias gradient summed by one CUDA kernel, the "
          "MLP's first with GELU's backward (elsewhere the same ATen ops)"));
  s.add(
      opt("model.activation_checkpointing",
          T::kBool,
          "false",
          "gpt, resnet: keep only each block's (gpt) or stage's (resnet) "
          "input and recompute it in backward: less memory, one more forward"));
  const models::FashionCnnOptions cnn; // the library's defaults
  s.add(opt(
      "model.channels",
      T::kIntList,
      default_text(cnn.channels),
      "output channels of each conv block (conv -> BatchNorm -> ReLU -> pool)",
      1,
      4096));
  s.add(
      opt("model.hidden",
          T::kInt,
          default_text(cnn.hidden),
          "hidden width of the MLP head; 0: linear head",
          0));
  s.add(
      opt("model.conv_bias",
          T::kBool,
          default_text(cnn.conv_bias),
          "fashion_cnn: biases on the convolutions (BatchNorm cancels them)"));
  s.add(
      opt("model.dropout",
          T::kFloat,
          default_text(cnn.dropout),
          "dropout before the last layer",
          0,
          0.99));
  s.add(
      opt("model.num_classes",
          T::kInt,
          default_text(cnn.num_classes),
          "number of classes",
          2));
  s.add(
      opt("model.top_k",
          T::kInt,
          "5",
          "also log val/test accuracy within the top k classes; 1: off",
          1));
  s.add(
      opt("model.label_smoothing",
          T::kFloat,
          "0",
          "classifiers: the training loss's label smoothing, as "
          "CrossEntropyLoss(label_smoothing) (val_loss stays plain)",
          0,
          1));
  s.add(
      opt("model.class_weights",
          T::kFloatList,
          "[]",
          "classifiers: the training loss's weight of each class, in the "
          "order of the class indices, as CrossEntropyLoss(weight) (val_loss "
          "stays plain); []: none"));
  s.add(
      opt("model.mixup_alpha",
          T::kFloat,
          "0",
          "image classifiers: MixUp of each training batch, its weight drawn "
          "from Beta(alpha, alpha) (torchvision's MixUp); 0: off",
          0));
  s.add(
      opt("model.cutmix_alpha",
          T::kFloat,
          "0",
          "image classifiers: CutMix of each training batch (torchvision's); "
          "with mixup_alpha too, one of the two per batch; 0: off",
          0));
  s.add(choice(
      "model.init",
      "default",
      {"default",
       "xavier_uniform",
       "xavier_normal",
       "kaiming_uniform",
       "kaiming_normal",
       "orthogonal",
       "trunc_normal"},
      "re-draw every Linear, Conv and Embedding weight with torch.nn.init's "
      "scheme of this name (biases 0, norm layers 1 and 0); default: "
      "PyTorch's own"));
  s.add(
      opt("model.init_gain",
          T::kFloat,
          "1.0",
          "xavier_* and orthogonal init: the gain",
          0));
  s.add(choice(
      "model.init_mode",
      "fan_in",
      {"fan_in", "fan_out"},
      "kaiming_* init: keep the forward (fan_in) or backward (fan_out) "
      "variance"));
  s.add(choice(
      "model.init_nonlinearity",
      "relu",
      {"relu", "leaky_relu", "tanh", "sigmoid", "linear"},
      "kaiming_* init: the activation after the layer"));
  s.add(
      opt("model.init_std",
          T::kFloat,
          "0.02",
          "trunc_normal init: the standard deviation (cut at two)",
          0));
  s.add(choice(
      "model.task",
      "classification",
      {"classification", "regression"},
      "regression (data.dataset=csv): predict the label column's number "
      "with mean squared error, reported as val_rmse and val_mae"));
  add_init_from_options(s);
  // model_checkpoint, early_stopping, lr_monitor: the callbacks.
  s.add(
      opt("model_checkpoint.dirpath",
          T::kString,
          "",
          "checkpoint folder; \"\": <run folder>/checkpoints"));
  s.add(
      opt("model_checkpoint.filename",
          T::kString,
          "{epoch}-{step}",
          "file name pattern: {epoch}, {step}, {metric:.4f}"));
  s.add(
      opt("model_checkpoint.monitor",
          T::kString,
          "val_acc",
          "metric that ranks checkpoints; \"\": keep the newest"));
  s.add(choice(
      "model_checkpoint.mode",
      "max",
      {"min", "max"},
      "whether lower or higher monitored values are better"));
  s.add(
      opt("model_checkpoint.save_top_k",
          T::kInt,
          "1",
          "keep the best k checkpoints; -1: all, 0: only last.ckpt",
          -1));
  s.add(
      opt("model_checkpoint.save_last",
          T::kBool,
          "true",
          "also keep last.ckpt (what --ckpt_path last resumes)"));
  s.add(
      opt("model_checkpoint.every_n_epochs",
          T::kInt,
          "1",
          "save after every n-th epoch; 0: off",
          0));
  s.add(
      opt("model_checkpoint.every_n_train_steps",
          T::kInt,
          "0",
          "also save every n optimizer steps; 0: off",
          0));
  s.add(
      opt("model_checkpoint.auto_insert_metric_name",
          T::kBool,
          "true",
          "write name=value for each field of the file name"));
  s.add(
      opt("model_checkpoint.verbose",
          T::kBool,
          "false",
          "print a line for each checkpoint saved"));
  s.add(
      opt("early_stopping.enabled",
          T::kBool,
          "false",
          "stop when the monitored metric stops improving"));
  s.add(opt(
      "early_stopping.monitor", T::kString, "val_loss", "the metric to watch"));
  s.add(choice(
      "early_stopping.mode",
      "min",
      {"min", "max"},
      "whether the metric should fall or rise"));
  s.add(
      opt("early_stopping.patience",
          T::kInt,
          "3",
          "checks without improvement before stopping",
          1));
  s.add(
      opt("early_stopping.min_delta",
          T::kFloat,
          "0",
          "smallest change that counts as improvement",
          0));
  s.add(
      opt("early_stopping.strict",
          T::kBool,
          "true",
          "fail when the metric is not logged"));
  s.add(
      opt("early_stopping.check_finite",
          T::kBool,
          "true",
          "stop when the metric becomes NaN or infinite"));
  s.add(
      opt("early_stopping.stopping_threshold",
          T::kString,
          "",
          "stop once the metric is this good; \"\": off"));
  s.add(
      opt("early_stopping.divergence_threshold",
          T::kString,
          "",
          "stop once the metric is this bad; \"\": off"));
  s.add(
      opt("weight_averaging.enabled",
          T::kBool,
          "false",
          "validate, checkpoint and end the fit with an average of the "
          "weights (Lightning's WeightAveraging)"));
  s.add(choice(
      "weight_averaging.average",
      "ema",
      {"ema", "swa"},
      "ema: exponential moving average; swa: equal weights for every "
      "update"));
  s.add(
      opt("weight_averaging.decay",
          T::kFloat,
          "0.999",
          "ema: the old average's weight at each update, in [0, 1)",
          0));
  s.add(
      opt("weight_averaging.use_buffers",
          T::kBool,
          "true",
          "average BatchNorm's running statistics too (else they follow the "
          "model's)"));
  s.add(
      opt("weight_averaging.update_every_n_steps",
          T::kInt,
          "1",
          "update after every n-th optimizer step; 0: not after steps",
          0));
  s.add(
      opt("weight_averaging.update_starting_at_step",
          T::kInt,
          "0",
          "no update after the steps before this one (from 0)",
          0));
  s.add(
      opt("weight_averaging.update_starting_at_epoch",
          T::kInt,
          "-1",
          "update at the end of every epoch from this one (from 0) on; -1: "
          "not at epoch ends",
          -1));
  s.add(
      opt("lr_monitor.enabled",
          T::kBool,
          "true",
          "log each parameter group's learning rate"));
  s.add(choice(
      "lr_monitor.logging_interval",
      "",
      {"", "step", "epoch"},
      "step, epoch, or \"\": the schedule's interval"));
  s.add(
      opt("lr_monitor.log_momentum",
          T::kBool,
          "false",
          "also log momentum (adam: beta1)"));
  // data
  s.add(choice(
      "data.dataset",
      "fashion_mnist",
      with_registered(built_in_datasets(), registered_datasets()),
      "fashion_mnist: the IDX files in data.root; idx: any MNIST-family "
      "folder (MNIST, KMNIST, EMNIST, ...), its shape, classes and "
      "statistics from the files; csv: a table of numbers in data.path "
      "(data.label_column); image_folder: JPEG/PNG "
      "files in a folder per class under data.root; text: next-token "
      "windows of the file data.path; synthetic: random images "
      "(data.image_shape) and labels, for speed measurements" +
          registered_help(registered_datasets())));
  s.add(
      opt("data.image_shape",
          T::kIntList,
          "[3, 32, 32]",
          "synthetic: [channels, height, width] of each image"));
  s.add(
      opt("data.synthetic_size",
          T::kInt,
          "50000",
          "synthetic: training images (validation: a fifth as many)",
          1));
  s.add(
      opt("data.path",
          T::kString,
          "",
          "text: a token file, or any file read byte by byte "
          "(data.token_bytes=1); csv: the table (comma- or tab-separated, "
          "a header row)"));
  s.add(
      opt("data.token_bytes",
          T::kInt,
          "1",
          "text: 1 (bytes: the byte-level tokenizer), 2 (uint16) or 4 "
          "(uint32)",
          1,
          4));
  s.add(opt(
      "data.block_size", T::kInt, "64", "text: tokens per training window", 1));
  s.add(
      opt("data.stride",
          T::kInt,
          "0",
          "text: tokens between window starts; 0: data.block_size (no overlap)",
          0));
  s.add(
      opt("data.val_fraction",
          T::kFloat,
          "0.1",
          "text: the file's last fraction of windows kept for validation; "
          "image_folder: the share of data.root validated on without "
          "data.val_root; csv: the seeded share of rows validated on",
          0,
          0.9));
  s.add(
      opt("data.root",
          T::kString,
          data::kFashionMnistDefaultRoot,
          "fashion_mnist: folder with "
          "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]; image_folder: "
          "root/<class>/<image>.jpg|.jpeg|.png"));
  s.add(
      opt("data.label_column",
          T::kString,
          "",
          "csv: the header name of the column to predict; \"\": the last "
          "column"));
  s.add(
      opt("data.feature_columns",
          T::kString,
          "",
          "csv: the input columns' header names, comma-separated; \"\": "
          "every other column"));
  s.add(
      opt("data.predict_path",
          T::kString,
          "",
          "csv: hotloop predict reads this table (the trained columns by "
          "name, the label column optional) instead of the validation rows"));
  s.add(
      opt("data.idx_prefix",
          T::kString,
          "",
          "idx: the files' name prefix, as EMNIST's emnist-letters-; \"\": "
          "none, or the only set in data.root"));
  s.add(
      opt("data.val_root",
          T::kString,
          "",
          "image_folder: validation images, a folder per class; \"\": a "
          "seeded data.val_fraction of data.root"));
  s.add(
      opt("data.predict_root",
          T::kString,
          "",
          "image_folder: hotloop predict reads every image under this folder "
          "(no class folders needed) instead of the validation split"));
  s.add(
      opt("data.image_size",
          T::kIntList,
          "[224]",
          "image_folder: [height, width] (or [side]) of every image"));
  s.add(
      opt("data.channels",
          T::kInt,
          "3",
          "image_folder: 3 (RGB) or 1 (grayscale)",
          1,
          3));
  s.add(choice(
      "data.train_crop",
      "random_resized_crop",
      {"random_resized_crop", "center_crop", "resize"},
      "image_folder: training images' crop (torchvision's "
      "RandomResizedCrop; Resize + CenterCrop; the whole image resized)"));
  s.add(choice(
      "data.val_crop",
      "center_crop",
      {"center_crop", "resize"},
      "image_folder: validation/test/predict images' crop"));
  s.add(
      opt("data.crop_scale",
          T::kFloatList,
          "[0.08, 1.0]",
          "image_folder: random_resized_crop's [min, max] share of the area"));
  s.add(
      opt("data.crop_ratio",
          T::kFloatList,
          "[0.75, 1.3333333333]",
          "image_folder: random_resized_crop's [min, max] width/height"));
  s.add(
      opt("data.resize_size",
          T::kInt,
          "0",
          "image_folder: center_crop's shorter side before cropping; 0: "
          "image_size / 0.875 (256 for 224)",
          0));
  s.add(choice(
      "data.on_bad_sample",
      "fail",
      {"fail", "skip"},
      "image_folder: an unreadable or undecodable file stops the run "
      "(fail) or is replaced by the next readable one and counted (skip)"));
  s.add(
      opt("data.jpeg_draft",
          T::kBool,
          "true",
          "image_folder: decode large JPEGs at 1/2, 1/4 or 1/8 scale when "
          "the crop stays at least image_size (PIL's draft mode)"));
  s.add(opt("data.batch_size", T::kInt, "256", "training batch size", 1));
  s.add(opt(
      "data.val_batch_size", T::kInt, "1000", "validation/test batch size", 1));
  s.add(
      opt("data.num_workers",
          T::kInt,
          "1",
          "loader threads; 0 loads in the training thread",
          0,
          256));
  s.add(
      opt("data.prefetch_factor",
          T::kInt,
          "2",
          "batches each loader thread prepares ahead",
          1));
  s.add(
      opt("data.persistent_workers",
          T::kBool,
          "true",
          "keep loader threads between epochs (with num_workers > 0)"));
  s.add(
      opt("data.pin_memory",
          T::kBool,
          "false",
          "page-locked batches for asynchronous device copies (CUDA builds)"));
  s.add(
      opt("data.shuffle",
          T::kBool,
          "true",
          "reshuffle the training set every epoch"));
  s.add(
      opt("data.drop_last",
          T::kBool,
          "false",
          "drop the last incomplete training batch"));
  s.add(
      opt("data.timeout",
          T::kFloat,
          "0",
          "seconds to wait for a batch; 0: forever",
          0));
  s.add(
      opt("data.crop_padding",
          T::kInt,
          "2",
          "random crop after zero padding by this much; 0: off",
          0));
  s.add(
      opt("data.horizontal_flip",
          T::kBool,
          "true",
          "random horizontal flip of training images"));
  s.add(
      opt("data.random_erasing",
          T::kFloat,
          "0",
          "probability of torchvision's RandomErasing of a training image (a "
          "box of 2-33% of it set to 0 after normalization); 0: off",
          0,
          1));
  s.add(
      opt("data.mean",
          T::kFloatList,
          "[0.286]",
          "per-channel mean for Normalize (pixels in [0, 1])"));
  s.add(opt(
      "data.std", T::kFloatList, "[0.353]", "per-channel std for Normalize"));
  // optimizer
  s.add(choice(
      "optimizer.name",
      "adamw",
      {"sgd", "adam", "adamw", "rmsprop", "adagrad"},
      "the optimizer"));
  s.add(
      opt("optimizer.lr",
          T::kFloat,
          "0.004",
          "learning rate (onecycle: the peak)",
          0));
  s.add(opt("optimizer.weight_decay", T::kFloat, "0.0001", "weight decay", 0));
  s.add(
      opt("optimizer.momentum",
          T::kFloat,
          "0.9",
          "sgd momentum (PyTorch's default is 0); rmsprop momentum (0, as "
          "PyTorch's, if not given)",
          0,
          1));
  s.add(
      opt("optimizer.alpha",
          T::kFloat,
          "0.99",
          "rmsprop: smoothing constant of the squared gradients",
          0));
  s.add(opt(
      "optimizer.centered", T::kBool, "false", "rmsprop: centered variant"));
  s.add(opt("optimizer.nesterov", T::kBool, "false", "sgd Nesterov momentum"));
  s.add(opt("optimizer.beta1", T::kFloat, "0.9", "adam/adamw beta1", 0, 1));
  s.add(opt("optimizer.beta2", T::kFloat, "0.999", "adam/adamw beta2", 0, 1));
  s.add(
      opt("optimizer.eps",
          T::kFloat,
          "1e-08",
          "adam/adamw/rmsprop eps; adagrad eps (1e-10, as PyTorch's, if not "
          "given)",
          0));
  s.add(
      opt("optimizer.no_decay_norm_and_bias",
          T::kBool,
          "true",
          "no weight decay on normalization layers and biases"));
  s.add(choice(
      "optimizer.foreach",
      "auto",
      {"auto", "true", "false"},
      "sgd/adam/adamw multi-tensor step: auto (on CUDA), true, false"));
  s.add(choice(
      "optimizer.fused",
      "auto",
      {"auto", "true", "false"},
      "adam/adamw fused kernel step: auto (on CUDA, LibTorch >= 2.1, unless "
      "optimizer.foreach=false), true (also the CPU with LibTorch >= 2.4), "
      "false"));
  // lr_scheduler
  s.add(choice(
      "lr_scheduler.name",
      "onecycle",
      {"none",
       "step",
       "multistep",
       "exponential",
       "cosine",
       "cosine_restarts",
       "onecycle",
       "polynomial",
       "plateau",
       "constant",
       "linear",
       "cyclic",
       "swa"},
      "the learning-rate schedule"));
  s.add(choice(
      "lr_scheduler.interval",
      "step",
      {"step", "epoch"},
      "step the schedule after every optimizer step or every epoch"));
  s.add(
      opt("lr_scheduler.frequency",
          T::kInt,
          "1",
          "step the schedule every n intervals",
          1));
  s.add(
      opt("lr_scheduler.warmup_steps",
          T::kInt,
          "0",
          "linear warmup steps in front of the schedule",
          0));
  s.add(
      opt("lr_scheduler.warmup_start_factor",
          T::kFloat,
          "0.333333",
          "warmup starts at this fraction of the rate",
          0,
          1));
  s.add(
      opt("lr_scheduler.step_size",
          T::kInt,
          "30",
          "step: decay every step_size steps",
          1));
  s.add(
      opt("lr_scheduler.gamma",
          T::kFloat,
          "0.1",
          "step/multistep/exponential: decay factor; cyclic exp_range: "
          "factor per step (1 if not given)",
          0));
  s.add(
      opt("lr_scheduler.milestones",
          T::kIntList,
          "[]",
          "multistep: steps at which to decay",
          1));
  s.add(
      opt("lr_scheduler.t_max",
          T::kInt,
          "0",
          "cosine: half-period; 0: the whole run",
          0));
  s.add(
      opt("lr_scheduler.eta_min",
          T::kFloat,
          "0",
          "cosine/cosine_restarts: lowest rate",
          0));
  s.add(opt(
      "lr_scheduler.t_0", T::kInt, "10", "cosine_restarts: first period", 1));
  s.add(
      opt("lr_scheduler.t_mult",
          T::kInt,
          "1",
          "cosine_restarts: period growth factor",
          1));
  s.add(
      opt("lr_scheduler.max_lr",
          T::kFloat,
          "0",
          "onecycle: peak rate, 0: optimizer.lr; cyclic: peak rate "
          "(required)",
          0));
  s.add(
      opt("lr_scheduler.pct_start",
          T::kFloat,
          "0.3",
          "onecycle: fraction of steps spent rising",
          0,
          1));
  s.add(choice(
      "lr_scheduler.anneal_strategy",
      "cos",
      {"cos", "linear"},
      "onecycle, swa, swa_start: annealing shape"));
  s.add(
      opt("lr_scheduler.div_factor",
          T::kFloat,
          "25",
          "onecycle: initial rate = max_lr / div_factor",
          0));
  s.add(
      opt("lr_scheduler.final_div_factor",
          T::kFloat,
          "10000",
          "onecycle: final rate = initial / final_div_factor",
          0));
  s.add(
      opt("lr_scheduler.three_phase",
          T::kBool,
          "false",
          "onecycle: three-phase variant"));
  s.add(
      opt("lr_scheduler.cycle_momentum",
          T::kBool,
          "true",
          "onecycle/cyclic: cycle momentum (adam: beta1) inversely to the "
          "rate"));
  s.add(
      opt("lr_scheduler.base_momentum",
          T::kFloat,
          "0.85",
          "onecycle/cyclic: lowest momentum (cyclic: 0.8 if not given)",
          0,
          1));
  s.add(
      opt("lr_scheduler.max_momentum",
          T::kFloat,
          "0.95",
          "onecycle/cyclic: highest momentum (cyclic: 0.9 if not given)",
          0,
          1));
  s.add(
      opt("lr_scheduler.total_iters",
          T::kInt,
          "0",
          "polynomial/linear: steps to reach 0/end_factor; constant: steps "
          "at factor (5 if not given); 0: the whole run",
          0));
  s.add(opt("lr_scheduler.power", T::kFloat, "1", "polynomial: exponent", 0));
  s.add(
      opt("lr_scheduler.start_factor",
          T::kFloat,
          "0.333333",
          "linear: the rate's factor at the start",
          0,
          1));
  s.add(
      opt("lr_scheduler.end_factor",
          T::kFloat,
          "1",
          "linear: the rate's factor after total_iters",
          0,
          1));
  s.add(
      opt("lr_scheduler.base_lr",
          T::kFloat,
          "0",
          "cyclic: lowest rate (max_lr is the peak); 0: optimizer.lr",
          0));
  s.add(
      opt("lr_scheduler.step_size_up",
          T::kInt,
          "2000",
          "cyclic: steps from base_lr up to max_lr",
          1));
  s.add(
      opt("lr_scheduler.step_size_down",
          T::kInt,
          "0",
          "cyclic: steps back down; 0: step_size_up",
          0));
  s.add(
      opt("lr_scheduler.swa_lr",
          T::kFloat,
          "0",
          "swa, swa_start: the rate SWALR anneals to (required)",
          0));
  s.add(
      opt("lr_scheduler.anneal_epochs",
          T::kInt,
          "10",
          "swa, swa_start: steps (intervals) of the annealing; 0: swa_lr "
          "at once",
          0));
  s.add(
      opt("lr_scheduler.swa_start",
          T::kInt,
          "0",
          "steps (intervals) after which SWALR takes over from the schedule "
          "named, annealing to swa_lr (SWA's recipe); 0: never",
          0));
  s.add(choice(
      "lr_scheduler.mode",
      "min",
      {"min", "max", "triangular", "triangular2", "exp_range"},
      "plateau: min or max, whether the monitored metric should fall or "
      "rise; cyclic: triangular (if not given), triangular2 or exp_range"));
  s.add(
      opt("lr_scheduler.factor",
          T::kFloat,
          "0.1",
          "plateau: rate multiplier on a plateau; constant: the rate's "
          "factor for total_iters steps (1/3 if not given)",
          0,
          1));
  s.add(
      opt("lr_scheduler.patience",
          T::kInt,
          "10",
          "plateau: epochs without improvement before decaying",
          0));
  s.add(
      opt("lr_scheduler.threshold",
          T::kFloat,
          "0.0001",
          "plateau: least change that counts as improvement",
          0));
  s.add(choice(
      "lr_scheduler.threshold_mode",
      "rel",
      {"rel", "abs"},
      "plateau: threshold relative or absolute"));
  s.add(
      opt("lr_scheduler.cooldown",
          T::kInt,
          "0",
          "plateau: epochs to wait after a decay",
          0));
  s.add(opt("lr_scheduler.min_lr", T::kFloat, "0", "plateau: lowest rate", 0));
  s.add(
      opt("lr_scheduler.monitor",
          T::kString,
          "val_loss",
          "plateau: the logged metric to watch"));
  // tuner: searches run before the fit (Lightning's Tuner)
  s.add(choice(
      "tuner.batch_size",
      "",
      {"", "power", "binsearch"},
      "before the fit, find the largest data.batch_size that trains within "
      "tuner.max_memory: power (doubling) or binsearch (then bisecting); "
      "\"\": off"));
  s.add(
      opt("tuner.steps_per_trial",
          T::kInt,
          "3",
          "batch_size: optimizer steps per batch size tried",
          1));
  s.add(opt(
      "tuner.init_val", T::kInt, "2", "batch_size: the first size tried", 1));
  s.add(
      opt("tuner.max_trials",
          T::kInt,
          "25",
          "batch_size: the most increases of the batch",
          1));
  s.add(
      opt("tuner.max_memory",
          T::kString,
          "",
          "batch_size: the peak memory a batch may use on the CPU, as 6GiB, "
          "500MB or bytes; \"\": what the process holds plus 70% of the "
          "available memory"));
  s.add(choice(
      "tuner.scale_lr",
      "none",
      {"none", "linear", "sqrt"},
      "batch_size: scale optimizer.lr with the found batch (linear) or its "
      "square root (sqrt)"));
  s.add(
      opt("tuner.lr_find",
          T::kBool,
          "false",
          "before the fit, run a learning-rate range test and train with its "
          "suggestion (lr_find.csv in the run folder, drawn by the report)"));
  s.add(
      opt("tuner.lr_find_min_lr",
          T::kFloat,
          "1e-08",
          "lr_find: the lowest rate tried",
          0));
  s.add(
      opt("tuner.lr_find_max_lr",
          T::kFloat,
          "1",
          "lr_find: the highest rate tried",
          0));
  s.add(
      opt("tuner.lr_find_num_training",
          T::kInt,
          "100",
          "lr_find: optimizer steps, one rate each",
          2));
  s.add(choice(
      "tuner.lr_find_mode",
      "exponential",
      {"exponential", "linear"},
      "lr_find: how the rate rises"));
  s.add(
      opt("tuner.lr_find_early_stop_threshold",
          T::kFloat,
          "4",
          "lr_find: stop once the loss passes this many times its best; 0: "
          "never",
          0));
  return s;
}

// "6GiB", "500MB", "1e9" or "" (0: none) as bytes.
int64_t parse_bytes(const Config& c, const std::string& key) {
  const std::string text = c.get_string(key);
  if (text.empty()) {
    return 0;
  }
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  std::string unit(end);
  unit.erase(0, unit.find_first_not_of(' '));
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1},
      {"B", 1},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"TB", 1e12},
      {"KiB", 1024.0},
      {"MiB", 1024.0 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
      {"TiB", 1024.0 * 1024 * 1024 * 1024}};
  for (const auto& [name, scale] : kUnits) {
    if (unit == name && end != text.c_str() && std::isfinite(number) &&
        number > 0) {
      return static_cast<int64_t>(number * scale);
    }
  }
  throw ConfigError(
      key +
      ": expected a size such as 6GiB, 500MB or a number of bytes, got '" +
      text + "'");
}

} // namespace

const ConfigSchema& fit_schema() {
  static const ConfigSchema schema = [] {
    detail::close_registry();
    ConfigSchema s = make_schema();
    add_registered_options(s, registered_models(), "model");
    add_registered_options(s, registered_datasets(), "dataset");
    add_pruning_options(s);
    add_quantization_options(s);
    return s;
  }();
  return schema;
}

FitConfig to_fit_config(const Config& c) {
  FitConfig f;
  f.config = std::make_shared<const Config>(c);
  f.seed = static_cast<uint64_t>(c.get_int("trainer.seed"));
  f.trainer.max_epochs(c.get_int("trainer.max_epochs"))
      .max_steps(c.get_int("trainer.max_steps"))
      .limit_train_batches(c.get_float("trainer.limit_train_batches"))
      .limit_val_batches(c.get_float("trainer.limit_val_batches"))
      .check_val_every_n_epoch(c.get_int("trainer.check_val_every_n_epoch"))
      .accumulate_grad_batches(c.get_int("trainer.accumulate_grad_batches"))
      .precision(c.get_string("trainer.precision"))
      .gradient_clip_val(c.get_float("trainer.gradient_clip_val"))
      .gradient_clip_algorithm(c.get_string("trainer.gradient_clip_algorithm"))
      .max_time(c.get_float("trainer.max_time"))
      .fast_dev_run(c.get_int("trainer.fast_dev_run"))
      .num_sanity_val_steps(c.get_int("trainer.num_sanity_val_steps"))
      .deterministic(c.get_bool("trainer.deterministic"))
      .benchmark(c.get_bool("trainer.benchmark"))
      .benchmark_limit(c.get_int("trainer.benchmark_limit"))
      .sdpa_backend(c.get_string("trainer.sdpa_backend"))
      .detect_anomaly(c.get_bool("trainer.detect_anomaly"))
      .default_root_dir(c.get_string("trainer.default_root_dir"))
      .name(c.get_string("trainer.name"))
      .num_threads(c.get_int("trainer.num_threads"))
      .blas_threads(c.get_int("trainer.blas_threads"))
      .retain_host_memory(c.get_bool("trainer.retain_host_memory"))
      .enable_checkpointing(c.get_bool("trainer.enable_checkpointing"))
      .handle_signals(c.get_bool("trainer.handle_signals"))
      .enable_progress_bar(c.get_bool("trainer.enable_progress_bar"))
      .log_every_n_steps(c.get_int("trainer.log_every_n_steps"))
      .flush_logs_every_n_steps(c.get_int("trainer.flush_logs_every_n_steps"))
      .min_epochs(c.get_int("trainer.min_epochs"))
      .limit_test_batches(c.get_float("trainer.limit_test_batches"))
      .limit_predict_batches(c.get_float("trainer.limit_predict_batches"))
      .val_check_interval(c.get_float("trainer.val_check_interval"))
      .overfit_batches(c.get_float("trainer.overfit_batches"))
      .inference_mode(c.get_bool("trainer.inference_mode"))
      .accelerator(c.get_string("trainer.accelerator"))
      .devices(c.get_string("trainer.devices"))
      .channels_last(c.get_bool("trainer.channels_last"))
      .cuda_graphs(c.get_bool("trainer.cuda_graphs"))
      .seed(c.get_int("trainer.seed"))
      .zero_grad_set_to_none(c.get_bool("trainer.zero_grad_set_to_none"))
      .profiler(c.get_string("trainer.profiler"))
      .profiler_steps(c.get_int("trainer.profiler_steps"))
      .profiler_skip_steps(c.get_int("trainer.profiler_skip_steps"))
      .peak_tflops(c.get_float("trainer.peak_tflops"));
  f.strategy = c.get_string("trainer.strategy");
  f.num_nodes = c.get_int("trainer.num_nodes");
  f.group.backend(c.get_string("trainer.process_group_backend"))
      .timeout(c.get_float("trainer.dist_timeout"));
  f.ddp.bucket_cap_mb(c.get_float("ddp.bucket_cap_mb"))
      .find_unused_parameters(c.get_bool("ddp.find_unused_parameters"))
      .gradient_as_bucket_view(c.get_bool("ddp.gradient_as_bucket_view"))
      .static_graph(c.get_bool("ddp.static_graph"))
      .broadcast_buffers(c.get_bool("ddp.broadcast_buffers"))
      .sync_batchnorm(c.get_bool("trainer.sync_batchnorm"));
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.trainer.name().find('/') == std::string::npos &&
          f.trainer.name() != "." && f.trainer.name() != "..",
      "trainer.name must be a folder name without '/', got '",
      f.trainer.name(),
      "'");
  // A run of max_steps=0 would be a no-op; -1 or positive only.
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.trainer.max_epochs() != 0,
      "trainer.max_epochs must be positive or -1, got 0");
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.trainer.max_steps() != 0,
      "trainer.max_steps must be positive or -1, got 0");
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.trainer.limit_train_batches() != 0,
      "trainer.limit_train_batches must be positive or -1, got 0");

  f.model_name = c.get_string("model.name");
  f.mlp_hidden = c.get_int_list("model.mlp_hidden");
  f.stem = c.get_string("model.stem");
  f.zero_init_residual = c.get_bool("model.zero_init_residual");
  f.activation_checkpointing = c.get_bool("model.activation_checkpointing");
  f.gpt.n_layer(c.get_int("model.n_layer"))
      .n_head(c.get_int("model.n_head"))
      .n_embd(c.get_int("model.n_embd"))
      .bias(c.get_bool("model.bias"))
      .activation_checkpointing(c.get_bool("model.activation_checkpointing"))
      .loss_chunk_size(c.get_int("model.loss_chunk_size"))
      .fused_layer_norm(c.get_bool("model.fused_layer_norm"))
      .fused_cross_entropy(c.get_bool("model.fused_cross_entropy"))
      .fused_bias_gradient(c.get_bool("model.fused_bias_gradient"))
      .dropout(c.get_float("model.dropout"))
      .block_size(c.get_int("data.block_size"));
  f.data.dataset = c.get_string("data.dataset");
  if (f.data.dataset == "csv" && !c.is_set("model.name")) {
    f.model_name = "mlp"; // a table's rows are vectors
  }
  f.task = c.get_string("model.task");
  f.init.scheme(c.get_string("model.init"))
      .gain(c.get_float("model.init_gain"))
      .mode(c.get_string("model.init_mode"))
      .nonlinearity(c.get_string("model.init_nonlinearity"))
      .std(c.get_float("model.init_std"));
  f.init_from = read_init_from(c);
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.task == "classification" || f.data.dataset == "csv",
      "model.task=regression needs data.dataset=csv (a table with a "
      "number to predict), got data.dataset=",
      f.data.dataset);
  if (f.data.dataset == "csv") {
    HOTLOOP_CHECK_AS(
        ConfigError,
        f.model_name == "mlp" || find_model(f.model_name) != nullptr,
        "model.name=",
        f.model_name,
        " does not fit data.dataset=csv (a table's rows train mlp, or a "
        "registered model)");
    HOTLOOP_CHECK_AS(
        ConfigError,
        !c.get_string("data.path").empty() ||
            !c.get_string("data.predict_path").empty(),
        "data.dataset=csv needs data.path (a CSV file with a header row)");
  }
  f.data.label_column = c.get_string("data.label_column");
  f.data.feature_columns.clear();
  {
    const std::string columns = c.get_string("data.feature_columns");
    size_t start = 0;
    while (start < columns.size()) {
      const size_t comma = std::min(columns.find(',', start), columns.size());
      std::string name = columns.substr(start, comma - start);
      const size_t first = name.find_first_not_of(' ');
      name = first == std::string::npos
                 ? ""
                 : name.substr(first, name.find_last_not_of(' ') - first + 1);
      HOTLOOP_CHECK_AS(
          ConfigError,
          !name.empty(),
          "data.feature_columns: an empty name in '",
          columns,
          "' (expected header names separated by commas)");
      f.data.feature_columns.push_back(name);
      start = comma + 1;
    }
  }
  f.data.image_shape = c.get_int_list("data.image_shape");
  f.data.synthetic_size = c.get_int("data.synthetic_size");
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.data.image_shape.size() == 3 && std::all_of(
                                            f.data.image_shape.begin(),
                                            f.data.image_shape.end(),
                                            [](int64_t d) { return d > 0; }),
      "data.image_shape must be [channels, height, width], all positive");
  f.data.path = c.get_string("data.path");
  f.data.token_bytes = c.get_int("data.token_bytes");
  f.data.block_size = c.get_int("data.block_size");
  f.data.val_fraction = c.get_float("data.val_fraction");
  f.data.stride = c.get_int("data.stride");
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.data.token_bytes == 1 || f.data.token_bytes == 2 ||
          f.data.token_bytes == 4,
      "data.token_bytes must be 1, 2 or 4, got ",
      f.data.token_bytes);
  int64_t vocab = c.get_int("model.vocab_size");
  if (vocab == 0 && f.data.token_bytes == 1) {
    vocab = 256;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      (f.model_name == "gpt") == (f.data.dataset == "text"),
      "model.name=",
      f.model_name,
      " does not fit data.dataset=",
      f.data.dataset,
      " (gpt trains on text; the others on images)");
  if (f.data.dataset == "text") {
    HOTLOOP_CHECK_AS(
        ConfigError,
        !f.data.path.empty(),
        "data.dataset=text needs data.path (a token file or any text file)");
    HOTLOOP_CHECK_AS(
        ConfigError,
        vocab > 0,
        "model.vocab_size must be set for data.token_bytes=",
        f.data.token_bytes);
  }
  f.gpt.vocab_size(vocab > 0 ? vocab : 256);
  f.model.channels = c.get_int_list("model.channels");
  HOTLOOP_CHECK_AS(
      ConfigError,
      !f.model.channels.empty(),
      "model.channels must name at least one conv block, got []");
  f.model.hidden = c.get_int("model.hidden");
  f.model.dropout = c.get_float("model.dropout");
  f.model.num_classes = c.get_int("model.num_classes");
  f.model.conv_bias = c.get_bool("model.conv_bias");
  f.model.sync_batchnorm = f.ddp.sync_batchnorm();
  f.top_k = c.get_int("model.top_k");
  f.label_smoothing = c.get_float("model.label_smoothing");
  f.class_weights = c.get_float_list("model.class_weights");
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.class_weights.empty() ||
          (f.task == "classification" && f.model_name != "gpt"),
      "model.class_weights weighs a classifier's classes; model.name=",
      f.model_name,
      " with model.task=",
      f.task,
      " has none");
  f.mixing.mixup_alpha(c.get_float("model.mixup_alpha"))
      .cutmix_alpha(c.get_float("model.cutmix_alpha"));
  HOTLOOP_CHECK_AS(
      ConfigError,
      !f.mixing.enabled() || !c.get_bool("trainer.cuda_graphs"),
      f.mixing.cuda_graph_obstacle(),
      ": turn trainer.cuda_graphs off");

  // A regression logs no accuracy: its checkpoints keep the lowest
  // val_loss unless told otherwise.
  const bool regression_defaults = f.task == "regression" &&
                                   !c.is_set("model_checkpoint.monitor") &&
                                   !c.is_set("model_checkpoint.mode");
  f.checkpoint.dirpath(c.get_string("model_checkpoint.dirpath"))
      .filename(c.get_string("model_checkpoint.filename"))
      .monitor(
          regression_defaults ? std::string("val_loss")
                              : c.get_string("model_checkpoint.monitor"))
      .mode(
          regression_defaults ? std::string("min")
                              : c.get_string("model_checkpoint.mode"))
      .save_top_k(c.get_int("model_checkpoint.save_top_k"))
      .save_last(c.get_bool("model_checkpoint.save_last"))
      .every_n_epochs(c.get_int("model_checkpoint.every_n_epochs"))
      .every_n_train_steps(c.get_int("model_checkpoint.every_n_train_steps"))
      .auto_insert_metric_name(
          c.get_bool("model_checkpoint.auto_insert_metric_name"))
      .verbose(c.get_bool("model_checkpoint.verbose"));
  // Checked even when off: a typo should not wait until it is switched on.
  const auto stopping_threshold =
      optional_number(c, "early_stopping.stopping_threshold");
  const auto divergence_threshold =
      optional_number(c, "early_stopping.divergence_threshold");
  // Fail now rather than after the first epoch's training.
  for (const char* key :
       {"model_checkpoint.monitor", "early_stopping.monitor"}) {
    const std::string monitor = std::string(key) == "model_checkpoint.monitor"
                                    ? f.checkpoint.monitor()
                                    : c.get_string(key);
    const bool used = std::string(key) == "model_checkpoint.monitor"
                          ? f.trainer.enable_checkpointing()
                          : c.get_bool("early_stopping.enabled");
    HOTLOOP_CHECK_AS(
        ConfigError,
        !used || monitor.rfind("val_", 0) != 0 ||
            f.trainer.limit_val_batches() != 0,
        key,
        "=",
        monitor,
        " needs validation, but trainer.limit_val_batches=0: set ",
        key,
        "=\"\" or a training metric");
  }
  if (c.get_bool("early_stopping.enabled")) {
    f.early_stopping.emplace(c.get_string("early_stopping.monitor"));
    f.early_stopping->mode(c.get_string("early_stopping.mode"))
        .patience(c.get_int("early_stopping.patience"))
        .min_delta(c.get_float("early_stopping.min_delta"))
        .strict(c.get_bool("early_stopping.strict"))
        .check_finite(c.get_bool("early_stopping.check_finite"))
        .stopping_threshold(stopping_threshold)
        .divergence_threshold(divergence_threshold);
  }
  f.logger = c.get_bool("trainer.logger");
  f.histogram_every_n_epochs = c.get_int("trainer.histogram_every_n_epochs");
  f.log_images = c.get_bool("trainer.log_images");
  f.trainer.logger(f.logger)
      .new_folder_on_resume(c.get_bool("trainer.new_folder_on_resume"))
      .on_nonfinite_loss(c.get_string("trainer.on_nonfinite_loss"));
  if (c.get_bool("weight_averaging.enabled")) {
    f.weight_averaging.emplace();
    f.weight_averaging
        ->average(train::WeightAverageOptions()
                      .average(c.get_string("weight_averaging.average"))
                      .decay(c.get_float("weight_averaging.decay"))
                      .use_buffers(c.get_bool("weight_averaging.use_buffers")))
        .update_every_n_steps(
            c.get_int("weight_averaging.update_every_n_steps"))
        .update_starting_at_step(
            c.get_int("weight_averaging.update_starting_at_step"))
        .update_starting_at_epoch(
            c.get_int("weight_averaging.update_starting_at_epoch"));
    // The option checks of the callback, now rather than at the fit.
    train::WeightAveraging check(*f.weight_averaging);
  }
  f.lr_monitor = c.get_bool("lr_monitor.enabled");
  f.lr_monitor_interval = c.get_string("lr_monitor.logging_interval");
  f.lr_monitor_momentum = c.get_bool("lr_monitor.log_momentum");

  f.data.root = c.get_string("data.root");
  f.data.batch_size = c.get_int("data.batch_size");
  f.data.val_batch_size = c.get_int("data.val_batch_size");
  f.data.num_workers = c.get_int("data.num_workers");
  f.data.prefetch_factor = c.get_int("data.prefetch_factor");
  f.data.persistent_workers = c.get_bool("data.persistent_workers");
  f.data.pin_memory = c.get_bool("data.pin_memory");
  f.data.shuffle = c.get_bool("data.shuffle");
  f.data.drop_last = c.get_bool("data.drop_last");
  f.data.timeout = c.get_float("data.timeout");
  f.data.transform.crop_padding = c.get_int("data.crop_padding");
  f.data.transform.horizontal_flip = c.get_bool("data.horizontal_flip");
  f.data.transform.random_erasing = c.get_float("data.random_erasing");
  f.data.transform.mean = c.get_float_list("data.mean");
  f.data.transform.std = c.get_float_list("data.std");
  f.data.val_root = c.get_string("data.val_root");
  f.data.predict_root = c.get_string("data.predict_root");
  f.data.predict_path = c.get_string("data.predict_path");
  f.data.image_size = c.get_int_list("data.image_size");
  HOTLOOP_CHECK_AS(
      ConfigError,
      (f.data.image_size.size() == 1 || f.data.image_size.size() == 2) &&
          std::all_of(
              f.data.image_size.begin(),
              f.data.image_size.end(),
              [](int64_t d) { return d > 0; }),
      "data.image_size must be [height, width] or [side], positive, got ",
      at::IntArrayRef(f.data.image_size));
  if (f.data.image_size.size() == 1) {
    f.data.image_size.push_back(f.data.image_size.front());
  }
  f.data.channels = c.get_int("data.channels");
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.data.channels == 1 || f.data.channels == 3,
      "data.channels must be 1 (grayscale) or 3 (RGB), got ",
      f.data.channels);
  f.data.train_crop = c.get_string("data.train_crop");
  f.data.val_crop = c.get_string("data.val_crop");
  f.data.crop_scale = c.get_float_list("data.crop_scale");
  f.data.crop_ratio = c.get_float_list("data.crop_ratio");
  f.data.resize_size = c.get_int("data.resize_size");
  f.data.jpeg_draft = c.get_bool("data.jpeg_draft");
  f.data.on_bad_sample = c.get_string("data.on_bad_sample");
  f.data.idx_prefix = c.get_string("data.idx_prefix");
  f.data.stats_from_data = f.data.dataset == "idx" && !c.is_set("data.mean") &&
                           !c.is_set("data.std");
  if (f.data.dataset == "image_folder") {
    HOTLOOP_CHECK_AS(
        ConfigError,
        c.is_set("data.root"),
        "data.dataset=image_folder needs data.root: a folder with a "
        "subfolder of images per class");
    // torchvision's recipe: no padded crop after the resized crop, and
    // ImageNet's statistics unless the user gives the data's own.
    if (!c.is_set("data.crop_padding")) {
      f.data.transform.crop_padding = 0;
    }
    if (!c.is_set("data.mean")) {
      f.data.transform.mean = f.data.channels == 3
                                  ? std::vector<double>{0.485, 0.456, 0.406}
                                  : std::vector<double>{0.449};
    }
    if (!c.is_set("data.std")) {
      f.data.transform.std = f.data.channels == 3
                                 ? std::vector<double>{0.229, 0.224, 0.225}
                                 : std::vector<double>{0.226};
    }
  }

  auto& o = f.optimizer;
  o.name = c.get_string("optimizer.name");
  o.lr = c.get_float("optimizer.lr");
  o.weight_decay = c.get_float("optimizer.weight_decay");
  o.momentum = c.get_float("optimizer.momentum");
  o.nesterov = c.get_bool("optimizer.nesterov");
  o.beta1 = c.get_float("optimizer.beta1");
  o.beta2 = c.get_float("optimizer.beta2");
  o.eps = c.get_float("optimizer.eps");
  o.alpha = c.get_float("optimizer.alpha");
  o.centered = c.get_bool("optimizer.centered");
  // PyTorch's RMSprop has no momentum and its Adagrad an eps of 1e-10 by
  // default; the keys' defaults are SGD's and Adam's.
  if (o.name == "rmsprop" && !c.is_set("optimizer.momentum")) {
    o.momentum = 0.0;
  }
  if (o.name == "adagrad" && !c.is_set("optimizer.eps")) {
    o.eps = 1e-10;
  }
  o.no_decay_norm_and_bias = c.get_bool("optimizer.no_decay_norm_and_bias");
  o.foreach = c.get_string("optimizer.foreach");
  o.fused = c.get_string("optimizer.fused");

  auto& s = f.scheduler;
  s.name = c.get_string("lr_scheduler.name");
  s.interval = c.get_string("lr_scheduler.interval");
  s.frequency = c.get_int("lr_scheduler.frequency");
  s.warmup_steps = c.get_int("lr_scheduler.warmup_steps");
  s.warmup_start_factor = c.get_float("lr_scheduler.warmup_start_factor");
  s.step_size = c.get_int("lr_scheduler.step_size");
  s.gamma = c.get_float("lr_scheduler.gamma");
  s.milestones = c.get_int_list("lr_scheduler.milestones");
  s.t_max = c.get_int("lr_scheduler.t_max");
  s.eta_min = c.get_float("lr_scheduler.eta_min");
  s.t_0 = c.get_int("lr_scheduler.t_0");
  s.t_mult = c.get_int("lr_scheduler.t_mult");
  s.max_lr = c.get_float("lr_scheduler.max_lr");
  s.pct_start = c.get_float("lr_scheduler.pct_start");
  s.anneal_strategy = c.get_string("lr_scheduler.anneal_strategy");
  s.div_factor = c.get_float("lr_scheduler.div_factor");
  s.final_div_factor = c.get_float("lr_scheduler.final_div_factor");
  s.three_phase = c.get_bool("lr_scheduler.three_phase");
  s.cycle_momentum = c.get_bool("lr_scheduler.cycle_momentum");
  s.base_momentum = c.get_float("lr_scheduler.base_momentum");
  s.max_momentum = c.get_float("lr_scheduler.max_momentum");
  s.total_iters = c.get_int("lr_scheduler.total_iters");
  s.power = c.get_float("lr_scheduler.power");
  s.mode = c.get_string("lr_scheduler.mode");
  s.factor = c.get_float("lr_scheduler.factor");
  s.patience = c.get_int("lr_scheduler.patience");
  s.threshold = c.get_float("lr_scheduler.threshold");
  s.threshold_mode = c.get_string("lr_scheduler.threshold_mode");
  s.cooldown = c.get_int("lr_scheduler.cooldown");
  s.min_lr = c.get_float("lr_scheduler.min_lr");
  s.monitor = c.get_string("lr_scheduler.monitor");
  s.start_factor = c.get_float("lr_scheduler.start_factor");
  s.end_factor = c.get_float("lr_scheduler.end_factor");
  s.base_lr = c.get_float("lr_scheduler.base_lr");
  s.step_size_up = c.get_int("lr_scheduler.step_size_up");
  s.step_size_down = c.get_int("lr_scheduler.step_size_down");
  s.swa_lr = c.get_float("lr_scheduler.swa_lr");
  s.anneal_epochs = c.get_int("lr_scheduler.anneal_epochs");
  s.swa_start = c.get_int("lr_scheduler.swa_start");
  // Keys schedules share take each schedule's PyTorch default when a
  // config leaves them out.
  const auto unless_given = [&](const char* key, auto& field, auto value) {
    if (!c.is_set(std::string("lr_scheduler.") + key)) {
      field = value;
    }
  };
  if (s.name == "constant") {
    unless_given("factor", s.factor, 1.0 / 3);
    unless_given("total_iters", s.total_iters, int64_t{5});
  }
  if (s.name == "cyclic") {
    s.cyclic_mode = s.mode;
    unless_given("mode", s.cyclic_mode, std::string("triangular"));
    unless_given("gamma", s.gamma, 1.0);
    unless_given("base_momentum", s.base_momentum, 0.8);
    unless_given("max_momentum", s.max_momentum, 0.9);
  }
  TunerConfig& t = f.tuner;
  t.batch_size = c.get_string("tuner.batch_size");
  t.batch_size_finder.mode(t.batch_size.empty() ? "power" : t.batch_size)
      .steps_per_trial(c.get_int("tuner.steps_per_trial"))
      .init_val(c.get_int("tuner.init_val"))
      .max_trials(c.get_int("tuner.max_trials"))
      .max_memory(parse_bytes(c, "tuner.max_memory"));
  t.scale_lr = c.get_string("tuner.scale_lr");
  t.lr_find = c.get_bool("tuner.lr_find");
  t.lr_finder.min_lr(c.get_float("tuner.lr_find_min_lr"))
      .max_lr(c.get_float("tuner.lr_find_max_lr"))
      .num_training(c.get_int("tuner.lr_find_num_training"))
      .mode(c.get_string("tuner.lr_find_mode"))
      .early_stop_threshold(c.get_float("tuner.lr_find_early_stop_threshold"));
  if (t.lr_find) {
    train::LrFinder check(t.lr_finder); // min_lr < max_lr, named
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      f.strategy != "ddp" || (t.batch_size.empty() && !t.lr_find),
      "tuner.batch_size and tuner.lr_find search in one process: run them "
      "without trainer.strategy=ddp, then set data.batch_size and "
      "optimizer.lr");
  if (f.trainer.name().empty()) {
    f.trainer.name(run_name(f));
  }
  f.pruning = pruning_options(c);
  f.quantization = quantization_options(c);
  // Both change the model's tensors during the fit (masks, observers and
  // fake quantizers), which one average of the weights cannot follow.
  HOTLOOP_CHECK_AS(
      ConfigError,
      !f.weight_averaging || (!f.pruning && !f.quantization),
      "weight_averaging.enabled averages one set of weights, which ",
      f.pruning ? "pruning.enabled" : "quantization.qat",
      " changes during the fit: turn one of them off");
  return f;
}

std::string float_list_text(const std::vector<double>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    char number[32];
    std::snprintf(number, sizeof(number), "%.17g", values[i]);
    text += (i == 0 ? "" : ", ") + std::string(number);
  }
  return text + "]";
}

Config resolve_config(const Config& config) {
  const FitConfig f = to_fit_config(config);
  Config resolved = config;
  const char* const why = "resolved";
  resolved.set("model.name", f.model_name, why);
  resolved.set("trainer.name", f.trainer.name(), why);
  resolved.set("model_checkpoint.monitor", f.checkpoint.monitor(), why);
  resolved.set("model_checkpoint.mode", f.checkpoint.mode(), why);
  if (f.data.dataset == "image_folder") {
    const std::vector<int64_t>& size = f.data.image_size;
    resolved.set(
        "data.image_size",
        "[" + std::to_string(size[0]) + ", " + std::to_string(size[1]) + "]",
        why);
    resolved.set(
        "data.crop_padding",
        std::to_string(f.data.transform.crop_padding),
        why);
    resolved.set("data.mean", float_list_text(f.data.transform.mean), why);
    resolved.set("data.std", float_list_text(f.data.transform.std), why);
  }
  if (f.data.dataset == "text") {
    resolved.set("model.vocab_size", std::to_string(f.gpt.vocab_size()), why);
  }
  return resolved;
}

train::ClassifierOptions classifier_options(
    const FitConfig& config, int64_t classes) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      classes <= 0 || config.class_weights.empty() ||
          static_cast<int64_t>(config.class_weights.size()) == classes,
      "model.class_weights has ",
      config.class_weights.size(),
      " weights for ",
      classes,
      " classes: give one per class, in the order of the class indices (an "
      "image folder's: its class folders sorted by name)");
  train::ClassifierOptions options;
  options.top_k = config.top_k;
  options.label_smoothing = config.label_smoothing;
  options.class_weights = config.class_weights;
  options.mixing = config.mixing;
  return options;
}

} // namespace hotloop::cli
