#include "hotloop/train/checkpoint.h"

#include "hotloop/compress/parametrization.h"
#include "hotloop/core/error.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/detail/zip_archive.h"
#include "hotloop/train/grad_scaler.h"

#include "hotloop/version.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <torch/version.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>

namespace hotloop::train {
namespace {

namespace fs = std::filesystem;

// 2: sealed (a checksum and versions at the end) and the model's
// parameter names and shapes recorded; 1 loads as before, unverified.
constexpr int64_t kFormatVersion = 2;

void write_all(int fd, const char* data, size_t size, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    HOTLOOP_CHECK(n > 0, path, ": write failed: ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

// An ostream's buffer that writes to a file descriptor as it fills, so that
// a file as large as a checkpoint is never held whole in memory. A failed
// write throws Error naming `path` (the ostream rethrows it: badbit is in
// its exceptions).
class FileDescriptorBuffer : public std::streambuf {
 public:
  FileDescriptorBuffer(int fd, std::string path)
      : fd_(fd), path_(std::move(path)), buffer_(size_t{1} << 20) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }

 protected:
  int_type overflow(int_type c) override {
    drain();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }

  std::streamsize xsputn(const char* data, std::streamsize n) override {
    const auto size = static_cast<size_t>(n);
    if (size > static_cast<size_t>(epptr() - pptr())) {
      drain();
      if (size >= buffer_.size()) {
        write_all(fd_, data, size, path_);
        return n;
      }
    }
    std::memcpy(pptr(), data, size);
    pbump(static_cast<int>(n));
    return n;
  }

  int sync() override {
    drain();
    return 0;
  }

 private:
  void drain() {
    write_all(fd_, pbase(), static_cast<size_t>(pptr() - pbase()), path_);
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }

  int fd_;
  std::string path_;
  std::vector<char> buffer_;
};

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

// The seal at the end of every checkpoint: the zip's archive comment (after
// its end-of-central-directory record, where zip readers, PyTorch's
// included, expect and skip one) says
//   hotloop-checkpoint format=2 crc32=0123abcd hotloop=0.1.0 libtorch=1.13.0
// and the CRC-32 covers every byte before the comment's length field.
constexpr const char* kSealTag = "hotloop-checkpoint ";

std::string torch_version() {
  return hotloop::detail::str_cat(
      TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH);
}

// Passes a zip through to `out` as LibTorch writes it (with no comment),
// computing its CRC-32 on the way, and at `finish` gives its end record the
// seal as its comment: the last 22 bytes seen, the end record, are held
// back until then. LibTorch's zip writer calls it from C (miniz), which an
// exception must not cross, and 1.13's writer ends the process (an error
// thrown from its destructor) when told of a short write: so a failed write
// is kept, the rest of the zip is taken and dropped, and `finish` rethrows
// the failure.
class SealingBuffer : public std::streambuf {
 public:
  explicit SealingBuffer(std::streambuf& out) : out_(out) {}

  void finish() {
    if (failure_) {
      std::rethrow_exception(failure_);
    }
    constexpr size_t kEnd = detail::kZipEndRecordSize;
    HOTLOOP_CHECK(
        tail_.size() == kEnd && tail_.compare(0, 4, "PK\5\6") == 0 &&
            tail_[kEnd - 2] == 0 && tail_[kEnd - 1] == 0,
        "save_checkpoint: the archive does not end in a zip end record");
    pass(tail_.data(), kEnd - 2);
    const std::string comment = hotloop::detail::str_cat(
        kSealTag,
        "format=",
        kFormatVersion,
        " crc32=",
        detail::hex32(static_cast<uint32_t>(crc_)),
        " hotloop=",
        HOTLOOP_VERSION,
        " libtorch=",
        torch_version());
    const char length[2] = {
        static_cast<char>(comment.size() & 0xFF),
        static_cast<char>(comment.size() >> 8)};
    write(length, 2);
    write(comment.data(), comment.size());
  }

 protected:
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      const char byte = traits_type::to_char_type(c);
      if (xsputn(&byte, 1) != 1) {
        return traits_type::eof();
      }
    }
    return traits_type::not_eof(c);
  }

  std::streamsize xsputn(const char* data, std::streamsize n) override {
    if (!failure_) {
      try {
        take(data, static_cast<size_t>(n));
      } catch (...) {
        failure_ = std::current_exception();
      }
    }
    return n;
  }

