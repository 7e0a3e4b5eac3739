// `hotloop tune`: the user's own run, measured in short windows with one
// setting varied at a time and then the winners together; a table, a
// verdict per strategy and tuned.yaml.

#include "commands.h"

#include "hotloop/core/error.h"
#include "hotloop/core/signals.h"
#include "hotloop/core/threads.h"
#include "hotloop/models/resnet.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/device.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>
#include <thread>

namespace hotloop::cli {

const char* const kTuneFlags[] = {
    "budget", "output", "repeats", "loss_tolerance", "keep_windows", nullptr};

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Settings = std::vector<std::pair<std::string, std::string>>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The step profile's steady rate leaves out this many steps.
constexpr int64_t kWarmupSteps = 10;
// A gain smaller than this is never worth a change, however quiet the
// machine.
constexpr double kMinimumGain = 0.01;
// The given config runs again after this many candidate windows.
constexpr size_t kBaselineEvery = 3;

// What one window measured.
struct Measurement {
  bool ok = false;
  std::string failure;
  /// Training samples per second after the warm-up, all processes.
  double samples_per_s = 0;
  /// The mean training loss over the window.
  double loss = kNaN;
  /// Seconds of validation (validation windows).
  double validation_s = 0;
  /// The fit process's peak resident set; 0 for several processes.
  int64_t peak_bytes = 0;
  /// Seconds the process ran, and the fit within it.
  double process_s = 0;
  double fit_s = 0;
  int64_t steps = 0;
  /// The window's place in the session (0, 1, ...), to pair it with the
  /// given config's windows around it.
  int64_t sequence = 0;
};

// One setting (or a few that go together) tried against the given config.
struct Candidate {
  std::string strategy;
  Settings settings;
  /// A bigger batch, other processes: not the same optimization.
  bool changes_recipe = false;
  /// Optimizer steps of its windows (0: the plan's).
  int64_t steps = 0;
  std::vector<Measurement> runs;
};

double median(std::vector<double> values) {
  if (values.empty()) {
    return kNaN;
  }
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Half the range of `values` over their median: the +- the table shows.
double noise(const std::vector<double>& values) {
  if (values.size() < 2) {
    return 0;
  }
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const double mid = median(values);
  return mid > 0 ? (*hi - *lo) / (2 * mid) : 0;
}

// `member` of the windows that ran.
template <typename T>
std::vector<double> field(
    const std::vector<Measurement>& runs, T Measurement::*member) {
  std::vector<double> values;
  for (const Measurement& run : runs) {
    if (run.ok) {
      values.push_back(static_cast<double>(run.*member));
    }
  }
  return values;
}

std::string describe(const Settings& settings) {
  std::string text;
  for (const auto& [key, value] : settings) {
    text += (text.empty() ? "" : " ") + key + "=" + value;
  }
  return text.empty() ? "(the given config)" : text;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status));
  }
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

// "5m", "90s", "1h", "300": seconds.
double parse_duration(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  const double scale = unit.empty() || unit == "s" ? 1
                       : unit == "m"               ? 60
                       : unit == "h"               ? 3600
                                                   : -1;
  HOTLOOP_CHECK_AS(
      ConfigError,
      end != text.c_str() && scale > 0 && std::isfinite(value) && value > 0,
      "--budget: expected a duration such as 5m, 90s or 300, got '",
      text,
      "'");
  return value * scale;
}

// Whether the CPU has bfloat16 instructions, which LibTorch's bf16 kernels
// need to be faster than float32 ones.
bool cpu_has_bf16() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) == 0) {
      return line.find(" avx512_bf16") != std::string::npos ||
             line.find(" amx_bf16") != std::string::npos;
    }
  }
  return false;
}

// Runs `hotloop fit` windows of the given config in child processes.
class Windows {
 public:
  Windows(std::string config_path, fs::path workdir, double timeout_s)
      : config_path_(std::move(config_path)),
        workdir_(std::move(workdir)),
        timeout_s_(timeout_s) {}

  // A training window: `steps` optimizer steps, no validation, nothing
  // kept but summary.json.
  Measurement train(const Settings& settings, int64_t steps) {
    Settings args = settings;
    args.insert(
        args.end(),
        {{"trainer.max_steps", std::to_string(steps)},
         {"trainer.max_epochs", "100000"},
         {"trainer.limit_val_batches", "0"}});
    return run(args);
  }

  // A validation window: one training step, then a whole validation.
  Measurement validate(const Settings& settings) {
    Settings args = settings;
    args.insert(
        args.end(),
        {{"trainer.max_steps", "1"},
         {"trainer.max_epochs", "1"},
         {"trainer.limit_train_batches", "1"},
         {"trainer.limit_val_batches", "-1"}});
    return run(args);
  }

  // The batch-size finder's answer from `from` up to `trials` doublings.
  int64_t largest_batch(int64_t from, int64_t trials, std::string* log) {
    const Measurement m =
        run({{"tuner.batch_size", "power"},
             {"tuner.init_val", std::to_string(from)},
             {"tuner.max_trials", std::to_string(trials)},
             {"tuner.steps_per_trial", "2"},
             {"trainer.max_steps", "1"},
             {"trainer.limit_val_batches", "0"}},
            log);
    const std::string tag = "scale_batch_size: batch size ";
    const size_t at = log->rfind(tag);
    return m.ok && at != std::string::npos
               ? std::atoll(log->c_str() + at + tag.size())
               : 0;
  }

  bool interrupted() const {
    return interrupted_;
  }
  /// A window running longer is stopped and counts as failed.
  void set_timeout(double seconds) {
    timeout_s_ = seconds;
  }
  /// The end of --budget: a window still running then is stopped (and
  /// counts as failed), and none starts after it.
  void set_deadline(Clock::time_point deadline) {
    deadline_ = deadline;
  }

