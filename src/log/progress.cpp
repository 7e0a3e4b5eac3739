#include "hotloop/log/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace hotloop::log {
namespace {

int percent(double part, double whole) {
  return whole > 0 ? static_cast<int>(std::lround(100 * part / whole)) : 0;
}

} // namespace

std::string epoch_label(int64_t epoch, int64_t max_epochs) {
  return max_epochs > 0
      ? "epoch " + std::to_string(epoch) + "/" + std::to_string(max_epochs)
      : "epoch " + std::to_string(epoch);
}

ProgressBar::ProgressBar(
    std::ostream& out, bool live, int64_t every_n_steps, double refresh)
    : out_(out),
      live_(live),
      every_n_steps_(every_n_steps),
      refresh_(refresh) {}

bool ProgressBar::is_terminal(const std::ostream& out) {
  return &out == &std::cout && ::isatty(STDOUT_FILENO) == 1;
}

void ProgressBar::start_epoch(
    int64_t epoch, int64_t max_epochs, int64_t batches) {
  epoch_ = epoch;
  max_epochs_ = max_epochs;
  batches_ = batches;
  drawn_ = false;
}

std::string ProgressBar::format(
    int64_t batch,
    int64_t samples,
    double loss,
    double lr,
    const StepTimes& times) const {
  constexpr int kWidth = 20;
  const double done = batches_ > 0 ? double(batch) / double(batches_) : 0;
  const int filled = static_cast<int>(done * kWidth);
  const double rate = times.total() > 0 ? samples / times.total() : 0;
  const double eta =
      batch > 0 ? times.total() / batch * double(batches_ - batch) : 0;
  std::ostringstream line;
  line << epoch_label(epoch_, max_epochs_) << " ["
       << std::string(filled, '#') << std::string(kWidth - filled, '-') << "] "
       << batch << "/" << batches_ << "  " << std::fixed << std::setprecision(0)
       << rate << " samples/s"
       << (tokens_per_sample_ > 0
               ? " (" + std::to_string(std::llround(rate * tokens_per_sample_)) +
                     " tokens/s)"
               : std::string())
       << "  ETA " << std::setprecision(0) << eta
       << "s  loss " << std::setprecision(4) << loss << "  lr "
       << std::scientific << std::setprecision(2) << lr << "  time: data "
       << percent(times.data, times.total()) << "% fwd+bwd "
       << percent(times.compute, times.total()) << "%"
       << (times.comm > 0
               ? " comm " + std::to_string(percent(times.comm, times.total())) +
                     "%"
               : std::string())
       << " opt " << percent(times.optimizer, times.total()) << "%";
  return line.str();
}

bool ProgressBar::due(int64_t batch) const {
  if (live_) {
    return !drawn_ || batch >= batches_ ||
           std::chrono::duration<double>(
               std::chrono::steady_clock::now() - last_draw_)
                   .count() >= refresh_;
  }
  return every_n_steps_ > 0 && batch % every_n_steps_ == 0;
}

void ProgressBar::update(
    int64_t batch,
    int64_t samples,
    double loss,
    double lr,
    const StepTimes& times) {
  if (!due(batch)) {
    return;
  }
  if (live_) {
    last_draw_ = std::chrono::steady_clock::now();
    drawn_ = true;
    // Carriage return and clear-to-end-of-line: redraw in place.
    out_ << '\r' << format(batch, samples, loss, lr, times) << "\x1b[K"
         << std::flush;
    return;
  }
  out_ << format(batch, samples, loss, lr, times) << "\n";
}

void ProgressBar::end_epoch() {
  if (live_ && drawn_) {
    out_ << "\r\x1b[K" << std::flush;
  }
  drawn_ = false;
}

} // namespace hotloop::log
