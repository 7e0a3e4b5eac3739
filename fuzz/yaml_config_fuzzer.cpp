// A YAML config file, merged into the fit schema and read as a FitConfig.
#include "fuzz_input.h"

#include "hotloop/cli/config.h"
#include "hotloop/cli/fit_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  hotloop::fuzz::expect_clean([&] {
    hotloop::cli::Config config(hotloop::cli::fit_schema());
    config.merge_yaml_string(text, "fuzz.yaml");
    hotloop::cli::to_fit_config(config);
  });
  return 0;
}
