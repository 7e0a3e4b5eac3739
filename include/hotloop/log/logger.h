#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace hotloop::log {

/// Where a Trainer sends metrics (Lightning's Logger). Implementations
/// write them somewhere: a CSV file, TensorBoard event files. Called on the
/// training thread only; under several processes only rank 0 has loggers.
class Logger {
 public:
  virtual ~Logger() = default;

  /// Records `metrics` (name -> value) at optimizer step `step`.
  virtual void log_metrics(
      const std::map<std::string, double>& metrics, int64_t step) = 0;

  /// The run goes on from a checkpoint written after optimizer step
  /// `step`: records of later steps that an interrupted attempt left in the
  /// run folder are dropped, so that it holds one history (TensorBoard's
  /// purge on restart). Called once, before any record of the new attempt.
  virtual void resume_at(int64_t step) {}

  /// Records the run's settings (name -> value as text) and, when known,
  /// the final metrics they led to.
  virtual void log_hyperparams(
      const std::map<std::string, std::string>& params,
      const std::map<std::string, double>& metrics) {}

  /// Writes buffered records out (after each epoch and on a stop signal).
  virtual void flush() {}

  /// The run ended with `status`: "success", "interrupted" or "failed".
  virtual void finalize(const std::string& status) {
    flush();
  }
};

} // namespace hotloop::log
