#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace hotloop::log {

/// Seconds since the Unix epoch with sub-second precision (Python's
/// `time.time()`): the wall time events get when none is given.
double unix_time();

/// One hyperparameter value as TensorBoard's HParams tab shows it: a number,
/// a boolean or a string. Implicit from any arithmetic type (kept as double),
/// `bool` and text, so that
/// `{{"lr", 1e-3}, {"batch_size", 64}, {"amp", true}, {"optim", "adam"}}`
/// reads as the Python dict would. (A bare `std::variant` would turn a string
/// literal into `bool` and refuse an `int` variable.)
class HParamValue {
 public:
  using Variant = std::variant<double, bool, std::string>;

  /// Any integer or floating value, kept as a double (TensorBoard's
  /// DATA_TYPE_FLOAT64).
  template <
      typename Number,
      std::enable_if_t<
          std::is_arithmetic_v<Number> && !std::is_same_v<Number, bool>,
          int> = 0>
  HParamValue(Number number) : value_(static_cast<double>(number)) {}
  /// DATA_TYPE_BOOL.
  HParamValue(bool flag) : value_(flag) {}
  /// DATA_TYPE_STRING.
  HParamValue(std::string text) : value_(std::move(text)) {}
  /// DATA_TYPE_STRING (not bool, which a string literal would become in a
  /// bare variant).
  HParamValue(const char* text) : value_(std::string(text)) {}

  /// The value held: a double, a bool or a std::string.
  const Variant& value() const {
    return value_;
  }

 private:
  Variant value_;
};

/// How a run ended, as TensorBoard's HParams plugin records it (its
/// api.proto `Status`).
enum class SessionStatus {
  kUnknown = 0,
  kSuccess = 1,
  kFailure = 2,
  kRunning = 3
};

/// Writes TensorBoard event files, like `torch.utils.tensorboard.SummaryWriter`
/// with the same record layout and summary messages, encoded here without a
/// protobuf dependency.
///
/// Each record is appended to a buffered file: `flush()` (or the destructor)
/// makes it visible to TensorBoard. Every `add_*` throws `hotloop::Error`
/// naming the tag for bad input, before writing anything, and naming the file
/// when a write fails (which may leave a torn last record; TensorBoard reads
/// the records before it). Not thread-safe: call it from one thread.
class SummaryWriter {
 public:
  /// Creates `log_dir` (and its parents) and opens
  /// `<log_dir>/events.out.tfevents.<unix seconds, 10 digits>.<hostname>.
  /// <pid>.<counter><filename_suffix>` (the name TensorBoard globs for; the
  /// counter tells apart writers of one process), then writes the
  /// file-version event `brain.Event:2`.
  /// Throws `hotloop::Error` naming the path when it can't.
  explicit SummaryWriter(
      const std::string& log_dir, const std::string& filename_suffix = "");

  /// Flushes and closes the file; never throws.
  ~SummaryWriter();

  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  /// A point of the scalar series `tag`, stored as float32 `simple_value`
  /// (PyTorch's default).
  void add_scalar(
      const std::string& tag,
      double value,
      int64_t step,
      double wall_time = unix_time());

  /// A histogram of `values` (any shape, floating or integer dtype, any
  /// device), bucketed as `add_histogram(bins="tensorflow")` does: numpy
  /// histogram counts over PyTorch's default bucket edges (0 and ±1e-12 *
  /// 1.1^k below 1e20), trimmed to the occupied range plus one empty bucket on
  /// the left; min, max, num, sum and sum_squares in float64.
  /// Throws for an empty tensor, non-finite values, or values all beyond
  /// ±1e20 (outside every bucket).
  /// The histogram is counted on the tensor's device and read back once per
  /// call (its counts and sums); on CUDA, ATen's bincount also reads back
  /// its input's min and max, two more waits per 2^24 values.
  void add_histogram(
      const std::string& tag,
      const at::Tensor& values,
      int64_t step,
      double wall_time = unix_time());

