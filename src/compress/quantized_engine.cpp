#include "hotloop/compress/quantized_engine.h"

#include "hotloop/core/error.h"

#include <ATen/Context.h>

#include <algorithm>

namespace hotloop::compress {
namespace {

std::string name_of(at::QEngine engine) {
  switch (engine) {
    case at::QEngine::FBGEMM:
      return "fbgemm";
    case at::QEngine::QNNPACK:
      return "qnnpack";
    case at::QEngine::ONEDNN:
      return "onednn";
    case at::QEngine::X86:
      return "x86";
    default:
      return "none";
  }
}

} // namespace

std::vector<std::string> supported_quantized_engines() {
  std::vector<std::string> names;
  for (const at::QEngine engine : at::globalContext().supportedQEngines()) {
    if (engine != at::QEngine::NoQEngine) {
      names.push_back(name_of(engine));
    }
  }
  return names;
}

std::string quantized_engine() {
  return name_of(at::globalContext().qEngine());
}

std::string select_quantized_engine(const std::string& preference) {
  const std::vector<std::string> have = supported_quantized_engines();
  std::string wanted = preference;
  if (preference == "auto") {
    wanted.clear();
    for (const char* name : {"x86", "fbgemm", "onednn", "qnnpack"}) {
      if (std::find(have.begin(), have.end(), name) != have.end()) {
        wanted = name;
        break;
      }
    }
  }
  std::string listed;
  for (const std::string& name : have) {
    listed += (listed.empty() ? "" : ", ") + name;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      !wanted.empty() &&
          std::find(have.begin(), have.end(), wanted) != have.end(),
      "quantized engine '",
      preference,
      "' is not in this LibTorch (it has: ",
      listed.empty() ? std::string("none") : listed,
      ")");
  for (const at::QEngine engine : at::globalContext().supportedQEngines()) {
    if (name_of(engine) == wanted) {
      at::globalContext().setQEngine(engine);
    }
  }
  return wanted;
}

bool engine_reduces_range(const std::string& engine) {
  return engine == "fbgemm" || engine == "x86";
}

} // namespace hotloop::compress
