// A safetensors file: the header length, the JSON header and its entries'
// checks, then every tensor read (in place or copied) and summed, as a load
// touches it.
#include "fuzz_input.h"

#include "hotloop/interop/safetensors.h"

#include <ATen/ATen.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      hotloop::fuzz::write_input(data, size, "input.safetensors");
  hotloop::fuzz::expect_clean([&] {
    const hotloop::interop::SafetensorsFile file(path);
    for (const auto& [name, tensor] : file.read_all().tensors) {
      if (tensor.numel() > 0 && tensor.numel() < (1 << 20)) {
        (void)tensor.to(at::kDouble).sum().item<double>();
      }
    }
  });
  return 0;
}