  /// As add_histogram, but `values` holding a non-finite value (a float16
  /// step that overflowed, a diverged weight) write nothing and give false;
  /// the same read-backs.
  bool add_histogram_if_finite(
      const std::string& tag,
      const at::Tensor& values,
      int64_t step,
      double wall_time = unix_time());

  /// `text` (UTF-8, Markdown) in TensorBoard's Text tab, as `add_text`
  /// writes it: a string tensor of shape [1] under tag `<tag>/text_summary`
  /// with the "text" plugin's metadata.
  void add_text(
      const std::string& tag,
      const std::string& text,
      int64_t step,
      double wall_time = unix_time());

  /// image: [C, H, W] with C = 1 (gray), 3 (RGB) or 4 (RGBA); uint8 in
  /// 0..255, or floating in [0, 1], scaled by 255 in float32, clamped to
  /// [0, 255] and truncated to uint8 as `add_image` does (NaN gives 0).
  /// Stored as PNG in a `Summary.Image` with colorspace C (gray stays
  /// one-channel, where PyTorch would expand it to RGB; it looks the same).
  /// Throws naming the tag and the shape or dtype for anything else.
  void add_image(
      const std::string& tag,
      const at::Tensor& image,
      int64_t step,
      double wall_time = unix_time());

  /// What `add_hparams(hparams, metrics)` writes, into this writer's file
  /// instead of a sub-run folder: three "hparams" plugin summaries (plugin
  /// data version 0) tagged `_hparams_/experiment` (hparam names and types,
  /// metric names), `_hparams_/session_start_info` (the values) and
  /// `_hparams_/session_end_info` (`status`), then, with `metric_scalars`,
  /// each metric as a scalar under its own name (the HParams tab shows a
  /// metric's latest scalar; a metric already logged as a scalar needs no
  /// second point). All at `step`, in name order, with the current wall
  /// time. Booleans are written as `bool_value` /
  /// DATA_TYPE_BOOL; PyTorch's `hparams()` tests `isinstance(v, int)` first
  /// and so writes Python bools as numbers 1/0 (DATA_TYPE_FLOAT64).
  void add_hparams(
      const std::map<std::string, HParamValue>& hparams,
      const std::map<std::string, double>& metrics,
      int64_t step = 0,
      SessionStatus status = SessionStatus::kSuccess,
      bool metric_scalars = true);

  /// A SessionLog START event at `step`: TensorBoard then drops what the
  /// folder's earlier event files hold at `step` and after (its purge of
  /// orphaned data when a run restarts from a checkpoint).
  void add_session_start(int64_t step, double wall_time = unix_time());

  /// Writes buffered records to the file (fflush; no fsync).
  void flush();

  /// The event file's path.
  const std::string& path() const {
    return path_;
  }

 private:
  void write_summary_value(
      const std::string& value, int64_t step, double wall_time);
  void write_event(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

/// `torchvision.utils.make_grid(images, nrow, padding, pad_value=pad_value)`
/// (no normalization). images: [N, C, H, W], any dtype; one-channel images
/// become three-channel. Returns [C', H', W'] of the input's dtype and
/// device with min(nrow, N) images per row, `padding` pixels of `pad_value`
/// around and between them: H' = ceil(N / min(nrow, N)) * (H + padding) +
/// padding, likewise W'. A single image comes back without padding, as in
/// torchvision.
at::Tensor make_image_grid(
    const at::Tensor& images,
    int64_t nrow = 8,
    int64_t padding = 2,
    double pad_value = 0);

namespace detail {
/// CRC-32C (Castagnoli) of `size` bytes; exposed for tests.
uint32_t crc32c(const void* data, size_t size);
/// The TFRecord checksum: crc32c rotated right by 15 bits plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);
} // namespace detail

} // namespace hotloop::log
