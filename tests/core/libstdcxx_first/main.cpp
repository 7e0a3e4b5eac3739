// Linked with hotloop and then with a library that exports a copy of
// libstdc++'s std::filesystem code (copy.cpp): hotloop's link options put
// libstdc++.so.6 first, so libstdc++'s own code runs and a non-empty folder
// is removed. Exit 0 and one line when it is.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <unistd.h>

namespace fs = std::filesystem;

int main() {
  std::string pattern =
      (fs::temp_directory_path() / "hotloop-libstdcxx-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const fs::path root = pattern;
  fs::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "file") << "x";
  std::ofstream(root / "file") << "y";
  std::error_code error;
  const auto removed = fs::remove_all(root, error);
  if (error || fs::exists(root) || removed != 5) {
    std::fprintf(
        stderr, "remove_all(%s) removed %ju entries: %s\n", root.c_str(),
        static_cast<std::uintmax_t>(removed), error.message().c_str());
    return 1;
  }
  std::printf("libstdc++'s own remove_all removed 5 entries\n");
  return 0;
}
