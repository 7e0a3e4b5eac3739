#include "hotloop/train/model_checkpoint.h"

#include "hotloop/core/error.h"
#include "hotloop/train/trainer.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <regex>
#include <sstream>
#include <vector>

namespace hotloop::train {
namespace {

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Formats `value` by a Python format spec such as ".4f", ".3e", "d" or "".
std::string format_value(
    double value, const std::string& spec, const std::string& pattern) {
  static const std::regex kSpec(R"(^(\.(\d+))?([fegd])?$)");
  std::smatch match;
  HOTLOOP_CHECK_AS(
      ConfigError,
      std::regex_match(spec, match, kSpec),
      "model_checkpoint.filename '",
      pattern,
      "': unsupported format ':",
      spec,
      "' (expected .Nf, .Ne, .Ng or d)");
  const std::string type = match[3].matched ? match[3].str() : "g";
  if (type == "d") {
    return std::to_string(static_cast<int64_t>(std::llround(value)));
  }
  const int precision = match[2].matched ? std::stoi(match[2].str()) : 6;
  char buffer[64];
  const std::string format = "%." + std::to_string(precision) + type;
  std::snprintf(buffer, sizeof(buffer), format.c_str(), value);
  return buffer;
}

std::string metric_list(const std::map<std::string, double>& metrics) {
  std::string names;
  for (const auto& [name, value] : metrics) {
    names += (names.empty() ? "" : ", ") + name;
  }
  return names.empty() ? "none" : names;
}

// A score the ranking can compare: NaN ranks last.
double rankable(double score, bool minimize) {
  if (std::isnan(score)) {
    return minimize ? std::numeric_limits<double>::infinity()
                    : -std::numeric_limits<double>::infinity();
  }
  return score;
}

nlohmann::json score_json(double score) {
  return std::isnan(score) ? nlohmann::json(nullptr) : nlohmann::json(score);
}

double json_score(const nlohmann::json& value) {
  return value.is_number() ? value.get<double>() : kNaN;
}

// Replaces `target` by a hard link to `source`, atomically; false when the
// file system cannot link.
bool link_atomically(const std::string& source, const std::string& target) {
  const std::string temp = target + ".link.tmp";
  ::unlink(temp.c_str());
  if (::link(source.c_str(), temp.c_str()) != 0) {
    return false;
  }
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    ::unlink(temp.c_str());
    return false;
  }
  return true;
}

} // namespace

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options)
    : options_(std::move(options)), best_model_score_(kNaN) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.mode() == "min" || options_.mode() == "max",
      "model_checkpoint.mode: expected min or max, got '",
      options_.mode(),
      "'");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.save_top_k() >= -1,
      "model_checkpoint.save_top_k must be >= -1, got ",
      options_.save_top_k());
  HOTLOOP_CHECK_AS(
      ConfigError,
      !options_.monitor().empty() || options_.save_top_k() <= 1,
      "model_checkpoint.save_top_k=",
      options_.save_top_k(),
      " ranks checkpoints, which needs model_checkpoint.monitor");
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.every_n_epochs() >= 0,
      "model_checkpoint.every_n_epochs must be >= 0, got ",
      options_.every_n_epochs());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.every_n_train_steps() >= 0,
      "model_checkpoint.every_n_train_steps must be >= 0, got ",
      options_.every_n_train_steps());
  HOTLOOP_CHECK_AS(
      ConfigError,
      options_.filename().find('/') == std::string::npos,
      "model_checkpoint.filename must be a file name, not a path: '",
      options_.filename(),
      "' (set model_checkpoint.dirpath for the folder)");
  if (options_.filename().empty()) {
    options_.filename("{epoch}-{step}");
  }
}

std::string ModelCheckpoint::state_key() const {
  // Lightning's key: several checkpoint callbacks differ by their settings.
  return hotloop::detail::str_cat(
      "ModelCheckpoint{monitor=",
      options_.monitor(),
      ",mode=",
      options_.mode(),
      ",every_n_epochs=",
      options_.every_n_epochs(),
      ",every_n_train_steps=",
      options_.every_n_train_steps(),
      "}");
}

std::string ModelCheckpoint::required_metric() const {
  return options_.monitor();
}

void ModelCheckpoint::setup(Trainer& trainer, Module& module) {
  validated_ = false;
  waiting_noted_ = false;
  // In a data-parallel run only the global-zero process writes (and
  // deletes) checkpoint files; the others must not touch its folder.
  writes_ = trainer.is_global_zero();
  if (!writes_) {
    return;
  }
  dirpath_ = options_.dirpath();
  if (dirpath_.empty()) {
    const std::string& run_dir = trainer.log_dir();
    HOTLOOP_CHECK_AS(
        ConfigError,
        !run_dir.empty(),
        "ModelCheckpoint has no dirpath and the Trainer writes no run folder "
        "(trainer.default_root_dir is empty): set one of them");
    dirpath_ = (fs::path(run_dir) / "checkpoints").string();
  }
  std::error_code ec;
  fs::create_directories(dirpath_, ec);
  HOTLOOP_CHECK(
      !ec,
      "cannot create the checkpoint folder '",
      dirpath_,
      "': ",
      ec.message());
}

