#include "hotloop/train/run_dir.h"

#include "hotloop/core/error.h"

#include <filesystem>

namespace hotloop::train {

namespace fs = std::filesystem;

std::string create_version_dir(
    const std::string& root, const std::string& name) {
  const fs::path parent = fs::path(root) / name;
  std::error_code ec;
  fs::create_directories(parent, ec);
  HOTLOOP_CHECK(
      !ec, "cannot create run folder '", parent.string(), "': ", ec.message());
  int64_t next = 0;
  for (const auto& entry : fs::directory_iterator(parent)) {
    const std::string base = entry.path().filename().string();
    const std::string prefix = "version_";
    if (!entry.is_directory() || base.rfind(prefix, 0) != 0) {
      continue;
    }
    const std::string digits = base.substr(prefix.size());
    if (!digits.empty() &&
        digits.find_first_not_of("0123456789") == std::string::npos) {
      next = std::max<int64_t>(next, std::stoll(digits) + 1);
    }
  }
  while (true) {
    const fs::path dir = parent / ("version_" + std::to_string(next));
    if (fs::create_directory(dir, ec)) {
      return dir.string();
    }
    HOTLOOP_CHECK(
        !ec, "cannot create run folder '", dir.string(), "': ", ec.message());
    ++next; // Another run took this version first.
  }
}

} // namespace hotloop::train
