// What pruning, shrinking and int8 quantization do to the Fashion-MNIST CNN:
// accuracy, parameters, file size and inference samples/s, side by side in
// one run with PyTorch's own int8 of the same weights.
//
//   compress_bench --ckpt PATH [--root DIR] [--channels 16,32] [--hidden 128]
//                  [--repeats 5] [--batch 1000] [--calibration 32]
//                  [--finetune-epochs 2] [--qat-epochs 2] [--qat-lr 1e-5]
//                  [--qat-freeze-bn-epoch LAST] [--qat-disable-observer-epoch LAST]
//                  [--qat-seeds 0,1,2]
//                  [--skip-python] [--python PATH]
//
// PATH is a checkpoint of `hotloop fit --config configs/fashion_mnist.yaml`
// (bench/compress trains one). Rows:
// - fp32, as trained;
// - pruned to 25/50/75% of each conv block's channels and of the head's
//   hidden units (prune_channels, prune_units), trained --finetune-epochs
//   more epochs with the masks, then run masked (the pruned model itself)
//   and shrunk (compress::shrink), which give the same outputs;
// - static int8 (quantize_static: calibrated on --calibration training
//   batches, MinMax activations, per-channel weights) on each quantized
//   engine this LibTorch has;
// - quantization-aware training (prepare_qat: torch.ao's default QAT
//   qconfig for the engine auto picks) of the same weights for
//   --qat-epochs epochs (AdamW at --qat-lr, one-cycle, BatchNorm frozen
//   from --qat-freeze-bn-epoch and the observers stopped from
//   --qat-disable-observer-epoch (-1: never), both by default for the last
//   epoch, as in PyTorch's QAT tutorial), converted to int8 (convert_qat):
//   one row per seed of --qat-seeds (the training images' order and
//   augmentation), the target judged on their median;
// - PyTorch's eager static int8 of the same weights with the same qconfig,
//   calibration batches and engine, torch.ao's QAT of them with the same
//   recipe (python_quantize.py), and PyTorch's fp32.
// Every row times one pass over the 10000 test images in batches of
// --batch, --repeats times, interleaved; the table gives the median
// samples/s with the min-max and the ratio to fp32. The fp32, masked and
// shrunk rows also time 20 training steps on batches of 256 (forward,
// cross-entropy, backward, SGD step) per repeat: training samples/s.

#include "bench_util.h"
#include "hotloop/compress/prune.h"
#include "hotloop/compress/qat.h"
#include "hotloop/compress/quantization_aware_training.h"
#include "hotloop/compress/quantize.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/compress/shrink.h"
#include "hotloop/core/blas.h"
#include "hotloop/core/memory.h"
#include "hotloop/core/threads.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/fashion_mnist.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/optim/sgd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace hotloop;
using Clock = std::chrono::steady_clock;
using Forward = std::function<at::Tensor(const at::Tensor&)>;

struct Options {
  std::string ckpt;
  std::string root = "/usr/share/datasets/fashion-mnist";
  std::vector<int64_t> channels = {16, 32};
  int64_t hidden = 128;
  int64_t repeats = 5;
  int64_t batch = 1000;
  int64_t calibration = 32;
  int64_t finetune_epochs = 2;
  int64_t qat_epochs = 2;
  double qat_lr = 1e-5;
  int64_t qat_freeze_bn_epoch = -2; // -2: the last epoch
  int64_t qat_disable_observer_epoch = -2; // -2: the last epoch; -1: never
  std::vector<int64_t> qat_seeds = {0, 1, 2};
  bool python = true;
  std::string python_path = HOTLOOP_BENCH_PYTHON;
};

struct Row {
  std::string name;
  double accuracy = 0;
  int64_t parameters = 0;
  int64_t file_bytes = 0;
  std::vector<double> rates;
  Forward forward;
  // Training samples/s (fp32, masked and shrunk rows): one timed pass of
  // training steps per repeat.
  std::function<double()> train_seconds;
  std::vector<double> train_rates;
};

