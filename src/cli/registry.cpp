#include "hotloop/cli/registry.h"

#include "hotloop/models/resnet.h"

#include <algorithm>
#include <stdexcept>

namespace hotloop::cli {
namespace {

// The names hotloop itself gives model.name and data.dataset.
const std::vector<std::string>& built_in_model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = {"fashion_cnn", "mlp"};
    const auto& resnets = models::resnet_names();
    out.insert(out.end(), resnets.begin(), resnets.end());
    out.push_back("gpt");
    return out;
  }();
  return names;
}
const std::vector<std::string> kBuiltInDatasets = {
    "fashion_mnist", "idx", "image_folder", "csv", "text", "synthetic"};

struct Registry {
  std::vector<ModelRegistration> models;
  std::vector<DatasetRegistration> datasets;
  bool closed = false;
};

// Built on first use, so registrations from static initializers in any
// translation unit find it constructed.
Registry& registry() {
  static Registry r;
  return r;
}

template <typename R>
void check(
    const R& registration,
    const char* what,
    const std::vector<std::string>& built_in,
    const std::vector<R>& registered) {
  const std::string& name = registration.name();
  const std::string where =
      std::string("register_") + what + "(" + name + "): ";
  const bool well_formed =
      !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      });
  if (!well_formed) {
    throw std::logic_error(
        where + "a name is lowercase letters, digits and '_'");
  }
  const bool taken =
      std::find(built_in.begin(), built_in.end(), name) != built_in.end() ||
      std::any_of(registered.begin(), registered.end(), [&](const R& r) {
        return r.name() == name;
      });
  if (taken) {
    throw std::logic_error(where + "the name is taken");
  }
  if (!registration.builder()) {
    throw std::logic_error(where + "no build function given");
  }
  if (registry().closed) {
    throw std::logic_error(
        where +
        "the command line's options are built already; register before "
        "hotloop::cli::run (from a static initializer, for example)");
  }
}

} // namespace

bool register_model(ModelRegistration registration) {
  check(registration, "model", built_in_model_names(), registry().models);
  registry().models.push_back(std::move(registration));
  return true;
}

bool register_dataset(DatasetRegistration registration) {
  check(registration, "dataset", kBuiltInDatasets, registry().datasets);
  registry().datasets.push_back(std::move(registration));
  return true;
}

const ModelRegistration* find_model(const std::string& name) {
  for (const auto& r : registry().models) {
    if (r.name() == name) {
      return &r;
    }
  }
  return nullptr;
}

const DatasetRegistration* find_dataset(const std::string& name) {
  for (const auto& r : registry().datasets) {
    if (r.name() == name) {
      return &r;
    }
  }
  return nullptr;
}

const std::vector<ModelRegistration>& registered_models() {
  return registry().models;
}

const std::vector<DatasetRegistration>& registered_datasets() {
  return registry().datasets;
}

const std::vector<std::string>& built_in_models() {
  return built_in_model_names();
}

const std::vector<std::string>& built_in_datasets() {
  return kBuiltInDatasets;
}

namespace detail {
void close_registry() {
  registry().closed = true;
}
} // namespace detail

} // namespace hotloop::cli