std::string ModelCheckpoint::format_filename(
    int64_t epoch,
    int64_t step,
    const std::map<std::string, double>& metrics) const {
  static const std::regex kField(R"(\{([^{}:]+)(?::([^{}]*))?\})");
  const std::string& pattern = options_.filename();
  std::string name;
  auto last = pattern.cbegin();
  for (std::sregex_iterator it(pattern.begin(), pattern.end(), kField), end;
       it != end;
       ++it) {
    const std::smatch& field = *it;
    name.append(last, field[0].first);
    last = field[0].second;
    const std::string key = field[1].str();
    const std::string spec = field[2].matched ? field[2].str() : "";
    std::string value;
    if (key == "epoch" || key == "step") {
      value = std::to_string(key == "epoch" ? epoch : step);
    } else {
      const auto found = metrics.find(key);
      HOTLOOP_CHECK_AS(
          ConfigError,
          found != metrics.end(),
          "model_checkpoint.filename '",
          pattern,
          "' uses {",
          key,
          "}, which is not a logged metric (logged: ",
          metric_list(metrics),
          ")");
      value = format_value(found->second, spec, pattern);
    }
    if (options_.auto_insert_metric_name()) {
      name += key + "=";
    }
    name += value;
  }
  name.append(last, pattern.cend());
  return name;
}

void ModelCheckpoint::on_train_batch_end(
    Trainer& trainer,
    Module& module,
    const at::Tensor& loss,
    const data::Batch& batch,
    int64_t batch_idx) {
  const int64_t every = options_.every_n_train_steps();
  if (every > 0 && trainer.global_step() > 0 &&
      trainer.global_step() % every == 0 &&
      trainer.global_step() != last_saved_step_) {
    save(trainer);
  }
}

void ModelCheckpoint::on_validation_end(Trainer& trainer, Module& module) {
  if (!trainer.fitting() || trainer.sanity_checking()) {
    return; // Trainer::validate, or the check before training
  }
  validated_ = true;
  const int64_t every = options_.every_n_epochs();
  if (every > 0 && (trainer.current_epoch() + 1) % every == 0) {
    save(trainer);
  }
}

void ModelCheckpoint::on_train_epoch_end(Trainer& trainer, Module& module) {
  // With validation the save happened after it; a monitored metric is
  // only fresh right after a validation, so epochs that skip validation
  // save only when nothing is monitored.
  const int64_t every = options_.every_n_epochs();
  const bool validated_now = trainer.global_step() == last_saved_step_;
  if (every > 0 && (trainer.current_epoch() + 1) % every == 0 &&
      !validated_now &&
      (!trainer.has_validation() || options_.monitor().empty())) {
    save(trainer);
  }
}

void ModelCheckpoint::save(Trainer& trainer) {
  if (!writes_ || trainer.global_step() == last_saved_step_) {
    return;
  }
  last_saved_step_ = trainer.global_step();
  newest_path_.clear();
  double score = kNaN;
  bool rank = true;
  if (!options_.monitor().empty()) {
    const auto& metrics = trainer.callback_metrics();
    const auto found = metrics.find(options_.monitor());
    // A step-interval save before the first validation has nothing to rank
    // by yet: as Lightning, say so once and keep only last.ckpt until the
    // metric exists; after a validation it is an error.
    HOTLOOP_CHECK_AS(
        ConfigError,
        found != metrics.end() || (trainer.has_validation() && !validated_),
        "ModelCheckpoint monitors '",
        options_.monitor(),
        "', which no step logged (logged: ",
        metric_list(metrics),
        ")");
    if (found == metrics.end()) {
      rank = false;
      if (!waiting_noted_ && trainer.shows_progress()) {
        trainer.out() << "ModelCheckpoint: step " << trainer.global_step()
                      << " has no " << options_.monitor()
                      << " to rank by before the first validation; saving "
                         "only last.ckpt until then\n";
      }
      waiting_noted_ = true;
    } else {
      score = found->second;
    }
  }
  const std::string last = (fs::path(dirpath_) / "last.ckpt").string();
  if (options_.save_last()) {
    last_model_path_ = last; // before the save, so its state says so
  }
  if (options_.save_top_k() != 0 && rank) {
    save_top_k(trainer, score);
  }
  if (options_.save_last() &&
      (newest_path_.empty() || !link_atomically(newest_path_, last))) {
    trainer.save_checkpoint(last);
  }
}

