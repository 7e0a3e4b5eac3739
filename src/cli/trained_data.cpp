#include "hotloop/cli/trained_data.h"

#include "hotloop/core/error.h"
#include "hotloop/train/checkpoint.h"

namespace hotloop::cli {
namespace {

// "'a', 'b', 'c'" for an error message.
std::string listed(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) {
    text += (text.empty() ? "'" : ", '") + name + "'";
  }
  return text.empty() ? "none" : text;
}

// ConfigError unless `now` equals what the checkpoint was trained on.
void require_same(
    const std::vector<std::string>& trained,
    const std::vector<std::string>& now,
    const char* what,
    const char* where) {
  if (trained == now) {
    return;
  }
  throw ConfigError(hotloop::detail::str_cat(
      "the checkpoint was trained on the ",
      what,
      " ",
      listed(trained),
      ", but ",
      where,
      " gives ",
      listed(now),
      "; resume with the data it was trained on, or start a new fit"));
}

} // namespace

nlohmann::json TrainedData::to_json() const {
  nlohmann::json state = nlohmann::json::object();
  if (num_classes > 0) {
    state["num_classes"] = num_classes;
  }
  if (!class_names.empty()) {
    state["classes"] = class_names;
  }
  if (!feature_names.empty()) {
    state["label"] = label_name;
    state["columns"] = feature_names;
    state["mean"] = feature_mean;
    state["std"] = feature_std;
  }
  if (target_mean && target_std) {
    state["target_mean"] = *target_mean;
    state["target_std"] = *target_std;
  }
  return state;
}

TrainedData TrainedData::from_json(
    const nlohmann::json& state, const std::string& source) {
  TrainedData data;
  try {
    if (state.contains("num_classes")) {
      data.num_classes = state.at("num_classes").get<int64_t>();
    }
    if (state.contains("classes")) {
      data.class_names = state.at("classes").get<std::vector<std::string>>();
    }
    if (state.contains("label")) {
      data.label_name = state.at("label").get<std::string>();
    }
    if (state.contains("columns")) {
      data.feature_names = state.at("columns").get<std::vector<std::string>>();
      data.feature_mean = state.at("mean").get<std::vector<double>>();
      data.feature_std = state.at("std").get<std::vector<double>>();
    }
    if (state.contains("target_mean")) {
      data.target_mean = state.at("target_mean").get<double>();
      data.target_std = state.at("target_std").get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(hotloop::detail::str_cat(
        source, ": the trained data's description is malformed: ", e.what()));
  }
  HOTLOOP_CHECK(
      data.feature_mean.size() == data.feature_names.size() &&
          data.feature_std.size() == data.feature_names.size(),
      source,
      ": the trained data names ",
      data.feature_names.size(),
      " columns but has ",
      data.feature_mean.size(),
      " means and ",
      data.feature_std.size(),
      " standard deviations");
  return data;
}

std::optional<TrainedData> read_trained_data(const std::string& path) {
  train::verify_checkpoint(path, nullptr); // "corrupted" before anything else
  const train::CheckpointSummary summary = train::describe_checkpoint(path);
  if (summary.callback_states.empty()) {
    return std::nullopt;
  }
  const nlohmann::json states =
      nlohmann::json::parse(summary.callback_states, nullptr, false);
  if (!states.is_object() || !states.contains("data")) {
    return std::nullopt;
  }
  return TrainedData::from_json(states.at("data"), path);
}

nlohmann::json TrainedDataCallback::state_dict() const {
  return data_.empty() ? nlohmann::json() : data_.to_json();
}

void require_same_data(const TrainedData& trained, const TrainedData& now) {
  // A checkpoint that kept no names (Fashion-MNIST's, before hotloop named
  // its classes) has numbered classes, which any names fit.
  if (!trained.class_names.empty()) {
    require_same(trained.class_names, now.class_names, "classes", "the data");
  }
  require_same(
      trained.feature_names, now.feature_names, "feature columns", "the table");
}

void TrainedDataCallback::load_state_dict(const nlohmann::json& state) {
  require_same_data(TrainedData::from_json(state, "the checkpoint"), data_);
}

} // namespace hotloop::cli