 private:
  void take(const char* data, size_t size) {
    constexpr size_t kEnd = detail::kZipEndRecordSize;
    if (size >= kEnd) {
      pass(tail_.data(), tail_.size());
      pass(data, size - kEnd);
      tail_.assign(data + size - kEnd, kEnd);
    } else {
      tail_.append(data, size);
      if (tail_.size() > kEnd) {
        const size_t extra = tail_.size() - kEnd;
        pass(tail_.data(), extra);
        tail_.erase(0, extra);
      }
    }
  }

  void pass(const char* data, size_t size) {
    crc_ = ::crc32_z(crc_, reinterpret_cast<const Bytef*>(data), size);
    write(data, size);
  }

  void write(const char* data, size_t size) {
    HOTLOOP_CHECK(
        out_.sputn(data, static_cast<std::streamsize>(size)) ==
            static_cast<std::streamsize>(size),
        "save_checkpoint: the file took fewer bytes than written");
  }

  std::streambuf& out_;
  uLong crc_ = ::crc32_z(0, nullptr, 0);
  std::string tail_;
  std::exception_ptr failure_;
};

// "name [shape]" per line, parameters then buffers, in the module's order:
// what a checkpoint's model must match.
std::vector<std::pair<std::string, std::string>> model_signature(
    const torch::nn::Module& model) {
  std::vector<std::pair<std::string, std::string>> entries;
  const auto shape = [](const at::Tensor& t) {
    std::ostringstream out;
    out << t.sizes();
    return out.str();
  };
  for (const auto& p : model.named_parameters()) {
    entries.emplace_back(p.key(), shape(p.value()));
  }
  for (const auto& b : model.named_buffers()) {
    entries.emplace_back(b.key(), shape(b.value()));
  }
  return entries;
}

std::string signature_text(
    const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string text;
  for (const auto& [name, shape] : entries) {
    text += name + " " + shape + "\n";
  }
  return text;
}

std::vector<std::pair<std::string, std::string>> parse_signature(
    const std::string& text) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    entries.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return entries;
}

// Throws Error naming the first parameter or buffer whose name or shape
// differs between the checkpoint's model and `model`.
void check_same_model(
    const std::string& path,
    const std::vector<std::pair<std::string, std::string>>& saved,
    const std::vector<std::pair<std::string, std::string>>& here) {
  for (size_t i = 0; i < std::max(saved.size(), here.size()); ++i) {
    if (i < saved.size() && i < here.size() && saved[i] == here[i]) {
      continue;
    }
    if (i < saved.size() && i < here.size() &&
        saved[i].first == here[i].first) {
      throw Error(hotloop::detail::str_cat(
          path,
          ": the checkpoint's model differs from this one: '",
          saved[i].first,
          "' is ",
          saved[i].second,
          " in the checkpoint and ",
          here[i].second,
          " here (were the model options changed?)"));
    }
    throw Error(hotloop::detail::str_cat(
        path,
        ": the checkpoint's model differs from this one: entry ",
        i + 1,
        " is ",
        i < saved.size() ? "'" + saved[i].first + "' " + saved[i].second
                         : std::string("absent"),
        " in the checkpoint and ",
        i < here.size() ? "'" + here[i].first + "' " + here[i].second
                        : std::string("absent"),
        " here (were the model options changed?)"));
  }
}

// The value of `key=` in a seal, or "".
std::string seal_field(const std::string& seal, const std::string& key) {
  const size_t at = seal.find(" " + key + "=");
  if (at == std::string::npos) {
    return "";
  }
  const size_t start = at + key.size() + 2;
  return seal.substr(start, seal.find(' ', start) - start);
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

namespace {

// A temporary is a leftover when written before this process started (near
// enough: when the library was loaded). File times come from the kernel's
// coarse clock, a tick behind `now()`, and some filesystems keep whole or
// even seconds, so a file written just after the start can carry an earlier
// stamp: only what is older than two seconds before the start counts.
const fs::file_time_type kLeftoverBefore =
    fs::file_time_type::clock::now() - std::chrono::seconds(2);

// `folder` is never empty: a bare file name's folder is ".".
void remove_stale_temporaries(const fs::path& folder) {
  static std::mutex mutex;
  static std::set<std::string> cleaned;
  {
    std::error_code ec;
    const fs::path absolute = fs::absolute(folder, ec);
    const std::lock_guard<std::mutex> lock(mutex);
    if (ec || !cleaned.insert(absolute.string()).second) {
      return;
    }
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    // `<name>.tmp.XXXXXX`: mkstemp's six letters and digits.
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    const bool ours =
        at != std::string::npos && at > 0 && name.size() == at + 5 + 6 &&
        std::all_of(name.begin() + at + 5, name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) != 0;
        });
    std::error_code file_ec;
    if (ours && entry.is_regular_file(file_ec) &&
        entry.last_write_time(file_ec) < kLeftoverBefore && !file_ec) {
      fs::remove(entry.path(), file_ec);
    }
  }
}