bool ModelCheckpoint::better(double a, double b) const {
  const bool minimize = options_.mode() == "min";
  a = rankable(a, minimize);
  b = rankable(b, minimize);
  return minimize ? a < b : a > b;
}

std::string ModelCheckpoint::worst_path() const {
  std::string worst;
  for (const auto& [path, score] : best_k_models_) {
    if (worst.empty() || better(best_k_models_.at(worst), score)) {
      worst = path;
    }
  }
  return worst;
}

std::string ModelCheckpoint::unique_path(const std::string& name) const {
  // Lightning's rule: an existing file is never overwritten; the new one
  // gets a version suffix.
  std::string path = (fs::path(dirpath_) / (name + ".ckpt")).string();
  for (int version = 1; fs::exists(path); ++version) {
    path =
        (fs::path(dirpath_) / (name + "-v" + std::to_string(version) + ".ckpt"))
            .string();
  }
  return path;
}

void ModelCheckpoint::save_top_k(Trainer& trainer, double score) {
  const int64_t k = options_.save_top_k();
  if (!options_.monitor().empty() && k > 0 &&
      static_cast<int64_t>(best_k_models_.size()) >= k &&
      !better(score, best_k_models_.at(worst_path()))) {
    if (options_.verbose()) {
      trainer.out() << "epoch " << trainer.current_epoch() << ", step "
                    << trainer.global_step() << ": '" << options_.monitor()
                    << "' was not in top " << k << "\n";
    }
    return;
  }
  const std::string path = unique_path(format_filename(
      trainer.current_epoch(),
      trainer.global_step(),
      trainer.callback_metrics()));
  // The bookkeeping comes first, as in Lightning, so that the file carries
  // itself among the kept checkpoints: a resume from it ranks and deletes
  // exactly as the uninterrupted run does. Files drop out after the save.
  std::vector<std::string> dropped;
  if (options_.monitor().empty() && k == 1) {
    for (const auto& [old_path, old_score] : best_k_models_) {
      dropped.push_back(old_path);
    }
    best_k_models_.clear();
  }
  best_k_models_[path] = score;
  if (k > 0 && static_cast<int64_t>(best_k_models_.size()) > k) {
    const std::string worst = worst_path();
    dropped.push_back(worst);
    best_k_models_.erase(worst);
  }
  if (!options_.monitor().empty()) {
    for (const auto& [kept, kept_score] : best_k_models_) {
      if (best_model_path_.empty() || !best_k_models_.count(best_model_path_) ||
          better(kept_score, best_k_models_.at(best_model_path_))) {
        best_model_path_ = kept;
      }
    }
    best_model_score_ = best_k_models_.at(best_model_path_);
  }
  trainer.save_checkpoint(path);
  newest_path_ = path;
  for (const std::string& old_path : dropped) {
    std::error_code ec;
    fs::remove(old_path, ec);
  }
  if (options_.verbose()) {
    trainer.out() << "epoch " << trainer.current_epoch() << ", step "
                  << trainer.global_step() << ": saved " << path;
    if (!options_.monitor().empty()) {
      trainer.out() << " (" << options_.monitor() << " " << score << ", best "
                    << best_model_score_ << ")";
    }
    trainer.out() << "\n";
  }
}

std::string ModelCheckpoint::save_last(Trainer& trainer) {
  if (!writes_) {
    return "";
  }
  last_model_path_ = (fs::path(dirpath_) / "last.ckpt").string();
  trainer.save_checkpoint(last_model_path_);
  return last_model_path_;
}

nlohmann::json ModelCheckpoint::state_dict() const {
  nlohmann::json kept = nlohmann::json::object();
  for (const auto& [path, score] : best_k_models_) {
    kept[path] = score_json(score);
  }
  return {
      {"monitor", options_.monitor()},
      {"dirpath", dirpath_},
      {"best_model_path", best_model_path_},
      {"best_model_score", score_json(best_model_score_)},
      {"last_model_path", last_model_path_},
      {"best_k_models", kept},
      {"last_saved_step", last_saved_step_},
  };
}

void ModelCheckpoint::load_state_dict(const nlohmann::json& state) {
  best_model_path_ = state.value("best_model_path", "");
  best_model_score_ =
      json_score(state.value("best_model_score", nlohmann::json()));
  if (state.value("dirpath", "") != dirpath_) {
    // Another folder: its files are not ours to rank or delete.
    return;
  }
  last_model_path_ = state.value("last_model_path", "");
  last_saved_step_ = state.value("last_saved_step", int64_t{-1});
  best_k_models_.clear();
  const nlohmann::json kept =
      state.value("best_k_models", nlohmann::json::object());
  for (const auto& [path, score] : kept.items()) {
    best_k_models_[path] = json_score(score);
  }
}

} // namespace hotloop::train