// The engine a row's name gives in parentheses: "static int8 (onednn)".
std::string engine_in(const std::string& name) {
  const size_t open = name.find('(');
  const size_t close = name.find(')', open);
  return open == std::string::npos || close == std::string::npos
             ? std::string()
             : name.substr(open + 1, close - open - 1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// "16,32" -> {16, 32}.
std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    values.push_back(std::stoll(item));
  }
  return values;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(
      stderr,
      "compress_bench: %s\nusage: compress_bench --ckpt PATH [--root DIR] "
      "[--channels 16,32] [--hidden 128] [--repeats 5] [--batch 1000] "
      "[--calibration 32] [--finetune-epochs 2] [--qat-epochs 2] [--qat-lr "
      "1e-5] [--qat-freeze-bn-epoch LAST] [--qat-disable-observer-epoch "
      "LAST] [--qat-seeds 0,1,2] [--skip-python] [--python "
      "PATH]\n",
      why.c_str());
  std::exit(2);
}

int64_t count_parameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) {
    n += p.numel();
  }
  return n;
}

// Non-zero entries of the forward's weights (a pruned model's masked ones).
int64_t nonzero_parameters(models::FashionCnnImpl& m) {
  int64_t n = 0;
  for (const std::string& path : compress::parameter_names(m)) {
    const compress::ParameterRef ref = compress::find_parameter(m, path);
    const at::Tensor value =
        compress::is_pruned(*ref.module, ref.name)
            ? compress::masked_tensor(*ref.module, ref.name)
            : ref.module->named_parameters(false)[ref.name];
    n += (value != 0).sum().item<int64_t>();
  }
  return n;
}

double seconds(const Forward& forward, const std::vector<at::Tensor>& inputs) {
  const c10::InferenceMode inference;
  const auto start = Clock::now();
  for (const at::Tensor& x : inputs) {
    forward(x);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double accuracy(
    const Forward& forward,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& targets) {
  const c10::InferenceMode inference;
  int64_t correct = 0, total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    correct +=
        (forward(inputs[i]).argmax(1) == targets[i]).sum().item<int64_t>();
    total += targets[i].size(0);
  }
  return static_cast<double>(correct) / total;
}

// Seconds for training steps over `batches`: forward, cross-entropy,
// backward and an SGD step (learning rate 0, so that the model is left as
// it is), a pruned model recomputing its masked weights before each
// forward as the Trainer does.
double train_seconds(
    torch::nn::Module& model,
    const Forward& forward,
    const std::vector<std::pair<at::Tensor, at::Tensor>>& batches) {
  // BatchNorm's statistics move in training mode: put back afterwards.
  std::vector<at::Tensor> buffers;
  for (const auto& b : model.buffers()) {
    buffers.push_back(b.clone());
  }
  model.train();
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.0));
  const auto start = Clock::now();
  for (const auto& [x, y] : batches) {
    compress::recompute_pruned(model);
    sgd.zero_grad();
    at::cross_entropy_loss(forward(x), y).backward();
    sgd.step();
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  model.eval();
  const at::NoGradGuard no_grad;
  size_t i = 0;
  for (auto& b : model.buffers()) {
    b.copy_(buffers[i++]);
  }
  compress::recompute_pruned(model);
  return s;
}

// Raw float32 tensors with a text index, for python_quantize.py.
void write_tensors(
    const std::string& prefix,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::ofstream index(prefix + ".txt");
  std::ofstream data(prefix + ".bin", std::ios::binary);
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.detach().to(at::kFloat).contiguous();
    index << name;
    for (const int64_t d : c.sizes()) {
      index << " " << d;
    }
    index << "\n";
    data.write(
        reinterpret_cast<const char*>(c.data_ptr<float>()),
        static_cast<std::streamsize>(c.numel() * sizeof(float)));
  }
}

} // namespace

