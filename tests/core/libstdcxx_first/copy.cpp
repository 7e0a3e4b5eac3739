// A shared library that exports its own copy of a libstdc++ function, as
// PyTorch's Linux wheels (2.4 and later) export the std::filesystem code
// they link statically (pytorch/pytorch#133437). Where the dynamic linker
// finds this copy before libstdc++.so.6, libstdc++'s std::filesystem::
// remove_all constructs its recursive_directory_iterator here; the wheel's
// copy, built from another libstdc++, crashed on a non-empty folder. This
// one says so and aborts.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace std::filesystem {

recursive_directory_iterator::recursive_directory_iterator(
    const path& p, directory_options, error_code*) {
  std::fprintf(
      stderr,
      "a library's copy of libstdc++'s recursive_directory_iterator ran "
      "(for %s): libstdc++.so.6 is not first in the program's libraries\n",
      p.c_str());
  std::abort();
}

} // namespace std::filesystem
