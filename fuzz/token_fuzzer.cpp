// A token file: uint16 or uint32 tokens (or bytes), memory-mapped, cut
// into windows.
#include "fuzz_input.h"

#include "hotloop/data/token_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hotloop::fuzz::write_input(data, size, "input.bin");
  const uint8_t mode = size > 0 ? data[0] : 0;
  const int64_t bytes[] = {1, 2, 4, 3};
  hotloop::fuzz::expect_clean([&] {
    const hotloop::data::TokenDataset tokens(
        path,
        hotloop::data::TokenDatasetOptions(1 + mode % 7)
            .token_bytes(bytes[(mode >> 3) & 3])
            .vocab_size((mode & 0x20) != 0 ? 300 : 0));
    if (tokens.size() > 0) {
      tokens.get(0, {});
      tokens.get(tokens.size() - 1, {});
    }
  });
  return 0;
}