// In a catch block around reading `path`'s archive: hotloop's own errors go
// on; LibTorch's, and the standard library's that its reader also throws on
// a damaged archive (std::out_of_range from a map lookup, seen), become one
// line naming the file.
[[noreturn]] void rethrow_as_load_error(const std::string& path) {
  constexpr const char* kWhat =
      ": cannot load checkpoint (corrupted or truncated?): ";
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Error(
        hotloop::detail::str_cat(path, kWhat, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw Error(hotloop::detail::str_cat(path, kWhat, e.what()));
  }
}

} // namespace

void write_file_atomically(
    const std::string& path, const std::function<void(std::ostream&)>& write) {
  HOTLOOP_CHECK(!path.empty(), "cannot write a file with an empty name");
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) {
    folder = "."; // a bare file name lives in the working directory
  }
  std::error_code folder_ec;
  HOTLOOP_CHECK(
      fs::is_directory(folder, folder_ec),
      path,
      ": cannot write it: folder '",
      folder.string(),
      fs::exists(folder, folder_ec) ? "' is not a folder" : "' does not exist");
  remove_stale_temporaries(folder);

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
    FileDescriptorBuffer buffer(fd, temp);
    std::ostream out(&buffer);
    out.exceptions(std::ios::badbit | std::ios::failbit);
    write(out);
    out.flush();
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
  fsync_dir(folder);
}

bool LoaderFingerprint::operator==(const LoaderFingerprint& other) const {
  // What an older checkpoint did not record agrees with anything.
  const auto agree = [](int64_t a, int64_t b, int64_t unknown) {
    return a == unknown || b == unknown || a == b;
  };
  return seed == other.seed && batches_per_epoch == other.batches_per_epoch &&
         batch_size == other.batch_size && dataset_size == other.dataset_size &&
         shuffle == other.shuffle && agree(order, other.order, -1) &&
         agree(world_size, other.world_size, 0);
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
  archive.write(
      "model_parameters", c10::IValue(signature_text(model_signature(model))));
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
  if (const c10::Device device = device_of(model); device.is_cuda()) {
    archive.write("rng_device", scalar(device.index()));
  }
  if (!state.callbacks.empty()) {
    archive.write("callbacks", c10::IValue(state.callbacks));
  }
  if (!state.callback_tensors.empty()) {
    // By position: state keys and tensor names are not archive names.
    torch::serialize::OutputArchive all;
    nlohmann::json keys = nlohmann::json::array();
    for (const auto& [key, tensors] : state.callback_tensors) {
      torch::serialize::OutputArchive one;
      one.write("count", scalar(static_cast<int64_t>(tensors.size())));
      for (size_t i = 0; i < tensors.size(); ++i) {
        one.write(indexed_key("tensor", i), tensors[i]);
      }
      all.write(indexed_key("callback", keys.size()), one);
      keys.push_back(key);
    }
    all.write("keys", c10::IValue(keys.dump()));
    archive.write("callback_tensors", all);
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
    // A key of its own, which readers before it skip: they still resume.
    if (loader.order != -1 || loader.world_size != 0) {
      archive.write(
          "loader_order",
          at::tensor(
              std::vector<int64_t>{loader.order, loader.world_size},
              at::kLong));
    }
  }
  write_file_atomically(path, [&](std::ostream& out) {
    SealingBuffer sealing(*out.rdbuf());
    std::ostream zip(&sealing);
    archive.save_to(zip);
    sealing.finish();
  });
}

