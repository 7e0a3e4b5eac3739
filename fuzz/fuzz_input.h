#pragma once

// What every fuzz target shares: the bytes as a file (the parsers read
// files), and the rule that bad input may only end in hotloop's own errors.

#include "hotloop/core/error.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace hotloop::fuzz {

/// A file of this process's own, rewritten with each input: `<dir>/name`
/// (`name` may hold folders).
inline std::string write_input(
    const uint8_t* data, size_t size, const std::string& name) {
  static const std::string dir = [] {
    std::string pattern = "/tmp/hotloop-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::abort();
    }
    return pattern;
  }();
  const std::string path = dir + "/" + name;
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr ||
      (size > 0 && std::fwrite(data, 1, size, file) != size)) {
    std::abort();
  }
  std::fclose(file);
  return path;
}

/// Runs `parse` on an input. A hotloop::Error (DataError, ConfigError, ...)
/// is the one-line message a user gets: accepted. Anything else -- another
/// exception, a crash, a sanitizer report -- is a finding.
template <typename Parse>
void expect_clean(Parse&& parse) {
  try {
    parse();
  } catch (const hotloop::Error&) {
  }
}

} // namespace hotloop::fuzz
