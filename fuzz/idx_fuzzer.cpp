// IDX files, raw or gzip-compressed (detected from the content).
#include "fuzz_input.h"

#include "hotloop/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hotloop::fuzz::write_input(data, size, "input.idx");
  hotloop::fuzz::expect_clean([&] { hotloop::data::read_idx(path); });
  return 0;
}