 private:
  Measurement run(const Settings& settings, std::string* log_text = nullptr) {
    const int64_t index = count_++;
    Measurement m;
    m.sequence = index;
    if (Clock::now() >= deadline_) {
      m.failure = "not started: --budget spent";
      return m;
    }
    const fs::path root = workdir_ / ("w" + std::to_string(index));
    const fs::path log = workdir_ / ("w" + std::to_string(index) + ".log");
    std::vector<std::string> args = {
        "hotloop",
        "fit",
        "--config=" + config_path_,
        "--trainer.default_root_dir=" + root.string(),
        "--trainer.name=window",
        "--trainer.num_sanity_val_steps=0",
        "--trainer.enable_checkpointing=false",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.min_epochs=0",
        "--trainer.max_time=0",
        "--trainer.fast_dev_run=0",
        "--trainer.profiler=",
        "--early_stopping.enabled=false",
        "--tuner.batch_size=",
        "--tuner.lr_find=false"};
    for (const auto& [key, value] : settings) {
      args.push_back("--" + key + "=" + value);
    }
    // Everything the child needs is made before fork: between fork and
    // exec a child of a threaded process may only make plain system calls.
    std::vector<char*> argv;
    for (std::string& arg : args) {
      argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    HOTLOOP_CHECK(fd >= 0, "hotloop tune: cannot write ", log.string());
    const auto start = Clock::now();
    int status = 0;
    struct rusage usage {};
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
      ::execv("/proc/self/exe", argv.data());
      ::_exit(127);
    }
    ::close(fd);
    HOTLOOP_CHECK(pid > 0, "hotloop tune: cannot start a window: fork failed");
    bool timed_out = false;
    bool cut = false;
    for (;;) {
      const pid_t done = ::wait4(pid, &status, WNOHANG, &usage);
      if (done == pid || (done < 0 && errno != EINTR)) {
        break;
      }
      const double elapsed =
          std::chrono::duration<double>(Clock::now() - start).count();
      if (!timed_out && !cut && elapsed > timeout_s_) {
        ::kill(pid, SIGKILL);
        timed_out = true;
      }
      if (!timed_out && !cut && Clock::now() > deadline_) {
        ::kill(pid, SIGKILL);
        cut = true;
      }
      if (StopSignalGuard::received() != 0) {
        ::kill(pid, SIGTERM);
        interrupted_ = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    m.process_s = std::chrono::duration<double>(Clock::now() - start).count();
    std::ifstream in(log);
    const std::string text(std::istreambuf_iterator<char>(in), {});
    if (log_text != nullptr) {
      *log_text = text;
    }
    if (cut) {
      m.failure = "cut at the end of --budget";
      return m;
    }
    if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      // The error line the window printed, or its last line.
      std::string last = text.substr(0, text.find_last_not_of('\n') + 1);
      const size_t error = last.rfind("error: ");
      last = error != std::string::npos
                 ? last.substr(error, last.find('\n', error) - error)
                 : last.substr(last.rfind('\n') + 1);
      m.failure = timed_out ? "stopped after " +
                                  std::to_string(static_cast<int>(timeout_s_)) +
                                  " s, four times the given config's window"
                            : describe_status(status) +
                                  (last.empty() ? "" : ": " + last);
      return m;
    }
    const fs::path summary_path =
        root / "window" / "version_0" / "summary.json";
    std::ifstream summary_file(summary_path);
    const nlohmann::json summary =
        nlohmann::json::parse(summary_file, nullptr, false);
    if (!summary.is_object()) {
      m.failure = "no summary.json";
      return m;
    }
    const auto& profile = summary.at("profile");
    const double world = summary.value("world_size", 1.0);
    m.ok = true;
    m.samples_per_s = profile.value("steady_samples_per_s", 0.0) * world;
    m.validation_s = profile.value("validation", 0.0);
    m.loss =
        summary.contains("train_loss") && summary.at("train_loss").is_number()
            ? summary.at("train_loss").get<double>()
            : kNaN;
    m.fit_s = summary.value("wall_s", 0.0);
    m.steps = summary.value("steps", int64_t{0});
    m.peak_bytes = world > 1 ? 0 : static_cast<int64_t>(usage.ru_maxrss) * 1024;
    return m;
  }

  std::string config_path_;
  fs::path workdir_;
  double timeout_s_;
  Clock::time_point deadline_ = Clock::time_point::max();
  int64_t count_ = 0;
  bool interrupted_ = false;
};

// Prints the progress line: in place on a terminal, one line per window
// elsewhere.
class ProgressLine {
 public:
  explicit ProgressLine(std::ostream& out)
      : out_(out), tty_(&out == &std::cout && ::isatty(STDOUT_FILENO) == 1) {}
  void show(const std::string& text) {
    if (tty_) {
      out_ << "\r\033[K" << text << std::flush;
    } else {
      out_ << text << "\n";
    }
  }
  void clear() {
    if (tty_) {
      out_ << "\r\033[K" << std::flush;
    }
  }

 private:
  std::ostream& out_;
  bool tty_;
};

// The whole tuning session.
class Tuner {
 public:
  Tuner(
      const ParsedArgs& args,
      Windows& windows,
      double budget_s,
      int64_t repeats,
      double tolerance,
      std::ostream& out)
      : config_(to_fit_config(args.config)),
        windows_(windows),
        budget_s_(budget_s),
        repeats_(repeats),
        tolerance_(tolerance),
        progress_(out),
        start_(Clock::now()) {
    cuda_ = train::resolve_device(
                config_.trainer.accelerator(), config_.trainer.devices())
                .is_cuda();
    cores_ = hardware_threads();
    // Windows end a little before the budget does: the verdicts, the table
    // and tuned.yaml come after the last one.
    reserve_s_ = std::min(2.0, 0.02 * budget_s_);
    windows_.set_deadline(
        start_ + std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double>(budget_s_ - reserve_s_)));
  }

