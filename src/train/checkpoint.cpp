#include "hotloop/train/checkpoint.h"

#include "hotloop/core/error.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/grad_scaler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>

namespace hotloop::train {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kFormatVersion = 1;

void write_all(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    HOTLOOP_CHECK(n > 0, path, ": write failed: ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

void fsync_dir(const fs::path& dir) {
  const int fd =
      ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// CUDA devices whose generators a checkpoint carries; 0 on CPU builds.
int64_t cuda_devices() {
  return at::hasCUDA() ? static_cast<int64_t>(at::getNumGPUs()) : 0;
}

at::Generator cuda_generator(int64_t index) {
  return at::globalContext().defaultGenerator(
      c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
}

// Where a model's tensors live: its first parameter's or buffer's device,
// the CPU for a model without either.
c10::Device device_of(const torch::nn::Module& model) {
  const std::vector<at::Tensor> parameters = model.parameters();
  if (!parameters.empty()) {
    return parameters.front().device();
  }
  const std::vector<at::Tensor> buffers = model.buffers();
  return buffers.empty() ? c10::Device(c10::DeviceType::CPU)
                         : buffers.front().device();
}

std::string cuda_rng_key(int64_t index) {
  return "cuda_rng_state_" + std::to_string(index);
}

at::Tensor scalar(int64_t value) {
  return at::scalar_tensor(value, at::kLong);
}

// "optimizer", "optimizer_1", ...: the first checkpoints held one,
// unnumbered.
std::string indexed_key(const char* name, size_t index) {
  return index == 0 ? name : std::string(name) + "_" + std::to_string(index);
}

// Named rows of `width` doubles: the names as JSON text, the values as a
// float64 [n, width] tensor, so that NaN and every bit survive.
void write_doubles(
    torch::serialize::OutputArchive& archive,
    const std::string& key,
    const std::map<std::string, std::vector<double>>& rows,
    int64_t width) {
  if (rows.empty()) {
    return;
  }
  nlohmann::json names = nlohmann::json::array();
  std::vector<double> values;
  for (const auto& [name, row] : rows) {
    names.push_back(name);
    values.insert(values.end(), row.begin(), row.end());
  }
  archive.write(key + "_names", c10::IValue(names.dump()));
  archive.write(
      key + "_values",
      at::tensor(values, at::kDouble)
          .view({static_cast<int64_t>(rows.size()), width}));
}

std::map<std::string, std::vector<double>> read_doubles(
    torch::serialize::InputArchive& archive,
    const std::string& key,
    int64_t width) {
  std::map<std::string, std::vector<double>> rows;
  c10::IValue names_text;
  at::Tensor values;
  if (!archive.try_read(key + "_names", names_text) ||
      !archive.try_read(key + "_values", values)) {
    return rows;
  }
  const nlohmann::json names = nlohmann::json::parse(names_text.toStringRef());
  HOTLOOP_CHECK(
      values.dim() == 2 &&
          values.size(0) == static_cast<int64_t>(names.size()) &&
          values.size(1) == width && values.scalar_type() == at::kDouble,
      key,
      ": expected float64 [",
      names.size(),
      ", ",
      width,
      "] values, got ",
      values.sizes());
  const at::Tensor contiguous = values.to(at::kCPU).contiguous();
  const double* data = contiguous.data_ptr<double>();
  for (size_t i = 0; i < names.size(); ++i) {
    rows[names[i].get<std::string>()] =
        std::vector<double>(data + i * width, data + (i + 1) * width);
  }
  return rows;
}

} // namespace

RngStates get_rng_states() {
  RngStates states;
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    states.cpu = generator.get_state();
  }
  for (int64_t i = 0; i < cuda_devices(); ++i) {
    at::Generator generator = cuda_generator(i);
    std::lock_guard<std::mutex> lock(generator.mutex());
    states.cuda.push_back(generator.get_state());
  }
  return states;
}

void set_rng_states(const RngStates& states) {
  if (states.cpu.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    // Generators take their state as a CPU byte tensor; a checkpoint loaded
    // onto a GPU brings it there.
    generator.set_state(states.cpu.to(at::kCPU));
  }
  const int64_t devices = cuda_devices();
  for (int64_t i = 0;
       i < devices && i < static_cast<int64_t>(states.cuda.size());
       ++i) {
    if (states.cuda[i].defined()) {
      at::Generator generator = cuda_generator(i);
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(states.cuda[i].to(at::kCPU));
    }
  }
}

void write_file_atomically(
    const std::string& path, const std::function<void(std::ostream&)>& write) {
  std::ostringstream buffer;
  write(buffer);
  const std::string bytes = std::move(buffer).str();

  const fs::path target(path);
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp.data());
  HOTLOOP_CHECK(
      fd >= 0,
      path,
      ": cannot create a temporary file next to it: ",
      std::strerror(errno));
  try {
    // mkstemp makes the file private (0600); give it the permissions any
    // other file would get.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);
    write_all(fd, bytes, temp);
    HOTLOOP_CHECK(
        ::fsync(fd) == 0, temp, ": fsync failed: ", std::strerror(errno));
    HOTLOOP_CHECK(
        ::close(fd) == 0, temp, ": close failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw Error(hotloop::detail::str_cat(
        path, ": cannot replace: ", std::strerror(error)));
  }
  fsync_dir(target.parent_path());
}

bool LoaderFingerprint::operator==(const LoaderFingerprint& other) const {
  return seed == other.seed && batches_per_epoch == other.batches_per_epoch &&
         batch_size == other.batch_size && dataset_size == other.dataset_size &&
         shuffle == other.shuffle;
}

void save_checkpoint(
    const std::string& path,
    torch::nn::Module& model,
    const CheckpointState& state) {
  torch::serialize::OutputArchive archive;
  archive.write("hotloop_checkpoint_version", scalar(kFormatVersion));
  archive.write("epoch", scalar(state.progress.epoch));
  archive.write("global_step", scalar(state.progress.global_step));
  archive.write("epoch_batches", scalar(state.progress.epoch_batches));
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  archive.write(
      "optimizers", scalar(static_cast<int64_t>(state.optimizers.size())));
  for (size_t i = 0; i < state.optimizers.size(); ++i) {
    torch::serialize::OutputArchive optimizer_archive;
    state.optimizers[i]->save(optimizer_archive);
    archive.write(indexed_key("optimizer", i), optimizer_archive);
  }
  archive.write(
      "schedulers", scalar(static_cast<int64_t>(state.schedulers.size())));
  for (size_t i = 0; i < state.schedulers.size(); ++i) {
    torch::serialize::OutputArchive scheduler_archive;
    state.schedulers[i]->save(scheduler_archive);
    archive.write(indexed_key("scheduler", i), scheduler_archive);
  }
  if (state.scaler != nullptr && state.scaler->is_enabled()) {
    torch::serialize::OutputArchive scaler_archive;
    state.scaler->save(scaler_archive);
    archive.write("grad_scaler", scaler_archive);
  }
  const RngStates rng = get_rng_states();
  archive.write("cpu_rng_state", rng.cpu);
  for (size_t i = 0; i < rng.cuda.size(); ++i) {
    archive.write(cuda_rng_key(static_cast<int64_t>(i)), rng.cuda[i]);
  }
  if (!state.callbacks.empty()) {
    archive.write("callbacks", c10::IValue(state.callbacks));
  }
  std::map<std::string, std::vector<double>> epoch_metrics;
  for (const auto& [name, sum_weight] : state.loop.epoch_metrics) {
    epoch_metrics[name] = {sum_weight.first, sum_weight.second};
  }
  write_doubles(archive, "loop_epoch_metrics", epoch_metrics, 2);
  std::map<std::string, std::vector<double>> callback_metrics;
  for (const auto& [name, value] : state.loop.callback_metrics) {
    callback_metrics[name] = {value};
  }
  write_doubles(archive, "loop_callback_metrics", callback_metrics, 1);
  if (state.loader.known()) {
    const LoaderFingerprint& loader = state.loader;
    archive.write(
        "loader",
        at::tensor(
            std::vector<int64_t>{
                static_cast<int64_t>(loader.seed),
                loader.batches_per_epoch,
                loader.batch_size,
                loader.dataset_size,
                loader.shuffle ? 1 : 0},
            at::kLong));
  }
  write_file_atomically(path, [&](std::ostream& out) { archive.save_to(out); });
}

TrainingProgress load_checkpoint(
    const std::string& path, torch::nn::Module& model, CheckpointState* state) {
  std::error_code ec;
  HOTLOOP_CHECK(
      fs::is_regular_file(path, ec), "checkpoint '", path, "' does not exist");
  TrainingProgress progress;
  try {
    // Tensors load onto the model's device, as PyTorch's map_location does:
    // a checkpoint written on a GPU loads into a model on the CPU and the
    // reverse, and parameters stay where the Trainer put them. Host-side
    // records (RNG states, the loader, metrics) are brought back to the CPU.
    torch::serialize::InputArchive archive;
    archive.load_from(path, device_of(model));
    // InputArchive::read assigns into a defined tensor, so each read gets
    // a fresh one.
    auto read_int = [&](const std::string& key, int64_t fallback) {
      at::Tensor value;
      return archive.try_read(key, value) ? value.item<int64_t>() : fallback;
    };
    at::Tensor version;
    HOTLOOP_CHECK(
        archive.try_read("hotloop_checkpoint_version", version),
        path,
        ": not a hotloop checkpoint");
    HOTLOOP_CHECK(
        version.item<int64_t>() == kFormatVersion,
        path,
        ": checkpoint format version ",
        version.item<int64_t>(),
        " is not supported (expected ",
        kFormatVersion,
        ")");
    progress.epoch = read_int("epoch", 0);
    progress.global_step = read_int("global_step", 0);
    progress.epoch_batches = read_int("epoch_batches", 0);
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    if (state == nullptr) {
      return progress;
    }
    state->progress = progress;
    // The first checkpoints held at most one of each, unnumbered.
    auto check_count = [&](const char* what, size_t expected) {
      if (expected == 0) {
        return; // the caller does not want them
      }
      torch::serialize::InputArchive ignored;
      const int64_t saved = read_int(
          std::string(what) + "s", archive.try_read(what, ignored) ? 1 : 0);
      HOTLOOP_CHECK(
          saved == static_cast<int64_t>(expected),
          path,
          ": the checkpoint holds ",
          saved,
          " ",
          what,
          saved == 1 ? "" : "s",
          ", the module configures ",
          expected);
    };
    check_count("optimizer", state->optimizers.size());
    for (size_t i = 0; i < state->optimizers.size(); ++i) {
      torch::serialize::InputArchive optimizer_archive;
      archive.read(indexed_key("optimizer", i), optimizer_archive);
      state->optimizers[i]->load(optimizer_archive);
    }
    check_count("scheduler", state->schedulers.size());
    for (size_t i = 0; i < state->schedulers.size(); ++i) {
      torch::serialize::InputArchive scheduler_archive;
      archive.read(indexed_key("scheduler", i), scheduler_archive);
      state->schedulers[i]->load(scheduler_archive);
    }
    torch::serialize::InputArchive scaler_archive;
    if (state->scaler != nullptr && state->scaler->is_enabled() &&
        archive.try_read("grad_scaler", scaler_archive)) {
      state->scaler->load(scaler_archive);
    }
    RngStates rng;
    archive.try_read("cpu_rng_state", rng.cpu);
    for (int64_t i = 0; i < cuda_devices(); ++i) {
      rng.cuda.emplace_back();
      archive.try_read(cuda_rng_key(i), rng.cuda.back());
    }
    set_rng_states(rng);
    c10::IValue callbacks;
    state->callbacks = archive.try_read("callbacks", callbacks)
                           ? callbacks.toStringRef()
                           : std::string();
    state->loop = LoopState{};
    for (const auto& [name, values] :
         read_doubles(archive, "loop_epoch_metrics", 2)) {
      state->loop.epoch_metrics[name] = {values[0], values[1]};
    }
    for (const auto& [name, values] :
         read_doubles(archive, "loop_callback_metrics", 1)) {
      state->loop.callback_metrics[name] = values[0];
    }
    state->loader = LoaderFingerprint{};
    at::Tensor loader;
    if (archive.try_read("loader", loader)) {
      loader = loader.to(at::kCPU);
      HOTLOOP_CHECK(
          loader.dim() == 1 && loader.numel() == 5 &&
              loader.scalar_type() == at::kLong,
          path,
          ": malformed loader record");
      const int64_t* values = loader.data_ptr<int64_t>();
      state->loader.seed = static_cast<uint64_t>(values[0]);
      state->loader.batches_per_epoch = values[1];
      state->loader.batch_size = values[2];
      state->loader.dataset_size = values[3];
      state->loader.shuffle = values[4] != 0;
    }
  } catch (const c10::Error& e) {
    throw Error(hotloop::detail::str_cat(
        path, ": cannot load checkpoint: ", e.what_without_backtrace()));
  }
  return progress;
}

} // namespace hotloop::train
