#include "hotloop/train/checkpoint.h"

#include "hotloop/core/error.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/grad_scaler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

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

std::string cuda_rng_key(int64_t index) {
  return "cuda_rng_state_" + std::to_string(index);
}

at::Tensor scalar(int64_t value) {
  return at::scalar_tensor(value, at::kLong);
}

} // namespace

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

void save_checkpoint(
    const std::string& path,
    torch::nn::Module& model,
    const torch::optim::Optimizer* optimizer,
    const optim::LRScheduler* scheduler,
    const TrainingProgress& progress,
    const GradScaler* scaler,
    const std::string& callback_state) {
  torch::serialize::OutputArchive archive;
  archive.write("hotloop_checkpoint_version", scalar(kFormatVersion));
  archive.write("epoch", scalar(progress.epoch));
  archive.write("global_step", scalar(progress.global_step));
  archive.write("epoch_batches", scalar(progress.epoch_batches));
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  if (optimizer != nullptr) {
    torch::serialize::OutputArchive optimizer_archive;
    optimizer->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
  }
  if (scheduler != nullptr) {
    torch::serialize::OutputArchive scheduler_archive;
    scheduler->save(scheduler_archive);
    archive.write("scheduler", scheduler_archive);
  }
  if (scaler != nullptr && scaler->is_enabled()) {
    torch::serialize::OutputArchive scaler_archive;
    scaler->save(scaler_archive);
    archive.write("grad_scaler", scaler_archive);
  }
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    archive.write("cpu_rng_state", generator.get_state());
  }
  for (int64_t i = 0; i < cuda_devices(); ++i) {
    at::Generator generator = cuda_generator(i);
    std::lock_guard<std::mutex> lock(generator.mutex());
    archive.write(cuda_rng_key(i), generator.get_state());
  }
  if (!callback_state.empty()) {
    archive.write("callbacks", c10::IValue(callback_state));
  }
  write_file_atomically(path, [&](std::ostream& out) { archive.save_to(out); });
}

TrainingProgress load_checkpoint(
    const std::string& path,
    torch::nn::Module& model,
    torch::optim::Optimizer* optimizer,
    optim::LRScheduler* scheduler,
    GradScaler* scaler,
    std::string* callback_state) {
  std::error_code ec;
  HOTLOOP_CHECK(
      fs::is_regular_file(path, ec), "checkpoint '", path, "' does not exist");
  TrainingProgress progress;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    // InputArchive::read assigns into a defined tensor, so each read gets
    // a fresh one.
    auto read_int = [&](const char* key) {
      at::Tensor value;
      archive.read(key, value);
      return value.item<int64_t>();
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
    progress.epoch = read_int("epoch");
    progress.global_step = read_int("global_step");
    at::Tensor epoch_batches;
    if (archive.try_read("epoch_batches", epoch_batches)) {
      progress.epoch_batches = epoch_batches.item<int64_t>();
    }
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    if (optimizer != nullptr &&
        archive.try_read("optimizer", optimizer_archive)) {
      optimizer->load(optimizer_archive);
    }
    torch::serialize::InputArchive scheduler_archive;
    if (scheduler != nullptr &&
        archive.try_read("scheduler", scheduler_archive)) {
      scheduler->load(scheduler_archive);
    }
    torch::serialize::InputArchive scaler_archive;
    if (scaler != nullptr && scaler->is_enabled() &&
        archive.try_read("grad_scaler", scaler_archive)) {
      scaler->load(scaler_archive);
    }
    at::Tensor rng_state;
    if (archive.try_read("cpu_rng_state", rng_state)) {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng_state);
    }
    for (int64_t i = 0; i < cuda_devices(); ++i) {
      at::Tensor state;
      if (archive.try_read(cuda_rng_key(i), state)) {
        at::Generator generator = cuda_generator(i);
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_state(state);
      }
    }
    if (callback_state != nullptr) {
      c10::IValue callbacks;
      *callback_state = archive.try_read("callbacks", callbacks)
                            ? callbacks.toStringRef()
                            : std::string();
    }
  } catch (const c10::Error& e) {
    throw Error(hotloop::detail::str_cat(
        path, ": cannot load checkpoint: ", e.what_without_backtrace()));
  }
  return progress;
}

} // namespace hotloop::train