  /// Seconds since the session started.
  double seconds() const {
    return elapsed();
  }

  // Measures everything; returns the settings to write.
  Settings run() {
    baseline_.strategy = "given";
    measure(
        baseline_,
        "sizing the windows on the given config",
        1,
        kWarmupSteps + 20);
    HOTLOOP_CHECK_AS(
        ConfigError,
        baseline_.runs.front().ok ||
            baseline_.runs.front().failure != "cut at the end of --budget",
        "--budget ",
        static_cast<int64_t>(std::ceil(budget_s_)),
        " s is too small to compare anything on this config: one window of ",
        kWarmupSteps + 20,
        " steps of the given config did not finish within it");
    HOTLOOP_CHECK(
        baseline_.runs.front().ok,
        "hotloop tune: the given config does not train: ",
        baseline_.runs.front().failure);
    plan();
    baseline_.runs.clear(); // the sizing window was shorter
    add_candidates();
    // Each strategy's first candidate, then each one's second, ...: a
    // short budget still sees every strategy, those that pay most often
    // first.
    static const std::vector<std::string> kPriority = {
        "num_threads",
        "ddp",
        "num_workers",
        "batch_size",
        "channels_last",
        "pin_memory",
        "cuda_graphs",
        "precision",
        "activation_checkpointing"};
    std::vector<Candidate*> order;
    for (size_t round = 0;
         order.size() < candidates_.size() && round < candidates_.size();
         ++round) {
      for (const std::string& strategy : kPriority) {
        size_t seen = 0;
        for (Candidate& c : candidates_) {
          if (c.strategy == strategy && seen++ == round) {
            order.push_back(&c);
          }
        }
      }
    }
    // As many candidates as the budget's training share can measure
    // repeats_ times each, with the given config's windows between them, in
    // the order above; the rest are named as not measured, rather than all
    // of them measured once and none judged.
    const auto window_of = [&](const Candidate& c) {
      const double steps = static_cast<double>(c.steps > 0 ? c.steps : steps_);
      return startup_s_ +
          (window_s_ - startup_s_) * steps / static_cast<double>(steps_);
    };
    const double available = budget_s_ * 0.75 - elapsed() - window_s_;
    double round_s = 0;
    size_t fits = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const double with = round_s + window_of(*order[i]) +
          ((i + 1) % kBaselineEvery == 0 ? window_s_ : 0);
      if (static_cast<double>(repeats_) * (with + window_s_) > available) {
        break;
      }
      round_s = with;
      fits = i + 1;
    }
    for (size_t i = fits; i < order.size(); ++i) {
      skipped_.push_back(describe(order[i]->settings));
    }
    order.resize(fits);
    // Every candidate once per repeat, and the given config before, after
    // and between every few of them: each window is compared with the given
    // config's windows around it, which cancels the machine's drift.
    std::vector<Candidate*> schedule = {&baseline_};
    for (int64_t r = 0; r < repeats_; ++r) {
      for (size_t i = 0; i < order.size(); ++i) {
        schedule.push_back(order[i]);
        if ((i + 1) % kBaselineEvery == 0 || i + 1 == order.size()) {
          schedule.push_back(&baseline_);
        }
      }
    }
    run_schedule(schedule, "");
    for (const Candidate* c : order) {
      if (c->runs.size() < 2) {
        skipped_.push_back(describe(c->settings));
      }
    }
    measure_validation();
    HOTLOOP_CHECK(!windows_.interrupted(), "hotloop tune: interrupted");
    decide();
    progress_.clear();
    return chosen_;
  }

  void print(std::ostream& out) const;
  // Comment lines for tuned.yaml.
  std::string header() const;

 private:
  double elapsed() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

  void measure(
      Candidate& c, const std::string& what, int64_t times, int64_t steps) {
    for (int64_t r = 0; r < times && !windows_.interrupted(); ++r) {
      show(what, r + 1, times);
      c.runs.push_back(windows_.train(c.settings, steps));
    }
  }

  void show(const std::string& what, int64_t run, int64_t of) {
    std::ostringstream line;
    line << "tune: " << what << " (run " << run << "/" << of << ", "
         << static_cast<int>(elapsed()) << " s of "
         << static_cast<int>(budget_s_) << ")";
    progress_.show(line.str());
  }

  // Runs the windows in order while `budget_share` of the budget lasts (by
  // default a quarter is kept for the validation windows and the winners
  // together), always ending on one of the given config's.
  void run_schedule(
      const std::vector<Candidate*>& schedule,
      const std::string& tag,
      double budget_share = 0.75) {
    const auto total = static_cast<int64_t>(schedule.size());
    // The given config runs first, and then only after a candidate ran:
    // its windows are there to compare the candidates' with.
    bool candidate_since_baseline = true;
    for (int64_t i = 0; i < total && !windows_.interrupted(); ++i) {
      Candidate& c = *schedule[i];
      const bool given = &c == &baseline_;
      // A candidate's window within its share of the budget; the given
      // config's (what candidates are compared with) within the whole.
      if (over_budget(c, given ? 1.0 : budget_share)) {
        continue;
      }
      if (given && !candidate_since_baseline) {
        continue;
      }
      candidate_since_baseline = !given;
      show(
          tag + (&c == &baseline_ ? "the given config" : describe(c.settings)),
          i + 1,
          total);
      c.runs.push_back(
          windows_.train(c.settings, c.steps > 0 ? c.steps : steps_));
    }
  }

  // A candidate's windows over the given config's around each: the median
  // ratio and the ratios' spread; for the given config, each of its
  // windows over its neighbours'.
  struct Ratios {
    std::vector<double> values;
    double median = kNaN;
    double noise = 0;
  };
  Ratios ratios(const Candidate& c) const {
    std::vector<const Measurement*> base;
    for (const Measurement& m : baseline_.runs) {
      if (m.ok) {
        base.push_back(&m);
      }
    }
    Ratios out;
    for (const Measurement& m : c.runs) {
      if (!m.ok) {
        continue;
      }
      const Measurement* before = nullptr;
      const Measurement* after = nullptr;
      for (const Measurement* b : base) {
        if (b->sequence < m.sequence) {
          before = b;
        } else if (b->sequence > m.sequence && after == nullptr) {
          after = b;
        }
      }
      if (&c == &baseline_) {
        if (before == nullptr || after == nullptr) {
          continue; // the first and last have one neighbour
        }
      }
      double reference = 0;
      int n = 0;
      for (const Measurement* b : {before, after}) {
        if (b != nullptr) {
          reference += b->samples_per_s;
          ++n;
        }
      }
      if (n > 0 && reference > 0) {
        out.values.push_back(m.samples_per_s / (reference / n));
      }
    }
    out.median = median(out.values);
    out.noise = noise(out.values);
    return out;
  }

  // Sizes the windows (and, when the budget is short, the repeats) from
  // the first one: the given config and about ten candidates, the winners
  // together and four validation windows, each repeated.
  void plan() {
    const Measurement& first = baseline_.runs.front();
    const double per_step =
        first.fit_s / std::max<double>(static_cast<double>(first.steps), 1);
    startup_s_ = std::max(first.process_s - first.fit_s, 0.0);
    const double left = budget_s_ - elapsed();
    const auto steps_for = [&](int64_t repeats) {
      const double windows = static_cast<double>(repeats) * 16.0;
      return static_cast<int64_t>(
          (left / windows - startup_s_) / std::max(per_step, 1e-6));
    };
    if (repeats_ > 2 && steps_for(repeats_) < kWarmupSteps + 20) {
      repeats_ = 2; // fewer repeats before shorter windows
    }
    steps_ = std::clamp<int64_t>(
        steps_for(repeats_), kWarmupSteps + 20, kWarmupSteps + 300);
    window_s_ = startup_s_ + per_step * static_cast<double>(steps_);
    windows_.set_timeout(4 * window_s_ + 20);
    // The least that compares anything: the batch-size search (two steps
    // at up to 8x the batch, a process each trial) and one strategy's two
    // windows between the given config's three, within the three quarters
    // of the budget the training windows get.
    const double shortest =
        startup_s_ + per_step * static_cast<double>(kWarmupSteps + 20);
    finder_s_ = 3 * startup_s_ + per_step * 2 * (2 + 4 + 8);
    const double needed = (elapsed() + finder_s_ + 5 * shortest) / 0.75;
    if (needed > budget_s_) {
      std::ostringstream why;
      why << "--budget " << static_cast<int64_t>(std::ceil(budget_s_))
          << " s is too small to compare anything on this config: a window of "
          << kWarmupSteps + 20 << " steps takes " << std::fixed
          << std::setprecision(1) << shortest << " s here (measured), and one "
          << "strategy against the given config takes 5 windows and a "
          << "batch-size search: use --budget "
          << static_cast<int64_t>(std::ceil(needed / 10) * 10) << "s or more";
      throw ConfigError(why.str());
    }
  }

  // Whether one more window of `c` would take the session past this share
  // of the budget.
  bool over_budget(const Candidate& c, double share) const {
    const double steps = static_cast<double>(c.steps > 0 ? c.steps : steps_);
    const double window = startup_s_ + (window_s_ - startup_s_) * steps /
                                           static_cast<double>(steps_);
    const double limit =
        share >= 1 ? budget_s_ - reserve_s_ : budget_s_ * share;
    return elapsed() + window > limit;
  }

  void add(
      const std::string& strategy,
      Settings settings,
      bool changes_recipe = false,
      int64_t steps = 0) {
    for (const Candidate& c : candidates_) {
      if (c.settings == settings) {
        return;
      }
    }
    candidates_.push_back(
        Candidate{strategy, std::move(settings), changes_recipe, steps, {}});
  }

  void add_candidates();
  void measure_validation();
  void decide();
  // Why the given config cannot try trainer.cuda_graphs (what
  // OptimizationStep refuses); empty when it can.
  std::string graphable() const {
    const FitConfig& c = config_;
    const std::string& optimizer = c.optimizer.name;
    if (c.trainer.cuda_graphs()) {
      return "already on";
    }
    if (c.strategy == "ddp") {
      return "not with trainer.strategy=ddp";
    }
    const std::string conflict = train::cuda_graphs_conflict(c.trainer);
    if (!conflict.empty()) {
      return conflict;
    }
    if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw") {
      return "optimizer.name=" + optimizer + " has no graph-safe step";
    }
    return "";
  }

  // The best candidate of `strategy`, if any beats the given config beyond
  // the noise with the loss within tolerance; its verdict in `verdicts_`.
  const Candidate* winner(
      const std::string& strategy, const std::string& label);
  // The spread of the given config's windows against their neighbours.
  double baseline_noise() const;

  FitConfig config_;
  Windows& windows_;
  double budget_s_;
  int64_t repeats_;
  double tolerance_;
  ProgressLine progress_;
  Clock::time_point start_;
  bool cuda_ = false;
  int64_t cores_ = 1;
  int64_t steps_ = kWarmupSteps + 20;
  double startup_s_ = 0;
  double finder_s_ = 0;
  double reserve_s_ = 0;
  double window_s_ = 0;
  Candidate baseline_;
  std::vector<Candidate> candidates_;
  Candidate combined_;
  std::vector<Candidate> val_candidates_;
  Candidate val_baseline_;
  std::vector<std::string> verdicts_;
  std::vector<std::string> skipped_;
  Settings chosen_;
  std::string largest_batch_log_;
  int64_t largest_batch_ = 0;
  std::string batch_rule_;
};

