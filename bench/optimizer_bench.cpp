// The optimizer step alone: LibTorch's SGD and AdamW, one parameter at a
// time, against hotloop's multi-tensor ForeachSGD and ForeachAdamW (what
// make_optimizer builds), on the parameters of the models the suites train.
// The same gradients for both; each row times `steps` steps, synchronised
// with the device at the end, and the table gives the median of the
// repeats with their range, interleaving the two so that drift hits both.
//
//   optimizer_bench [--device cpu|cuda] [--steps N] [--repeats R]
//
// The multi-tensor column forces them (set_foreach(true)); make_optimizer's
// optimizers use them only where every parameter is on a CUDA device, as
// PyTorch does. On a CPU they run each tensor in turn (ATen's slow path)
// with every temporary of the group alive at once, which this benchmark
// shows to be slower for large models; on a GPU they launch one kernel per
// operation for a whole group, which is what they are for.

#include "bench_util.h"
#include "hotloop/core/memory.h"
#include "hotloop/core/threads.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/gpt.h"
#include "hotloop/models/resnet.h"
#include "hotloop/optim/foreach.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Params = std::vector<at::Tensor>;

struct Workload {
  std::string name;
  Params params;
};

Params copy_of(const std::vector<at::Tensor>& source, c10::Device device) {
  Params out;
  for (const at::Tensor& p : source) {
    at::Tensor copy = p.detach().to(device).clone().set_requires_grad(true);
    copy.mutable_grad() = at::randn_like(copy);
    out.push_back(copy);
  }
  return out;
}

void synchronize(const Params& params) {
  // Reading one value waits for every kernel queued before it.
  params.back().sum().item<double>();
}

double seconds_for(torch::optim::Optimizer& optimizer, const Params& params,
                   int64_t steps) {
  synchronize(params);
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    optimizer.step();
  }
  synchronize(params);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

using Make = std::function<std::unique_ptr<torch::optim::Optimizer>(Params)>;

struct Row {
  std::string optimizer;
  std::vector<double> per_parameter;
  std::vector<double> foreach;
};

Row compare(const std::string& name, const Make& theirs, const Make& mine,
            const Workload& workload, c10::Device device, int64_t steps,
            int64_t repeats) {
  Params a = copy_of(workload.params, device);
  Params b = copy_of(workload.params, device);
  auto per_parameter = theirs(a);
  auto foreach = mine(b);
  // Warm-up: the states are created, the kernels loaded.
  seconds_for(*per_parameter, a, 3);
  seconds_for(*foreach, b, 3);
  Row row{name, {}, {}};
  for (int64_t r = 0; r < repeats; ++r) {
    row.per_parameter.push_back(seconds_for(*per_parameter, a, steps) / steps);
    row.foreach.push_back(seconds_for(*foreach, b, steps) / steps);
  }
  return row;
}