CheckpointSeal read_checkpoint_seal(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  HOTLOOP_CHECK(in.is_open(), "checkpoint '", path, "' cannot be opened");
  const auto size = static_cast<uint64_t>(in.tellg());
  const detail::ZipEnd end = detail::find_zip_end(in, size, path);
  CheckpointSeal result;
  if (end.comment.rfind(kSealTag, 0) != 0) {
    // Written before checkpoints were sealed: the zip's own CRC-32s are
    // what can be checked.
    result.problem = detail::check_zip_records(path, end);
    result.intact = result.problem.empty();
    return result;
  }
  result.sealed = true;
  result.format = std::atoll(seal_field(end.comment, "format").c_str());
  result.hotloop_version = seal_field(end.comment, "hotloop");
  result.libtorch_version = seal_field(end.comment, "libtorch");
  result.stored_crc = static_cast<uint32_t>(
      std::strtoul(seal_field(end.comment, "crc32").c_str(), nullptr, 16));
  // Every byte before the comment's length field.
  result.computed_crc =
      detail::crc32_of(in, 0, end.offset + detail::kZipEndRecordSize - 2, path);
  result.intact = result.computed_crc == result.stored_crc;
  if (!result.intact) {
    result.problem = hotloop::detail::str_cat(
        "its checksum says ",
        detail::hex32(result.stored_crc),
        ", its content gives ",
        detail::hex32(result.computed_crc));
  }
  return result;
}

void verify_checkpoint(const std::string& path, std::ostream* notes) {
  const CheckpointSeal s = read_checkpoint_seal(path);
  HOTLOOP_CHECK(
      !s.sealed || s.format <= kFormatVersion,
      path,
      ": written by a newer version (hotloop ",
      s.hotloop_version,
      ", checkpoint format ",
      s.format,
      "; this hotloop ",
      HOTLOOP_VERSION,
      " reads formats up to ",
      kFormatVersion,
      ")");
  HOTLOOP_CHECK(
      s.intact,
      path,
      ": corrupted checkpoint (",
      s.problem,
      s.sealed ? "): the file changed after hotloop wrote it" : ")");
  if (!s.sealed && notes != nullptr) {
    *notes << "note: " << path
           << " carries no checksum (written by an older hotloop); its "
              "records' CRC-32s match, loading it\n";
  }
}

bool marks_int8_model(const std::string& callback_states) {
  return !callback_states.empty() &&
         nlohmann::json::parse(callback_states).contains(kInt8ModelKey);
}

CheckpointSummary describe_checkpoint(const std::string& path) {
  std::error_code ec;
  HOTLOOP_CHECK(
      fs::is_regular_file(path, ec), "checkpoint '", path, "' does not exist");
  CheckpointSummary summary;
  summary.seal = read_checkpoint_seal(path);
  if (!summary.seal.intact) {
    return summary;
  }
  summary.content_read = true;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path, at::kCPU);
    const auto read_int = [&](const std::string& key, int64_t fallback) {
      at::Tensor value;
      return archive.try_read(key, value) ? value.item<int64_t>() : fallback;
    };
    summary.format = read_int("hotloop_checkpoint_version", 0);
    HOTLOOP_CHECK(summary.format > 0, path, ": not a hotloop checkpoint");
    summary.progress.epoch = read_int("epoch", 0);
    summary.progress.global_step = read_int("global_step", 0);
    summary.progress.epoch_batches = read_int("epoch_batches", 0);
    c10::IValue signature;
    if (archive.try_read("model_parameters", signature)) {
      summary.model = parse_signature(signature.toStringRef());
    }
    summary.optimizers = read_int("optimizers", 0);
    summary.schedulers = read_int("schedulers", 0);
    torch::serialize::InputArchive scaler;
    summary.grad_scaler = archive.try_read("grad_scaler", scaler);
    c10::IValue callbacks;
    if (archive.try_read("callbacks", callbacks)) {
      summary.callback_states = callbacks.toStringRef();
      const nlohmann::json states =
          nlohmann::json::parse(summary.callback_states);
      for (const auto& item : states.items()) {
        summary.callbacks.push_back(item.key());
      }
    }
    for (const auto& [name, values] :
         read_doubles(archive, "loop_callback_metrics", 1)) {
      summary.metrics[name] = values[0];
    }
  } catch (...) {
    rethrow_as_load_error(path);
  }
  return summary;
}