void Tuner::add_candidates() {
  const FitConfig& c = config_;
  // Compute threads, then loader threads, one at a time (their best pair
  // is what "together" measures).
  for (const int64_t t : {int64_t{1}, cores_ / 2, cores_}) {
    if (t >= 1 && t != c.trainer.num_threads() &&
        !(t == cores_ && c.trainer.num_threads() == 0)) {
      add("num_threads", {{"trainer.num_threads", std::to_string(t)}});
    }
  }
  for (const int64_t w : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{4}}) {
    if (w <= cores_ && w != c.data.num_workers) {
      add("num_workers", {{"data.num_workers", std::to_string(w)}});
    }
  }
  // A bigger batch, as far as memory allows, with its learning-rate rule.
  const int64_t batch = c.data.batch_size;
  const int64_t largest =
      elapsed() + finder_s_ < budget_s_ / 2
          ? windows_.largest_batch(batch, 3, &largest_batch_log_)
          : -1; // no time for the search
  if (largest < 0) {
    skipped_.push_back("the batch-size search");
  }
  largest_batch_ = largest;
  const std::string rule =
      c.tuner.scale_lr == "none" ? std::string("sqrt") : c.tuner.scale_lr;
  for (const int64_t factor : {2, 4}) {
    const int64_t size = batch * factor;
    if (largest >= size) {
      std::ostringstream lr;
      lr << std::setprecision(6)
         << train::scale_learning_rate(c.optimizer.lr, batch, size, rule);
      // As many samples as the given config's window.
      const int64_t steps =
          std::max<int64_t>(kWarmupSteps + 10, steps_ * batch / size);
      add("batch_size",
          {{"data.batch_size", std::to_string(size)},
           {"optimizer.lr", lr.str()}},
          /*changes_recipe=*/true,
          steps);
    }
  }
  batch_rule_ = rule;
  if (c.trainer.precision() != "bf16-mixed" && (cuda_ || cpu_has_bf16())) {
    add("precision", {{"trainer.precision", "bf16-mixed"}});
  }
  if (cuda_ && c.trainer.precision() != "16-mixed") {
    add("precision", {{"trainer.precision", "16-mixed"}});
  }
  const bool convolutional =
      c.model_name == "fashion_cnn" || models::is_resnet_name(c.model_name);
  if (convolutional) {
    add("channels_last",
        {{"trainer.channels_last",
          c.trainer.channels_last() ? "false" : "true"}});
  }
  if (cuda_ && !c.data.pin_memory) {
    add("pin_memory", {{"data.pin_memory", "true"}});
  }
  if (cuda_ && graphable().empty()) {
    add("cuda_graphs", {{"trainer.cuda_graphs", "true"}});
  }
  // hotloop's own CUDA kernels for the GPT, together: the ones the config
  // leaves off turned on; where it has all three (the default), all three
  // off, so that the user's own GPU and shapes say whether they pay.
  if (cuda_ && c.model_name == "gpt") {
    Settings fused;
    if (!c.gpt.fused_layer_norm()) {
      fused.emplace_back("model.fused_layer_norm", "true");
    }
    if (!c.gpt.fused_cross_entropy() && c.gpt.loss_chunk_size() > 0) {
      fused.emplace_back("model.fused_cross_entropy", "true");
    }
    if (!c.gpt.fused_bias_gradient()) {
      fused.emplace_back("model.fused_bias_gradient", "true");
    }
    if (fused.empty()) {
      fused = {
          {"model.fused_layer_norm", "false"},
          {"model.fused_cross_entropy", "false"},
          {"model.fused_bias_gradient", "false"}};
    }
    add("fused_kernels", std::move(fused));
  }
  // Memory-bound: twice the batch does not fit. Checkpointing the
  // activations may let it.
  const bool checkpointable =
      c.model_name == "gpt" || models::is_resnet_name(c.model_name);
  if (checkpointable && largest > 0 && largest < 2 * batch &&
      !c.activation_checkpointing && !c.gpt.activation_checkpointing()) {
    std::ostringstream lr;
    lr << std::setprecision(6)
       << train::scale_learning_rate(c.optimizer.lr, batch, 2 * batch, rule);
    add("activation_checkpointing",
        {{"model.activation_checkpointing", "true"},
         {"data.batch_size", std::to_string(2 * batch)},
         {"optimizer.lr", lr.str()}},
        true,
        std::max<int64_t>(kWarmupSteps + 10, steps_ / 2));
  }
  // Several processes of fewer threads each, the same global batch.
  if (!cuda_ && c.strategy != "ddp") {
    for (const int64_t ranks : {int64_t{2}, int64_t{4}}) {
      if (ranks <= cores_ && batch % ranks == 0) {
        add("ddp",
            {{"trainer.strategy", "ddp"},
             {"trainer.devices", std::to_string(ranks)},
             {"trainer.num_threads", std::to_string(cores_ / ranks)},
             {"data.batch_size", std::to_string(batch / ranks)}},
            true);
      }
    }
  }
}

