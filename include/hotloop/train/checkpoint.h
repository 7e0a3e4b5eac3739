#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::optim {
class LRScheduler;
} // namespace hotloop::optim

namespace hotloop::train {

class GradScaler;

/// Where training stood when a checkpoint was written.
struct TrainingProgress {
  /// Epochs completed.
  int64_t epoch = 0;
  /// Optimizer steps taken.
  int64_t global_step = 0;
  /// Batches of epoch `epoch` (the one in progress) already trained on; 0
  /// when the checkpoint was written between epochs.
  int64_t epoch_batches = 0;
};

/// Writes `path` so that a crash at any moment leaves either the previous
/// file or the complete new one: the content goes to a temporary file in the
/// same folder (`<name>.tmp.XXXXXX`), is flushed to disk (fsync), then
/// renamed over `path`. The first write into a folder removes what a kill
/// left there: files of that pattern older than the running process.
/// Throws Error naming the path when a step fails.
void write_file_atomically(
    const std::string& path, const std::function<void(std::ostream&)>& write);

/// The states of LibTorch's default generators: the CPU's and each CUDA
/// device's (what seed_everything seeds).
struct RngStates {
  at::Tensor cpu;
  std::vector<at::Tensor> cuda;
};
RngStates get_rng_states();
/// Restores what get_rng_states returned, wherever the state tensors are
/// (a checkpoint loads them onto the model's device); CUDA states of devices
/// that are not present are ignored.
void set_rng_states(const RngStates& states);

/// The Trainer's loop state beyond TrainingProgress, so that a resumed
/// run continues the interrupted epoch's running means and sees the metrics
/// callbacks and schedules watch, exactly as the uninterrupted run would.
struct LoopState {
  /// Running means of the epoch in progress: name -> {sum, weight}.
  std::map<std::string, std::pair<double, double>> epoch_metrics;
  /// The Trainer's callback_metrics.
  std::map<std::string, double> callback_metrics;
};

/// The training loader a checkpoint was written with. A mid-epoch resume
/// skips the batches already trained on, which means the same batches only
/// with the same order: the same seed, batch size and dataset.
struct LoaderFingerprint {
  /// DataLoaderOptions::seed.
  uint64_t seed = 0;
  /// Batches per epoch, after limit_train_batches or overfit_batches.
  int64_t batches_per_epoch = 0;
  int64_t batch_size = 0; // 0 for batch_size = None
  int64_t dataset_size = 0;
  bool shuffle = false;
  /// A digest of the order a sampler or batch sampler of the loader's own
  /// draws (its first epoch); -1 when not recorded (older checkpoints).
  int64_t order = -1;
  /// The processes that shared each epoch; 0 when not recorded.
  int64_t world_size = 0;

