#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace hotloop::log {

/// Where the training time of an epoch went so far, in seconds.
struct StepTimes {
  /// Waiting for the loader's next batch.
  double data = 0;
  /// Forward and backward.
  double compute = 0;
  /// Waiting for the other processes' gradients (data parallelism).
  double comm = 0;
  /// Unscale, clip, optimizer and schedule steps.
  double optimizer = 0;
  double total() const {
    return data + compute + comm + optimizer;
  }
};

/// `epoch N/M`, or `epoch N` when `max_epochs` is -1 (no limit): how the
/// bar and the epoch lines name an epoch (from 1).
std::string epoch_label(int64_t epoch, int64_t max_epochs);

/// The training progress display: on a terminal a live bar redrawn in place
/// (at most every `refresh` seconds); elsewhere (a log file, a pipe) one
/// line every `every_n_steps` batches. Both show batch/total, samples/s,
/// ETA, the running loss, the learning rate and where step time goes.
/// Not thread-safe.
class ProgressBar {
 public:
  ProgressBar(
      std::ostream& out,
      bool live,
      int64_t every_n_steps,
      double refresh = 0.1);

  /// Whether `out` is the process's standard output and that is a terminal.
  static bool is_terminal(const std::ostream& out);

  /// Starts epoch `epoch` (from 1) of `max_epochs` (-1: no limit),
  /// `batches` long.
  void start_epoch(int64_t epoch, int64_t max_epochs, int64_t batches);

  /// Tokens per sample of a sequence model: the rate is then also shown in
  /// tokens/s. 0 (the default): samples/s only.
  void set_tokens_per_sample(int64_t tokens) {
    tokens_per_sample_ = tokens;
  }

  /// Whether update(batch, ...) would draw: callers skip computing what it
  /// shows otherwise (reading a GPU loss waits for the device).
  bool due(int64_t batch) const;

  /// After batch `batch` (1-based) of `samples` samples in all so far;
  /// draws only when due(batch).
  void update(
      int64_t batch,
      int64_t samples,
      double loss,
      double lr,
      const StepTimes& times);

  /// Ends the epoch's display (clearing the live bar) before the epoch line.
  void end_epoch();

  /// The text of one update, as shown: exposed for tests.
  std::string format(
      int64_t batch,
      int64_t samples,
      double loss,
      double lr,
      const StepTimes& times) const;

 private:
  std::ostream& out_;
  bool live_;
  int64_t every_n_steps_;
  double refresh_;
  int64_t epoch_ = 0, max_epochs_ = 0, batches_ = 0;
  int64_t tokens_per_sample_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
};

} // namespace hotloop::log