void Tuner::measure_validation() {
  if (windows_.interrupted()) {
    return;
  }
  const int64_t given = config_.data.val_batch_size;
  std::vector<int64_t> sizes;
  for (const int64_t size : {int64_t{256}, int64_t{512}, given * 2}) {
    if (size != given &&
        std::find(sizes.begin(), sizes.end(), size) == sizes.end()) {
      sizes.push_back(size);
    }
  }
  const auto validate = [&](Candidate& c) {
    for (int64_t r = 0; r < repeats_ && !windows_.interrupted(); ++r) {
      // A validation window is a start, one step and the whole split: the
      // given config's first one tells its length.
      const std::vector<double> seen =
          field(val_baseline_.runs, &Measurement::process_s);
      const double expected = seen.empty() ? window_s_ : median(seen);
      if (elapsed() + expected > budget_s_ - reserve_s_) {
        break;
      }
      progress_.show(
          "tune: validation " + describe(c.settings) + " (run " +
          std::to_string(r + 1) + "/" + std::to_string(repeats_) + ")");
      c.runs.push_back(windows_.validate(c.settings));
    }
  };
  val_baseline_.strategy = "val_batch_size";
  validate(val_baseline_);
  for (const int64_t size : sizes) {
    if (elapsed() > budget_s_ * 0.9 || val_baseline_.runs.empty()) {
      skipped_.push_back("data.val_batch_size=" + std::to_string(size));
      continue;
    }
    val_candidates_.push_back(Candidate{
        "val_batch_size",
        {{"data.val_batch_size", std::to_string(size)}},
        false,
        0,
        {}});
    validate(val_candidates_.back());
  }
}