  /// Whether the checkpoint recorded one (older ones did not).
  bool known() const {
    return batches_per_epoch > 0;
  }
  bool operator==(const LoaderFingerprint& other) const;
  bool operator!=(const LoaderFingerprint& other) const {
    return !(*this == other);
  }
};

/// The callback-state key that marks an int8 model's checkpoint
/// (compress::save_quantized): float models, init_from and export refuse
/// such files.
inline constexpr const char kInt8ModelKey[] = "int8_model";

/// Whether a checkpoint's callback states (the JSON text saved, empty for
/// none) carry kInt8ModelKey: an int8 model's file.
bool marks_int8_model(const std::string& callback_states);

/// What a checkpoint holds besides the model; each part is optional.
struct CheckpointState {
  std::vector<torch::optim::Optimizer*> optimizers;
  std::vector<optim::LRScheduler*> schedulers;
  /// Saved only when enabled.
  GradScaler* scaler = nullptr;
  TrainingProgress progress;
  /// The callbacks' state as JSON text, `{state_key: state}`; empty: none.
  std::string callbacks;
  /// The tensors of the callbacks' state (Callback::state_tensors) by
  /// state key; callbacks without any are left out.
  std::map<std::string, std::vector<at::Tensor>> callback_tensors;
  LoopState loop;
  /// Saved when known().
  LoaderFingerprint loader;
};

/// Saves the model's parameters and buffers, `state` and the RNG states of
/// the CPU and of every CUDA device to `path`, atomically.
void save_checkpoint(
    const std::string& path,
    torch::nn::Module& model,
    const CheckpointState& state = {});

/// What the seal at the end of a checkpoint file says: save_checkpoint
/// ends every file with a CRC-32 of its content, the checkpoint format and
/// the hotloop and LibTorch versions that wrote it.
struct CheckpointSeal {
  /// false for a checkpoint written before files were sealed.
  bool sealed = false;
  /// The checksum matches the content; without a seal, every zip record
  /// matches its CRC-32 and lies where the zip's directory says.
  bool intact = false;
  /// Why it is not intact, in one phrase ("its checksum says …, its content
  /// gives …", "record 'archive/data.pkl' fails its CRC-32 check (…)").
  std::string problem;
  int64_t format = 0;
  std::string hotloop_version;
  std::string libtorch_version;
  uint32_t stored_crc = 0;
  uint32_t computed_crc = 0;
};

/// Reads `path`'s seal and checksums its content, without loading it; a
/// file without a seal has its zip records' CRC-32s checked instead.
/// Throws Error naming the file when it cannot be read or has no zip end
/// record at its end (truncated).
CheckpointSeal read_checkpoint_seal(const std::string& path);

/// Throws Error naming `path` and "corrupted" when its checksum does not
/// match, "written by a newer version" when its format is newer than this
/// hotloop reads, or "truncated" (see read_checkpoint_seal). A checkpoint
/// without a seal passes when its zip records check, with a note to
/// `notes` when given.
void verify_checkpoint(const std::string& path, std::ostream* notes);

/// What a checkpoint holds, for `hotloop checkpoint`.
struct CheckpointSummary {
  CheckpointSeal seal;
  /// Whether the archive was read. A file that is not intact is not:
  /// LibTorch's reader makes no promise about damaged archives (one changed
  /// byte made its unpickler throw std::out_of_range, another free memory
  /// it never allocated), and the rest of this summary then stays empty.
  bool content_read = false;
  /// The format written inside the archive.
  int64_t format = 0;
  TrainingProgress progress;
  /// Parameters then buffers as "name" and "[shape]" (format 2 on).
  std::vector<std::pair<std::string, std::string>> model;
  int64_t optimizers = 0;
  int64_t schedulers = 0;
  bool grad_scaler = false;
  /// The state keys of the callbacks whose state it carries.
  std::vector<std::string> callbacks;
  /// Their states as JSON text, `{state_key: state}`; empty: none.
  std::string callback_states;
  /// The Trainer's callback_metrics when it was written.
  std::map<std::string, double> metrics;
};

/// Reads `path` (onto the CPU) without a model: its seal and content.
/// Throws Error naming the file when it is missing, unreadable or not a
/// hotloop checkpoint; a checksum or record that does not match is reported
/// in `seal`, not thrown, and the content is then left unread.
CheckpointSummary describe_checkpoint(const std::string& path);

/// Restores the model from what save_checkpoint wrote and returns the saved
/// progress. With `state`, also restores its optimizers and schedulers
/// (when it has any: built the same way, as many as were saved), its
/// scaler, the CPU RNG
/// state and the CUDA ones for the devices present, and fills its progress,
/// callbacks and loop. Throws Error naming `path` when the file is missing,
/// is not a hotloop checkpoint, or does not match the model or the number
/// of optimizers and schedules. Verifies the file first
/// (verify_checkpoint, notes to std::cerr), and throws Error naming the
/// first parameter or buffer whose name or shape differs from the model's
/// (LibTorch would silently take the checkpoint's shapes).
TrainingProgress load_checkpoint(
    const std::string& path,
    torch::nn::Module& model,
    CheckpointState* state = nullptr);

} // namespace hotloop::train