TrainingProgress load_checkpoint(
    const std::string& path, torch::nn::Module& model, CheckpointState* state) {
  std::error_code ec;
  HOTLOOP_CHECK(
      fs::is_regular_file(path, ec), "checkpoint '", path, "' does not exist");
  verify_checkpoint(path, &std::cerr);
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
        version.item<int64_t>() >= 1 &&
            version.item<int64_t>() <= kFormatVersion,
        path,
        ": checkpoint format version ",
        version.item<int64_t>(),
        " is not supported (this hotloop reads 1 to ",
        kFormatVersion,
        ")");
    progress.epoch = read_int("epoch", 0);
    progress.global_step = read_int("global_step", 0);
    progress.epoch_batches = read_int("epoch_batches", 0);
    c10::IValue signature;
    const bool signed_model = archive.try_read("model_parameters", signature);
    {
      // compress::save_quantized's files hold an int8 model's records, which
      // no float model matches: say so rather than name a first difference.
      // (An int8 Gpt, made int8 before loading, matches its own file.)
      c10::IValue kept;
      const bool int8 = archive.try_read("callbacks", kept) &&
                        marks_int8_model(kept.toStringRef());
      HOTLOOP_CHECK(
          !int8 || (signed_model && parse_signature(signature.toStringRef()) ==
                                        model_signature(model)),
          path,
          ": an int8 (quantized) checkpoint, not a float model's: load it "
          "with compress::load_quantized, or run it with hotloop test, "
          "predict or generate");
    }
    // LibTorch's load would take the checkpoint's shapes without a word.
    if (signed_model) {
      const auto saved = parse_signature(signature.toStringRef());
      // A pruned model's checkpoint (weight_orig + weight_mask) loads into
      // the same model unpruned: it is reparametrised to match first.
      std::vector<std::string> names;
      for (const auto& entry : saved) {
        names.push_back(entry.first);
      }
      compress::match_pruning(model, names);
      check_same_model(path, saved, model_signature(model));
    }
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    {
      // What a pruned model's forward reads, from the loaded values.
      const at::NoGradGuard no_grad;
      compress::recompute_pruned(model);
    }
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
    // Every process of a data-parallel run draws the same numbers (one
    // seed, batches of one shape), so the stream of the device the writer
    // trained on (rank 0's) continues on the device this process trains
    // on, which on a multi-GPU machine is another one.
    const c10::Device here = device_of(model);
    const int64_t writer = read_int("rng_device", -1);
    const auto devices = static_cast<int64_t>(rng.cuda.size());
    if (here.is_cuda() && writer >= 0 && writer < devices &&
        here.index() != writer && here.index() < devices &&
        rng.cuda[writer].defined()) {
      rng.cuda[here.index()] = rng.cuda[writer];
    }
    set_rng_states(rng);
    c10::IValue callbacks;
    state->callbacks = archive.try_read("callbacks", callbacks)
                           ? callbacks.toStringRef()
                           : std::string();
    state->callback_tensors.clear();
    torch::serialize::InputArchive all;
    if (archive.try_read("callback_tensors", all)) {
      c10::IValue keys;
      all.read("keys", keys);
      const nlohmann::json names = nlohmann::json::parse(keys.toStringRef());
      for (size_t k = 0; k < names.size(); ++k) {
        torch::serialize::InputArchive one;
        all.read(indexed_key("callback", k), one);
        at::Tensor count;
        one.read("count", count);
        std::vector<at::Tensor>& tensors =
            state->callback_tensors[names[k].get<std::string>()];
        for (int64_t i = 0; i < count.item<int64_t>(); ++i) {
          tensors.emplace_back();
          one.read(
              indexed_key("tensor", static_cast<size_t>(i)), tensors.back());
        }
      }
    }
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
    at::Tensor order;
    if (archive.try_read("loader_order", order)) { // since 2026-11-29
      order = order.to(at::kCPU);
      HOTLOOP_CHECK(
          order.dim() == 1 && order.numel() == 2 &&
              order.scalar_type() == at::kLong,
          path,
          ": malformed loader_order record");
      state->loader.order = order.data_ptr<int64_t>()[0];
      state->loader.world_size = order.data_ptr<int64_t>()[1];
    }
  } catch (...) {
    rethrow_as_load_error(path);
  }
  return progress;
}

} // namespace hotloop::train
