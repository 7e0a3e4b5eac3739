#include "hotloop/train/step_profile.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>
#include <utility>
#include <vector>

namespace hotloop::train {
namespace {

std::string percent(double part, double whole) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(0)
      << (whole > 0 ? 100 * part / whole : 0) << "%";
  return out.str();
}

// "2.42 s (sanity check 1.90 s, model summary 0.31 s, callbacks 0.10 s)":
// the parts' total and the three largest, names' underscores as spaces.
std::string largest_parts(const std::map<std::string, double>& parts) {
  std::vector<std::pair<double, std::string>> largest;
  double total = 0;
  for (const auto& [name, seconds] : parts) {
    std::string words = name;
    std::replace(words.begin(), words.end(), '_', ' ');
    largest.emplace_back(seconds, words);
    total += seconds;
  }
  std::sort(largest.rbegin(), largest.rend());
  largest.resize(std::min<size_t>(largest.size(), 3));
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << total << " s (";
  for (size_t i = 0; i < largest.size(); ++i) {
    out << (i > 0 ? ", " : "") << largest[i].second << " " << largest[i].first
        << " s";
  }
  out << ")";
  return out.str();
}

} // namespace

double StepProfile::samples_per_s() const {
  return step_seconds() > 0 ? samples / step_seconds() : 0;
}

double StepProfile::steady_samples_per_s() const {
  const double seconds = step_seconds() - warmup_seconds;
  if (warmup_samples == 0 || seconds <= 0 || samples <= warmup_samples) {
    return samples_per_s();
  }
  return static_cast<double>(samples - warmup_samples) / seconds;
}

double StepProfile::flops_per_s() const {
  return flops_per_sample * steady_samples_per_s();
}