double Tuner::baseline_noise() const {
  const Ratios own = ratios(baseline_);
  return own.values.size() >= 2
             ? own.noise
             : noise(field(baseline_.runs, &Measurement::samples_per_s));
}

const Candidate* Tuner::winner(
    const std::string& strategy, const std::string& label) {
  const double base_noise = baseline_noise();
  const double base_loss = median(field(baseline_.runs, &Measurement::loss));
  const Candidate* best = nullptr;
  double best_ratio = 0;
  const Candidate* fastest = nullptr; // picked or not
  Ratios fastest_ratios;
  bool exists = false;
  bool any = false;
  std::string rejected;
  for (const Candidate& c : candidates_) {
    if (c.strategy != strategy) {
      continue;
    }
    exists = true;
    if (c.runs.size() < 2) {
      continue; // not measured (the budget), or too little to judge
    }
    any = true;
    const Ratios r = ratios(c);
    if (r.values.empty()) {
      rejected = describe(c.settings) + " failed: " + c.runs.front().failure;
      continue;
    }
    if (fastest == nullptr || r.median > fastest_ratios.median) {
      fastest = &c;
      fastest_ratios = r;
    }
    const double loss = median(field(c.runs, &Measurement::loss));
    const double loss_change =
        std::isfinite(loss) && std::isfinite(base_loss) && base_loss != 0
            ? (loss - base_loss) / std::abs(base_loss)
            : 0;
    // Beyond the noise: a gain larger than either spread, and every window
    // faster than the given config's around it.
    const double margin = std::max({base_noise, r.noise, kMinimumGain});
    const double slowest = *std::min_element(r.values.begin(), r.values.end());
    if (r.median - 1 <= margin || slowest <= 1) {
      continue;
    }
    if (loss_change > tolerance_ ||
        (!c.changes_recipe && std::abs(loss_change) > tolerance_)) {
      std::ostringstream why;
      why << describe(c.settings) << " is " << std::fixed
          << std::setprecision(2) << r.median << "x but changes the loss by "
          << std::showpos << std::setprecision(1) << 100 * loss_change
          << std::noshowpos << "% (tolerance " << 100 * tolerance_ << "%)";
      rejected = why.str();
      continue;
    }
    if (r.median > best_ratio) {
      best = &c;
      best_ratio = r.median;
    }
  }
  std::ostringstream verdict;
  verdict << label << ": ";
  if (!any) {
    if (exists) {
      verdicts_.push_back(label + ": not measured within --budget");
    }
    return nullptr;
  }
  if (best != nullptr) {
    verdict << describe(best->settings) << " is " << std::fixed
            << std::setprecision(2) << best_ratio << "x (noise +-"
            << std::setprecision(1)
            << 100 * std::max(base_noise, ratios(*best).noise) << "%)"
            << (best->changes_recipe ? ", changes the recipe" : "")
            << ": picked";
  } else if (!rejected.empty()) {
    verdict << rejected << ": kept the given";
  } else if (fastest != nullptr) {
    verdict << "the fastest, " << describe(fastest->settings) << ", is "
            << std::fixed << std::setprecision(2) << fastest_ratios.median
            << "x";
    if (fastest_ratios.median <= 1) {
      verdict << ", slower";
    } else {
      verdict << ", within the noise (+-" << std::setprecision(1)
              << 100 * std::max(base_noise, fastest_ratios.noise) << "%)";
    }
    verdict << ": kept the given";
  } else {
    verdict << "every window failed (" << rejected << "): kept the given";
  }
  verdicts_.push_back(verdict.str());
  return best;
}