int main(int argc, char** argv) {
  // The kernels the hotloop program runs (core/blas.h).
  hotloop::use_fastest_blas_kernels(argv);
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--skip-python") {
      o.python = false;
      continue;
    }
    if (i + 1 >= argc) {
      usage("missing value for " + arg);
    }
    const std::string value = argv[++i];
    if (arg == "--ckpt") {
      o.ckpt = value;
    } else if (arg == "--root") {
      o.root = value;
    } else if (arg == "--channels") {
      o.channels = parse_list(value);
    } else if (arg == "--hidden") {
      o.hidden = std::stoll(value);
    } else if (arg == "--repeats") {
      o.repeats = std::stoll(value);
    } else if (arg == "--batch") {
      o.batch = std::stoll(value);
    } else if (arg == "--calibration") {
      o.calibration = std::stoll(value);
    } else if (arg == "--finetune-epochs") {
      o.finetune_epochs = std::stoll(value);
    } else if (arg == "--qat-epochs") {
      o.qat_epochs = std::stoll(value);
    } else if (arg == "--qat-lr") {
      o.qat_lr = std::stod(value);
    } else if (arg == "--qat-freeze-bn-epoch") {
      o.qat_freeze_bn_epoch = std::stoll(value);
    } else if (arg == "--qat-disable-observer-epoch") {
      o.qat_disable_observer_epoch = std::stoll(value);
    } else if (arg == "--qat-seeds") {
      o.qat_seeds = parse_list(value);
    } else if (arg == "--python") {
      o.python_path = value;
    } else {
      usage("unknown flag " + arg);
    }
  }
  if (o.ckpt.empty()) {
    usage("--ckpt is required");
  }
  configure_intra_op_threads(0, 0);
  // As the Trainer sets them for every fit and evaluation, before the
  // first row (fine-tuning runs a Trainer, which would otherwise change
  // them half-way).
  set_blas_threads(1);
  retain_freed_host_memory();

  bench::Machine machine = bench::describe_machine();

  // The trained model, as the CLI builds it.
  models::FashionCnnOptions shape;
  shape.channels = o.channels;
  shape.hidden = o.hidden;
  models::FashionCnn network(shape);
  train::ImageClassifier module(
      torch::nn::AnyModule(network), {}, {}, /*top_k=*/1);
  train::load_checkpoint(o.ckpt, module);
  module.eval();

  data::ImageTransformOptions normalize;
  normalize.mean = {0.2860};
  normalize.std = {0.3530};
  std::vector<at::Tensor> inputs, targets, calibration;
  std::vector<std::pair<at::Tensor, at::Tensor>> train_batches;
  {
    data::DataLoader test(
        data::load_mnist_split(o.root, /*train=*/false, normalize),
        data::DataLoaderOptions(o.batch));
    for (const data::Batch& b : test) {
      inputs.push_back(b.input.clone());
      targets.push_back(b.target.clone());
    }
    // Calibration: the first training batches, shuffled as a fit's first
    // epoch, without augmentation.
    data::DataLoader train(
        data::load_mnist_split(o.root, /*train=*/true, normalize),
        data::DataLoaderOptions(256).shuffle(true).seed(0));
    for (const data::Batch& b : train) {
      if (static_cast<int64_t>(calibration.size()) == o.calibration) {
        break;
      }
      calibration.push_back(b.input.clone());
    }
    // Training throughput: 20 batches of 256.
    for (const data::Batch& b : train) {
      if (train_batches.size() == 20) {
        break;
      }
      train_batches.emplace_back(b.input.clone(), b.target.clone());
    }
  }

  const fs::path work = fs::temp_directory_path() /
                        ("compress_bench." + std::to_string(::getpid()));
  fs::create_directories(work);
  std::vector<Row> rows;
  const int64_t fp32_params = count_parameters(*network);
  const auto float_bytes = static_cast<int64_t>(fs::file_size(o.ckpt));
  rows.push_back(
      {"fp32", 0, fp32_params, float_bytes, {}, [&](const at::Tensor& x) {
         return network->forward(x);
       }});
  rows.back().train_seconds = [&] {
    return train_seconds(
        *network,
        [&](const at::Tensor& x) { return network->forward(x); },
        train_batches);
  };

  // Pruned to a fraction of the channels and hidden units, masked and
  // shrunk.
  std::vector<models::FashionCnn> keep_alive;
  std::vector<double> one_shot;
  for (const double fraction : {0.25, 0.5, 0.75}) {
    models::FashionCnn pruned(shape);
    {
      const at::NoGradGuard no_grad;
      auto source = network->named_parameters();
      for (auto& p : pruned->named_parameters()) {
        p.value().copy_(source[p.key()]);
      }
      auto buffers = network->named_buffers();
      for (auto& b : pruned->named_buffers()) {
        b.value().copy_(buffers[b.key()]);
      }
    }
    pruned->eval();
    for (int64_t b = 0; b < static_cast<int64_t>(shape.channels.size()); ++b) {
      compress::prune_channels(
          *pruned, b, compress::PruningAmount::fraction(fraction));
    }
    compress::prune_units(
        *pruned, 0, compress::PruningAmount::fraction(fraction));
    compress::recompute_pruned(*pruned);
    one_shot.push_back(accuracy(
        [&](const at::Tensor& x) { return pruned->forward(x); },
        inputs,
        targets));
    if (o.finetune_epochs > 0) {
      // The masked model trains on (the Trainer recomputes its masked
      // weights before every step), as the main job trains: AdamW, a
      // one-cycle schedule, the augmented training images.
      data::ImageTransformOptions augment = normalize;
      augment.crop_padding = 2;
      augment.horizontal_flip = true;
      data::DataLoader loader(
          data::load_mnist_split(o.root, /*train=*/true, augment),
          data::DataLoaderOptions(256).shuffle(true).seed(0).num_workers(1));
      train::ImageClassifier tuned(torch::nn::AnyModule(pruned), {}, {}, 1);
      std::ostream quiet(nullptr);
      train::Trainer trainer(
          train::TrainerOptions()
              .max_epochs(o.finetune_epochs)
              .default_root_dir("")
              .logger(false)
              .enable_checkpointing(false)
              .enable_progress_bar(false)
              .accelerator("cpu"),
          quiet);
      trainer.fit(tuned, loader);
      pruned->eval();
      compress::recompute_pruned(*pruned);
    }
    models::FashionCnn shrunk = compress::shrink(*pruned);
    shrunk->eval();
    keep_alive.push_back(pruned);
    keep_alive.push_back(shrunk);
    const std::string label =
        std::to_string(static_cast<int>(fraction * 100)) + "%";
    train::ImageClassifier holder(torch::nn::AnyModule(shrunk), {}, {}, 1);
    const std::string path = (work / ("shrunk" + label + ".ckpt")).string();
    train::save_checkpoint(path, holder);
    const std::string tuned =
        o.finetune_epochs > 0
            ? " +" + std::to_string(o.finetune_epochs) + " epochs"
            : "";
    rows.push_back(
        {"pruned " + label + tuned + ", masked",
         0,
         nonzero_parameters(*pruned),
         float_bytes,
         {},
         [pruned](const at::Tensor& x) mutable { return pruned->forward(x); }});
    rows.back().train_seconds = [pruned, &train_batches]() mutable {
      return train_seconds(
          *pruned,
          [pruned](const at::Tensor& x) mutable { return pruned->forward(x); },
          train_batches);
    };
    rows.push_back(
        {"pruned " + label + tuned + ", shrunk",
         0,
         count_parameters(*shrunk),
         static_cast<int64_t>(fs::file_size(path)),
         {},
         [shrunk](const at::Tensor& x) mutable { return shrunk->forward(x); }});
    rows.back().train_seconds = [shrunk, &train_batches]() mutable {
      return train_seconds(
          *shrunk,
          [shrunk](const at::Tensor& x) mutable { return shrunk->forward(x); },
          train_batches);
    };
  }

  // Static int8 on each engine.
  const std::string engine_before = compress::quantized_engine();
  std::vector<compress::QuantizedNet> nets;
  for (const std::string& engine : compress::supported_quantized_engines()) {
    compress::QuantizedNet net = compress::quantize_static(
        *network,
        calibration,
        compress::StaticQuantizationOptions().engine(engine));
    const std::string path = (work / ("int8-" + engine + ".ckpt")).string();
    compress::save_quantized(path, *net);
    nets.push_back(net);
    rows.push_back(
        {"static int8 (" + engine + ")",
         0,
         fp32_params,
         static_cast<int64_t>(fs::file_size(path)),
         {},
         [net, engine](const at::Tensor& x) mutable {
           compress::select_quantized_engine(engine);
           return net->forward(x);
         }});
  }
  compress::select_quantized_engine(engine_before);

  // Quantization-aware training of the same weights, converted to int8,
  // once per seed.
  for (const int64_t seed : o.qat_epochs > 0 ? o.qat_seeds
                                             : std::vector<int64_t>{}) {
    compress::QatNet qat = compress::prepare_qat(*network);
    data::ImageTransformOptions augment = normalize;
    augment.crop_padding = 2;
    augment.horizontal_flip = true;
    data::DataLoader loader(
        data::load_mnist_split(o.root, /*train=*/true, augment),
        data::DataLoaderOptions(256)
            .shuffle(true)
            .seed(static_cast<uint64_t>(seed))
            .num_workers(1));
    optim::OptimizerOptions adamw;
    adamw.lr = o.qat_lr;
    adamw.weight_decay = 1e-4;
    train::ImageClassifier tuned(torch::nn::AnyModule(qat), adamw, {}, 1);
    auto callback = std::make_shared<compress::QuantizationAwareTraining>(
        compress::QuantizationAwareTrainingOptions()
            .freeze_bn_epoch(
                o.qat_freeze_bn_epoch == -2 ? o.qat_epochs - 1
                                            : o.qat_freeze_bn_epoch)
            .disable_observer_epoch(
                o.qat_disable_observer_epoch == -2
                    ? o.qat_epochs - 1
                    : o.qat_disable_observer_epoch));
    std::ostream quiet(nullptr);
    train::Trainer trainer(
        train::TrainerOptions()
            .max_epochs(o.qat_epochs)
            .default_root_dir("")
            .logger(false)
            .enable_checkpointing(false)
            .enable_progress_bar(false)
            .accelerator("cpu"),
        quiet);
    trainer.add_callback(callback);
    trainer.fit(tuned, loader);
    compress::QuantizedNet net = *callback->converted();
    const std::string engine = net->engine();
    const std::string path = (work / "int8-qat.ckpt").string();
    compress::save_quantized(path, *net);
    nets.push_back(net);
    rows.push_back(
        {"QAT int8 (" + engine + ") +" + std::to_string(o.qat_epochs) +
             " epochs, seed " + std::to_string(seed),
         0,
         fp32_params,
         static_cast<int64_t>(fs::file_size(path)),
         {},
         [net, engine](const at::Tensor& x) mutable {
           compress::select_quantized_engine(engine);
           return net->forward(x);
         }});
    compress::select_quantized_engine(engine_before);
  }

  // Accuracy once; then the timed passes, interleaved, after a warm-up.
  for (Row& row : rows) {
    row.accuracy = accuracy(row.forward, inputs, targets);
    seconds(row.forward, {inputs.front()});
  }
  const double samples = 10000;
  double train_samples = 0;
  for (const auto& batch : train_batches) {
    train_samples += static_cast<double>(batch.first.size(0));
  }
  for (Row& row : rows) {
    if (row.train_seconds) {
      row.train_seconds(); // warm-up
    }
  }
  for (int64_t r = 0; r < o.repeats; ++r) {
    for (Row& row : rows) {
      row.rates.push_back(samples / seconds(row.forward, inputs));
      if (row.train_seconds) {
        row.train_rates.push_back(train_samples / row.train_seconds());
      }
    }
  }

  // PyTorch's own fp32 and int8 of the same weights.
  std::string python_out;
  if (o.python) {
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& p : network->named_parameters()) {
      tensors.emplace_back("param " + p.key(), p.value());
    }
    for (const auto& b : network->named_buffers()) {
      tensors.emplace_back("param " + b.key(), b.value());
    }
    for (size_t i = 0; i < calibration.size(); ++i) {
      tensors.emplace_back("calibration " + std::to_string(i), calibration[i]);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      tensors.emplace_back("input " + std::to_string(i), inputs[i]);
      tensors.emplace_back("target " + std::to_string(i), targets[i]);
    }
    write_tensors((work / "tensors").string(), tensors);
    std::ostringstream command;
    command << bench::shell_quote(o.python_path) << " "
            << bench::shell_quote(HOTLOOP_BENCH_PYTHON_QUANTIZE) << " --prefix "
            << bench::shell_quote((work / "tensors").string())
            << " --channels ";
    for (size_t i = 0; i < o.channels.size(); ++i) {
      command << (i > 0 ? "," : "") << o.channels[i];
    }
    command << " --hidden " << o.hidden << " --repeats " << o.repeats
            << " --threads " << at::get_num_threads() << " --out "
            << bench::shell_quote((work / "python.txt").string())
            << " --root " << bench::shell_quote(o.root) << " --qat-epochs "
            << o.qat_epochs << " --qat-lr " << o.qat_lr;
    std::string ignored;
    if (bench::run_command(command.str(), ignored) == 0) {
      std::ifstream in(work / "python.txt");
      std::string line;
      while (std::getline(in, line)) {
        std::istringstream fields(line);
        Row row;
        std::string name;
        std::getline(fields, name, '\t');
        row.name = name;
        fields >> row.accuracy >> row.file_bytes;
        double rate = 0;
        while (fields >> rate) {
          row.rates.push_back(rate);
        }
        row.parameters = fp32_params;
        rows.push_back(row);
      }
    } else {
      python_out = "PyTorch rows skipped (python_quantize.py failed)";
    }
  }
  fs::remove_all(work);
  machine.load_after = bench::load_average();

  bench::print_machine(
      machine,
      {{"workload",
        "the Fashion-MNIST CNN of " + o.ckpt +
            ", 10000 test images in batches of " + std::to_string(o.batch) +
            ", median of " + std::to_string(o.repeats) + " passes (min-max)"}});
  std::printf(
      "\n%-42s %8s %11s %10s %22s %9s %26s\n",
      "model",
      "test acc",
      "parameters",
      "file KB",
      "samples/s (min-max)",
      "vs fp32",
      "train samples/s, vs fp32");
  const double fp32_rate = median(rows.front().rates);
  const double fp32_train = median(rows.front().train_rates);
  const double fp32_acc = rows.front().accuracy;
  double best_int8 = 0, best_int8_acc = 0, half_shrunk = 0;
  // Static int8's accuracy by engine, and QAT's seeds with their engine:
  // QAT is held to static int8 on the same engine.
  std::map<std::string, double> static_acc;
  std::vector<double> qat_accs;
  std::string qat_engine;
  for (const Row& row : rows) {
    const auto [low, high] =
        std::minmax_element(row.rates.begin(), row.rates.end());
    std::string train = "-";
    if (!row.train_rates.empty()) {
      const auto [tlow, thigh] =
          std::minmax_element(row.train_rates.begin(), row.train_rates.end());
      char text[80];
      std::snprintf(
          text,
          sizeof(text),
          "%.0f (%.0f-%.0f) %.2fx",
          median(row.train_rates),
          *tlow,
          *thigh,
          median(row.train_rates) / fp32_train);
      train = text;
    }
    std::printf(
        "%-42s %7.2f%% %11lld %10lld %9.0f (%.0f-%.0f) %8.2fx %26s\n",
        row.name.c_str(),
        100 * row.accuracy,
        static_cast<long long>(row.parameters),
        static_cast<long long>(row.file_bytes / 1024),
        median(row.rates),
        row.rates.empty() ? 0.0 : *low,
        row.rates.empty() ? 0.0 : *high,
        median(row.rates) / fp32_rate,
        train.c_str());
    if (row.name.rfind("static int8", 0) == 0 &&
        median(row.rates) > best_int8) {
      best_int8 = median(row.rates);
      best_int8_acc = row.accuracy;
    }
    if (row.name.rfind("static int8", 0) == 0) {
      static_acc[engine_in(row.name)] = row.accuracy;
    }
    if (row.name.rfind("QAT int8", 0) == 0) {
      qat_accs.push_back(row.accuracy);
      qat_engine = engine_in(row.name);
    }
    if (row.name.rfind("pruned 50%", 0) == 0 &&
        row.name.find("shrunk") != std::string::npos) {
      half_shrunk = median(row.rates);
    }
  }
  std::printf(
      "\npruned rows: 25/50/75%% of each conv block's channels and of the "
      "head's hidden units pruned (prune_channels, prune_units: L1 norm), "
      "then %lld epochs of training with the masks; test accuracy right "
      "after pruning: %.2f%%, %.2f%%, %.2f%%\n",
      static_cast<long long>(o.finetune_epochs),
      100 * one_shot[0],
      100 * one_shot[1],
      100 * one_shot[2]);
  if (!python_out.empty()) {
    std::printf("%s\n", python_out.c_str());
  }
  std::printf(
      "\ntargets: static int8 within 0.5 point of fp32: %s (%+.2f points); "
      "static int8 >= 1.5x fp32 samples/s: %s (%.2fx); half the channels "
      "shrunk >= 1.6x: %s (%.2fx); QAT int8 (the median of its seeds) at "
      "least as accurate as static int8 on its engine (%s): %s (%+.2f "
      "points)\n",
      fp32_acc - best_int8_acc <= 0.005 ? "PASS" : "MISS",
      100 * (best_int8_acc - fp32_acc),
      best_int8 >= 1.5 * fp32_rate ? "PASS" : "MISS",
      best_int8 / fp32_rate,
      half_shrunk >= 1.6 * fp32_rate ? "PASS" : "MISS",
      half_shrunk / fp32_rate,
      qat_engine.empty() ? "-" : qat_engine.c_str(),
      qat_accs.empty() ? "not measured (--qat-epochs 0)"
      : median(qat_accs) >= static_acc[qat_engine] ? "PASS"
                                                   : "MISS",
      qat_accs.empty() ? 0.0
                       : 100 * (median(qat_accs) - static_acc[qat_engine]));
  return 0;
}