std::string StepProfile::utilization_text() const {
  const double share = utilization();
  if (share <= 0) {
    return "";
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(share < 0.01 ? 2 : 1) << 100 * share
      << "% MFU (training FLOPs per sample x the steady rate / ";
  if (peak_flops >= 1e12) {
    out << std::setprecision(1) << peak_flops / 1e12 << " TFLOP/s, ";
  } else {
    out << std::setprecision(2) << peak_flops / 1e9 << " GFLOP/s, ";
  }
  out << (peak_source.empty() ? std::string("measured") : peak_source) << ")";
  return out.str();
}

std::map<std::string, double> StepProfile::phases() const {
  std::map<std::string, double> out{
      {"data", data},
      {"h2d", h2d},
      {"forward", forward},
      {"backward", backward},
      {"optimizer", optimizer},
      {"logging", logging},
  };
  if (data_parallel) {
    out["comm"] = comm;
  }
  return out;
}

std::map<std::string, double> StepProfile::share_basis() const {
  return asynchronous && synced_steps > 0 ? synced : phases();
}

std::string StepProfile::verdict(const ProfileContext& context) const {
  std::map<std::string, double> phase = share_basis();
  double total = 0;
  for (const auto& [name, seconds] : phase) {
    total += seconds;
  }
  if (total <= 0) {
    return "no training steps were timed";
  }
  const double comm = phase["comm"];
  const double data = phase["data"], h2d = phase["h2d"],
               forward = phase["forward"], backward = phase["backward"],
               optimizer = phase["optimizer"], logging = phase["logging"];
  // The first phase over its threshold is the one to fix first: time not
  // spent computing is pure loss.
  if (data / total > 0.2) {
    return "input-bound: " + percent(data, total) +
           " of step time waiting for data - raise data.num_workers (now " +
           std::to_string(context.num_workers) + ") or data.prefetch_factor";
  }
  if (comm / total > 0.2) {
    return "communication-bound: " + percent(comm, total) +
           " of step time waiting for the other processes' gradients - " +
           std::string(
               context.batch_can_grow
                   ? "larger batches per process (data.batch_size), "
                   : "") +
           "trainer.accumulate_grad_batches, or fewer processes";
  }
  if (h2d / total > 0.15) {
    if (!context.cuda) {
      return "conversion-bound: " + percent(h2d, total) +
             " of step time converting batches (dtype, memory format) - "
             "produce them in the training dtype and layout in the dataset";
    }
    return "transfer-bound: " + percent(h2d, total) +
           " of step time copying batches to the device - " +
           (context.pin_memory ? std::string("use larger batches")
                               : std::string("set data.pin_memory=true"));
  }
  if (optimizer / total > 0.3) {
    return "optimizer-bound: " + percent(optimizer, total) +
           " of step time in the optimizer step - raise " +
           std::string(context.batch_can_grow ? "data.batch_size or " : "") +
           "trainer.accumulate_grad_batches";
  }
  if (logging / total > 0.1) {
    return "logging-bound: " + percent(logging, total) +
           " of step time in callbacks and logging - raise "
           "trainer.log_every_n_steps (now " +
           std::to_string(context.log_every_n_steps) + ")";
  }
  // Busy computing at a small share of what the device can: its kernels
  // are too small to fill it, and it waits for the host to launch them.
  const double share = utilization();
  if (context.cuda && !context.cuda_graphs && share > 0 && share < 0.1) {
    return "launch-bound: forward+backward take " +
           percent(forward + backward, total) + " of step time at " +
           utilization_text() +
           " - its kernels are too small to keep the device busy and wait "
           "for the host to launch them: try trainer.cuda_graphs=true" +
           std::string(
               context.batch_can_grow ? ", or raise data.batch_size" : "");
  }
  std::string advice;
  if (context.cuda) {
    std::vector<std::string> options;
    if (context.precision == "32-true") {
      options.push_back("trainer.precision=bf16-mixed");
    }
    if (context.convolutional && !context.channels_last) {
      options.push_back("trainer.channels_last=true");
    }
    if (options.empty()) {
      advice = context.batch_can_grow
                   ? "raise data.batch_size, or a smaller model"
                   : "a smaller model";
    } else {
      advice = "try " + options[0] +
               (options.size() > 1 ? " and " + options[1] : std::string());
    }
  } else {
    advice = "a smaller model, trainer.num_threads, or a GPU";
  }
  const std::string mfu = utilization_text();
  return "compute-bound: forward+backward take " +
         percent(forward + backward, total) + " of step time" +
         (mfu.empty() ? std::string() : " at " + mfu) + " - " + advice;
}

void StepProfile::print(
    std::ostream& out, const ProfileContext& context) const {
  const std::map<std::string, double> basis = share_basis();
  double total = 0;
  for (const auto& [name, seconds] : basis) {
    total += seconds;
  }
  out << "profile: " << hotloop::detail::counted(steps, "step") << ", "
      << std::fixed << std::setprecision(0) << samples_per_s() << " samples/s";
  if (tokens_per_sample > 0) {
    out << " (" << samples_per_s() * tokens_per_sample << " tokens/s)";
  }
  out << "; step time";
  for (const char* phase :
       {"data", "h2d", "forward", "backward", "comm", "optimizer", "logging"}) {
    const auto found = basis.find(phase);
    if (found != basis.end()) {
      out << " " << phase << " " << percent(found->second, total);
    }
  }
  if (asynchronous) {
    if (synced_steps > 0) {
      out << " (from " << hotloop::detail::counted(synced_steps, "step")
          << " timed with the device synchronised)";
    } else {
      out << " (host times: the device runs asynchronously)";
    }
  }
  out << std::setprecision(1) << "; validation " << validation << " s";
  if (flops_per_sample > 0) {
    out << std::setprecision(2) << "; " << flops_per_s() / 1e9
        << " GFLOP/s achieved at the steady rate";
    if (peak_flops > 0) {
      out << ", " << utilization_text();
      if (utilization() > 1) {
        // Counted FLOPs are nominal: Winograd or FFT convolutions do fewer.
        out << " - over 100%: the kernels do fewer operations than the "
               "nominal count, as Winograd convolutions do";
      }
    }
  }
  if (!setup_parts.empty()) {
    out << "; set-up " << largest_parts(setup_parts);
  }
  if (!first_step.empty()) {
    out << "; the first step " << largest_parts(first_step);
  }
  if (process_to_first_step >= 0) {
    out << std::setprecision(2) << "; from process start: the first step at "
        << process_to_first_step << " s";
    if (process_to_warmup_end >= 0) {
      out << ", the end of step " << kWarmupSteps << " at "
          << process_to_warmup_end << " s";
    }
  }
  out << std::defaultfloat << "\nverdict: " << verdict(context) << "\n";
}

double measure_peak_flops(c10::Device device, c10::ScalarType dtype) {
  const at::NoGradGuard no_grad;
  // Large enough to reach the kernels' steady rate, small enough to be quick
  // on a 2-core CPU.
  const int64_t n = device.is_cpu() ? 768 : 8192;
  const auto options = at::TensorOptions().device(device).dtype(dtype);
  const at::Tensor a = at::full({n, n}, 0.5, options);
  const at::Tensor b = at::full({n, n}, 0.25, options);
  at::Tensor c = at::mm(a, b);
  c.sum().item<double>(); // warm up and wait for the device
  int64_t reps = 0;
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0;
  while (seconds < 0.2) {
    for (int i = 0; i < 4; ++i, ++reps) {
      c = at::mm(a, b);
    }
    c.sum().item<double>(); // waits for asynchronous devices
    seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  }
  return 2.0 * n * n * n * reps / seconds;
}

} // namespace hotloop::train