void Tuner::decide() {
  std::vector<const Candidate*> winners;
  // A strategy's verdict, or why it was not tried when it had no candidate.
  const auto consider = [&](const std::string& strategy,
                            const std::string& label,
                            const std::string& not_tried) {
    const size_t before = verdicts_.size();
    if (const Candidate* c = winner(strategy, label)) {
      winners.push_back(c);
    }
    if (verdicts_.size() == before && !not_tried.empty()) {
      verdicts_.push_back(label + ": " + not_tried);
    }
  };
  consider("num_threads", "trainer.num_threads", "");
  consider("num_workers", "data.num_workers", "");
  consider(
      "batch_size",
      "data.batch_size (" + batch_rule_ + " rule for optimizer.lr)",
      largest_batch_ > 0
          ? "twice the batch does not fit in memory (the finder stopped at " +
                std::to_string(largest_batch_) + "): kept the given"
      : largest_batch_ < 0
          ? std::string("not measured within --budget")
          : std::string("the batch-size finder failed: kept the given"));
  consider(
      "precision",
      "trainer.precision",
      "this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16), "
      "without which bf16-mixed runs several times slower than float32: not "
      "tried");
  consider(
      "channels_last",
      "trainer.channels_last",
      "no convolutions in model.name=" + config_.model_name + ": not tried");
  consider(
      "pin_memory",
      "data.pin_memory",
      cuda_ ? "already on: not tried"
            : "no effect on the CPU (no copies to a device): not tried");
  consider(
      "cuda_graphs",
      "trainer.cuda_graphs",
      !cuda_                ? std::string("needs a CUDA device: not tried")
      : graphable().empty() ? std::string("not measured within the budget")
                            : graphable() + ": not tried");
  consider(
      "fused_kernels",
      "model.fused_* (hotloop's GPT kernels)",
      !cuda_ ? std::string("needs a CUDA device: not tried")
             : "no GPT (model.name=" + config_.model_name + "): not tried");
  // fp16's loss scaling decides on the host whether a step happens, which a
  // replayed graph cannot: both picked, the graph goes.
  const auto picked = [&](const std::string& strategy) {
    return std::find_if(
        winners.begin(), winners.end(), [&](const Candidate* w) {
          return w->strategy == strategy;
        });
  };
  const auto precision = picked("precision");
  const auto graphs = picked("cuda_graphs");
  if (precision != winners.end() && graphs != winners.end() &&
      (*precision)->settings.front().second == "16-mixed") {
    winners.erase(graphs);
    verdicts_.push_back(
        "trainer.cuda_graphs: not combined with trainer.precision=16-mixed, "
        "whose loss scaling skips steps from the host: kept 16-mixed");
  }
  consider(
      "activation_checkpointing",
      "model.activation_checkpointing",
      "not memory-bound (a batch of " +
          std::to_string(2 * config_.data.batch_size) +
          " fits) or no checkpointed segments: not tried");
  consider(
      "ddp",
      "trainer.strategy=ddp (processes x threads)",
      std::string(
          cuda_                       ? "one device here"
          : config_.strategy == "ddp" ? "already on"
                                      : "too few cores") +
          ": not tried");
  // Settings of the winners; DDP's per-process batch follows the chosen
  // global batch, and its threads replace the single process's.
  Settings settings;
  const auto set = [&](const std::string& key, const std::string& value) {
    for (auto& [k, v] : settings) {
      if (k == key) {
        v = value;
        return;
      }
    }
    settings.emplace_back(key, value);
  };
  const Candidate* ddp = nullptr;
  for (const Candidate* c : winners) {
    if (c->strategy == "ddp") {
      ddp = c;
      continue;
    }
    for (const auto& [k, v] : c->settings) {
      set(k, v);
    }
  }
  if (ddp != nullptr) {
    int64_t batch = config_.data.batch_size;
    int64_t ranks = 1;
    for (const auto& [k, v] : settings) {
      if (k == "data.batch_size") {
        batch = std::stoll(v);
      }
    }
    for (const auto& [k, v] : ddp->settings) {
      if (k == "trainer.devices") {
        ranks = std::stoll(v);
      }
    }
    for (const auto& [k, v] : ddp->settings) {
      set(k, k == "data.batch_size" ? std::to_string(batch / ranks) : v);
    }
  }
  // The validation batch.
  {
    const std::vector<double> base =
        field(val_baseline_.runs, &Measurement::validation_s);
    const Candidate* best = nullptr;
    double best_s = median(base);
    for (const Candidate& c : val_candidates_) {
      const std::vector<double> times =
          field(c.runs, &Measurement::validation_s);
      const double t = median(times);
      const double margin = std::max({noise(base), noise(times), kMinimumGain});
      if (!times.empty() && t < median(base) * (1 - margin) &&
          *std::max_element(times.begin(), times.end()) <
              *std::min_element(base.begin(), base.end()) &&
          t < best_s) {
        best = &c;
        best_s = t;
      }
    }
    std::ostringstream verdict;
    verdict << "data.val_batch_size: ";
    if (base.empty()) {
      verdict << "validation did not run: kept the given";
    } else if (best != nullptr) {
      verdict << best->settings.front().second << " validates in " << std::fixed
              << std::setprecision(2) << best_s << " s instead of "
              << median(base) << " s: picked";
      set("data.val_batch_size", best->settings.front().second);
    } else {
      verdict << "nothing validates faster than " << config_.data.val_batch_size
              << " beyond the noise: kept the given";
    }
    verdicts_.push_back(verdict.str());
  }
  // The winners together, when more than one speeds training.
  combined_.strategy = "combined";
  Settings training;
  for (const auto& kv : settings) {
    if (kv.first != "data.val_batch_size") {
      training.push_back(kv);
    }
  }
  if (winners.size() >= 2 && !windows_.interrupted()) {
    combined_.settings = training;
    std::vector<Candidate*> schedule;
    for (int64_t r = 0; r < repeats_; ++r) {
      schedule.push_back(&combined_);
      schedule.push_back(&baseline_);
    }
    run_schedule(schedule, "together: ", 1.0);
    const double together = ratios(combined_).median;
    double best_single = 0;
    const Candidate* single = nullptr;
    for (const Candidate* c : winners) {
      const double ratio = ratios(*c).median;
      if (ratio > best_single) {
        best_single = ratio;
        single = c;
      }
    }
    if (!(together >= best_single)) {
      // Together they do worse than the best alone: keep that one.
      Settings alone;
      for (const auto& kv : settings) {
        const bool in_single = std::any_of(
            single->settings.begin(),
            single->settings.end(),
            [&](const auto& s) { return s.first == kv.first; });
        if (in_single || kv.first == "data.val_batch_size") {
          alone.push_back(kv);
        }
      }
      verdicts_.push_back(
          "together: slower than " + describe(single->settings) +
          " alone: kept that one");
      settings = alone;
    } else {
      std::ostringstream verdict;
      verdict << "together: " << std::fixed << std::setprecision(2) << together
              << "x the given config: picked";
      verdicts_.push_back(verdict.str());
    }
  }
  chosen_ = settings;
}