void print_row(const Workload& w, const Row& row) {
  const double theirs = median(row.per_parameter);
  const double mine = median(row.foreach);
  const auto [theirs_low, theirs_high] =
      std::minmax_element(row.per_parameter.begin(), row.per_parameter.end());
  const auto [mine_low, mine_high] =
      std::minmax_element(row.foreach.begin(), row.foreach.end());
  std::printf(
      "  %-16s %-7s %12.1f (%.1f-%.1f) %12.1f (%.1f-%.1f) %8.2fx\n",
      w.name.c_str(), row.optimizer.c_str(), 1e6 * theirs, 1e6 * *theirs_low,
      1e6 * *theirs_high, 1e6 * mine, 1e6 * *mine_low, 1e6 * *mine_high,
      theirs / mine);
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "optimizer_bench: %s\nusage: optimizer_bench [--device cpu|cuda] "
               "[--steps N] [--repeats R]\n",
               why);
  std::exit(2);
}

} // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  int64_t steps = 20;
  int64_t repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      usage(("missing value for " + arg).c_str());
    }
    const std::string value = argv[++i];
    if (arg == "--device") {
      device_name = value;
    } else if (arg == "--steps") {
      steps = std::atoll(value.c_str());
    } else if (arg == "--repeats") {
      repeats = std::atoll(value.c_str());
    } else {
      usage(("unknown option " + arg).c_str());
    }
  }
  if (device_name != "cpu" && device_name != "cuda") {
    usage(("--device: expected cpu or cuda, got " + device_name).c_str());
  }
  if (steps < 1 || repeats < 1) {
    usage("--steps and --repeats must be positive");
  }
  if (device_name == "cuda" && (!at::hasCUDA() || at::getNumGPUs() == 0)) {
    std::fprintf(stderr, "optimizer_bench: --device cuda: no CUDA device here\n");
    return 2;
  }
  const c10::Device device(device_name == "cuda" ? c10::kCUDA : c10::kCPU);
  // The process settings Trainer::fit makes: freed memory kept (no page
  // faults on every step's temporaries), one BLAS thread, the intra-op
  // threads it would choose.
  hotloop::retain_freed_host_memory();
  hotloop::set_blas_threads(1);
  hotloop::configure_intra_op_threads(0, 0);
  at::manual_seed(0);

  std::vector<Workload> workloads;
  {
    hotloop::models::FashionCnnOptions cnn;
    cnn.channels = {16, 32};
    workloads.push_back(
        {"Fashion CNN", hotloop::models::FashionCnn(cnn)->parameters()});
    workloads.push_back(
        {"ResNet-18 cifar",
         hotloop::models::ResNet(
             hotloop::models::ResNetOptions(18).num_classes(10).stem("cifar"))
             ->parameters()});
    if (device.is_cuda()) {
      workloads.push_back(
          {"GPT-2 124M",
           hotloop::models::Gpt(hotloop::models::GptOptions::gpt2_124m())
               ->parameters()});
    }
  }

  namespace to = torch::optim;
  const Make sgd = [](Params p) {
    return std::make_unique<to::SGD>(p, to::SGDOptions(0.1).momentum(0.9));
  };
  const Make foreach_sgd = [](Params p) {
    auto sgd = std::make_unique<hotloop::optim::ForeachSGD>(
        p, to::SGDOptions(0.1).momentum(0.9));
    sgd->set_foreach(true); // also on a CPU, to show why it is not the default there
    return sgd;
  };
  const Make adamw = [](Params p) {
    return std::make_unique<to::AdamW>(p, to::AdamWOptions(1e-3).weight_decay(0.1));
  };
  const Make foreach_adamw = [](Params p) {
    auto adamw = std::make_unique<hotloop::optim::ForeachAdamW>(
        p, to::AdamWOptions(1e-3).weight_decay(0.1));
    adamw->set_foreach(true);
    return adamw;
  };

  hotloop::bench::Machine machine = hotloop::bench::describe_machine();
  std::vector<std::pair<Workload*, Row>> rows;
  for (Workload& w : workloads) {
    rows.emplace_back(&w, compare("SGD", sgd, foreach_sgd, w, device, steps, repeats));
    rows.emplace_back(
        &w, compare("AdamW", adamw, foreach_adamw, w, device, steps, repeats));
  }
  machine.load_after = hotloop::bench::load_average();

  std::printf("hotloop optimizer step benchmark\n");
  hotloop::bench::print_machine(machine, {{"device", device.str()}});
  std::printf(
      "work:    one optimizer step over a model's parameters, the same "
      "gradients each step; median of %lld repeats of %lld steps (range)\n\n",
      static_cast<long long>(repeats), static_cast<long long>(steps));
  std::printf("  %-16s %-7s %28s %28s %9s\n", "model (tensors)", "",
              "LibTorch per parameter, us", "hotloop multi-tensor, us",
              "speed-up");
  for (const auto& [w, row] : rows) {
    Workload named = *w;
    named.name += " (" + std::to_string(w->params.size()) + ")";
    print_row(named, row);
  }
  return 0;
}
