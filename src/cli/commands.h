#pragma once

// The commands of hotloop's command line that live outside app.cpp, and
// what they share with it.

#include "hotloop/cli/config.h"
#include "hotloop/cli/fit_config.h"
#include "hotloop/cli/session.h"
#include "hotloop/core/error.h"

#include <c10/core/Device.h>

#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace hotloop::train {
class Trainer;
} // namespace hotloop::train

namespace hotloop::cli {

/// The value of the command's `--flag` as a number, or `fallback` when it
/// was not given; ConfigError naming the flag for text that is not a
/// number, or not one from `lo` to `hi`.
template <typename T>
T number_flag(
    const ParsedArgs& args,
    const std::string& flag,
    T fallback,
    T lo = std::numeric_limits<T>::lowest(),
    T hi = std::numeric_limits<T>::max()) {
  const auto it = args.extra.find(flag);
  if (it == args.extra.end()) {
    return fallback;
  }
  std::istringstream in(it->second);
  T value{};
  in >> value;
  const bool bounded = lo != std::numeric_limits<T>::lowest() ||
                       hi != std::numeric_limits<T>::max();
  HOTLOOP_CHECK_AS(
      ConfigError,
      !it->second.empty() && !in.fail() && in.peek() == EOF && value >= lo &&
          value <= hi,
      "--",
      flag,
      ": expected a number",
      bounded ? hotloop::detail::str_cat(" from ", lo, " to ", hi) : "",
      ", got '",
      it->second,
      "'");
  return value;
}

/// The config of a command that runs in one process (validate, test,
/// predict, generate, quantize, shrink) read from `config`: a ddp run's
/// config (trainer.strategy=ddp, trainer.devices=N) becomes one process on
/// one device, said in one line on `out`; any other config as it is.
FitConfig one_process_config(
    const Config& config, const char* command, std::ostream& out);

/// `--ckpt_path`: `last` is the newest run's last.ckpt under
/// default_root_dir/name; `auto` the same when there is one, else "" (a
/// fresh start); anything else is the path itself. Throws Error for `last`
/// when there is none.
std::string resolve_ckpt_path(const std::string& path, const FitConfig& config);

/// Readies `path`, the file a command's `--flag` names, before the command
/// spends any time: its folder is made when missing (as Lightning makes its
/// log folders); ConfigError naming the flag when the path is a folder or
/// its folder cannot be made or written. A bare file name is written in the
/// working directory.
void prepare_output(const std::string& path, const std::string& flag);

/// `hotloop generate`: text (or token ids) from a GPT checkpoint, nanoGPT's
/// sample.py. The flags it reads besides the config's keys.
extern const char* const kGenerateFlags[];
int run_generate(const ParsedArgs& args, std::ostream& out, std::ostream& err);

/// `hotloop tune`: the config's run measured in short windows with one
/// setting varied at a time, then the winners together; prints a table and
/// a verdict per strategy and writes tuned.yaml. The flags it reads besides
/// the config's keys.
extern const char* const kTuneFlags[];
int run_tune(const ParsedArgs& args, std::ostream& out);

/// `hotloop checkpoint PATH`: what a checkpoint holds and whether its
/// checksum verifies (exit status 1 when it does not).
int run_checkpoint(const std::vector<std::string>& args, std::ostream& out);

/// `hotloop quantize`: an int8 checkpoint from a float one (static,
/// calibrated on training batches, or dynamic), with both models' accuracy
/// and inference speed; `hotloop shrink`: a structurally pruned model made
/// smaller. The flags they read besides the config's keys.
extern const char* const kQuantizeFlags[];
int run_quantize(const ParsedArgs& args, std::ostream& out);
extern const char* const kShrinkFlags[];
int run_shrink(const ParsedArgs& args, std::ostream& out);

/// The classifier that runs the int8 checkpoint `ckpt_path` (hotloop test
/// and predict).
std::shared_ptr<train::Module> int8_module(
    const FitConfig& config, const std::string& ckpt_path);

/// ConfigError naming `ckpt_path` unless `device`, where the config runs, is
/// the CPU: LibTorch's quantized kernels are CPU ones (test, predict and
/// generate of an int8 checkpoint).
void require_cpu_for_int8(
    const c10::Device& device, const std::string& ckpt_path);

/// quantization.qat: the session's network replaced by its QAT version
/// (compress::prepare_qat; after model.init_from, before a checkpoint is
/// loaded). Nothing without quantization.qat; ConfigError for a regression
/// or a model hotloop cannot quantize.
void prepare_quantization(const FitConfig& config, Session& session);
/// quantization.qat: the QuantizationAwareTraining callback, writing
/// `run_dir`/int8.ckpt (with the session's TrainedData) when the fit ends.
void add_quantization_callback(
    train::Trainer& trainer,
    const FitConfig& config,
    const Session& session,
    const std::string& run_dir);

/// quantization.qat in validate, test and predict: the QAT checkpoint
/// `load` loaded now (and `load` cleared) so that the observers can be set
/// for `stage` (validate, test, predict): on only where
/// quantization.observer_enabled_stages names it, as the callback does in
/// a fit. Nothing for an int8 model or without quantization.qat.
void evaluate_quantization_aware(
    const FitConfig& config,
    Session& session,
    const std::string& stage,
    std::string& load);

/// `hotloop export CHECKPOINT|RUN_DIR`: the model as a safetensors file or
/// a PyTorch state_dict, with its config (src/cli/export.cpp).
int run_export(const std::vector<std::string>& args, std::ostream& out);

} // namespace hotloop::cli