void Tuner::print(std::ostream& out) const {
  const auto row = [&](const Candidate& c, const std::string& label) {
    const std::vector<double> rates =
        field(c.runs, &Measurement::samples_per_s);
    out << "  " << std::left << std::setw(16) << label << std::setw(58)
        << describe(c.settings).substr(0, 57) << std::right;
    if (rates.empty()) {
      out << "  failed: "
          << (c.runs.empty() ? std::string("not run") : c.runs.front().failure)
          << "\n";
      return;
    }
    const std::vector<double> peaks = field(c.runs, &Measurement::peak_bytes);
    const double peak = median(peaks);
    // Against the given config's windows around each; the given config's
    // own row: its windows against their neighbours.
    const Ratios r = ratios(c);
    const bool given = &c == &baseline_;
    out << std::fixed << std::setprecision(0) << std::setw(10) << median(rates)
        << std::setprecision(2) << std::setw(8) << (given ? 1.0 : r.median)
        << "x" << std::setprecision(1) << std::setw(7)
        << 100 * (given ? baseline_noise() : r.noise) << "%"
        << std::setprecision(0) << std::setw(9)
        << (peak > 0 ? std::to_string(static_cast<int64_t>(peak / (1 << 20)))
                     : std::string("-"))
        << std::setprecision(4) << std::setw(9)
        << median(field(c.runs, &Measurement::loss))
        << (c.changes_recipe ? "  recipe" : "") << std::defaultfloat << "\n";
  };
  out << "  " << std::left << std::setw(16) << "strategy" << std::setw(58)
      << "setting" << std::right << std::setw(10) << "samples/s" << std::setw(9)
      << "vs given" << std::setw(8) << "noise" << std::setw(9) << "peak MiB"
      << std::setw(9) << "loss"
      << "\n";
  row(baseline_, "given");
  for (const Candidate& c : candidates_) {
    if (!c.runs.empty()) {
      row(c, c.strategy);
    }
  }
  if (!combined_.runs.empty()) {
    row(combined_, "together");
  }
  const std::vector<double> base_val =
      field(val_baseline_.runs, &Measurement::validation_s);
  if (!base_val.empty()) {
    out << "\n  validation of the whole split: data.val_batch_size="
        << config_.data.val_batch_size << " " << std::fixed
        << std::setprecision(2) << median(base_val) << " s (+-"
        << std::setprecision(1) << 100 * noise(base_val) << "%)";
    for (const Candidate& c : val_candidates_) {
      const std::vector<double> t = field(c.runs, &Measurement::validation_s);
      if (!t.empty()) {
        out << ", " << c.settings.front().second << " " << std::setprecision(2)
            << median(t) << " s";
      }
    }
    out << std::defaultfloat << "\n";
  }
  out << "\n";
  for (const std::string& verdict : verdicts_) {
    out << "  " << verdict << "\n";
  }
  if (!skipped_.empty()) {
    out << "  not measured (out of --budget):";
    for (const std::string& s : skipped_) {
      out << " " << s << ";";
    }
    out << "\n";
  }
}

std::string Tuner::header() const {
  std::ostringstream text;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  text << "# Written by hotloop tune on " << date << ", " << hardware_threads()
       << " cores: the given config";
  if (chosen_.empty()) {
    text << " unchanged (nothing measured beat it beyond the noise).\n";
  } else {
    text << " with:\n";
    for (const auto& [key, value] : chosen_) {
      text << "#   " << key << "=" << value << "\n";
    }
  }
  for (const std::string& verdict : verdicts_) {
    text << "# " << verdict << "\n";
  }
  return text.str();
}

// A temporary folder for the windows, removed when done.
class WorkDir {
 public:
  WorkDir() {
    std::string pattern =
        (fs::temp_directory_path() / "hotloop-tune-XXXXXX").string();
    HOTLOOP_CHECK(
        ::mkdtemp(pattern.data()) != nullptr,
        "hotloop tune: cannot create a folder under ",
        fs::temp_directory_path().string());
    path_ = pattern;
  }
  ~WorkDir() {
    if (!keep_) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  const fs::path& path() const {
    return path_;
  }
  void keep() {
    keep_ = true;
  }

 private:
  fs::path path_;
  bool keep_ = false;
};

} // namespace

int run_tune(const ParsedArgs& args, std::ostream& out) {
  const double budget_s = args.extra.count("budget")
                              ? parse_duration(args.extra.at("budget"))
                              : 300;
  const int64_t repeats = number_flag<int64_t>(args, "repeats", 3, 2, 20);
  const double tolerance =
      number_flag<double>(args, "loss_tolerance", 0.02, 0, 1);
  const std::string output = args.extra.count("output")
                                 ? args.extra.at("output")
                                 : std::string("tuned.yaml");
  to_fit_config(args.config);       // the config's own errors first
  prepare_output(output, "output"); // before the budget is spent
  WorkDir workdir;
  if (args.extra.count("keep_windows")) {
    workdir.keep();
    out << "tune: windows kept in " << workdir.path().string() << "\n";
  }
  const std::string given = (workdir.path() / "given.yaml").string();
  std::ofstream(given) << args.config.to_yaml();
  const StopSignalGuard signals;
  Windows windows(given, workdir.path(), budget_s);
  Tuner tuner(args, windows, budget_s, repeats, tolerance, out);
  out << "tune: measuring the given config and its variations in windows of "
         "training, "
      << repeats << " runs each, within " << static_cast<int>(budget_s)
      << " s\n";
  const Settings chosen = tuner.run();
  out << "\n";
  tuner.print(out);
  // --budget bounds the session's wall time: say what it took.
  const double took = tuner.seconds();
  out << "\ntune: " << static_cast<int64_t>(std::lround(took)) << " s of the "
      << static_cast<int64_t>(std::lround(budget_s)) << " s --budget";
  if (took > budget_s) {
    out << " (exceeded by " << std::fixed << std::setprecision(1)
        << took - budget_s << " s)" << std::defaultfloat;
  }
  out << "\n";
  Config tuned = args.config;
  for (const auto& [key, value] : chosen) {
    tuned.set(key, value, "hotloop tune");
  }
  train::write_file_atomically(output, [&](std::ostream& file) {
    file << tuner.header() << tuned.to_yaml();
  });
  out << "\nwrote " << output << ": hotloop fit --config " << output << "\n";
  return 0;
}

} // namespace hotloop::cli
