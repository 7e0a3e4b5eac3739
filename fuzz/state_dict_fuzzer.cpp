// A PyTorch state_dict (torch.save's zip): the zip's records and their
// CRC-32s, hotloop's restricted unpickler, the storages and every tensor's
// view of them, then each tensor summed.
#include "fuzz_input.h"

#include "hotloop/interop/torch_file.h"

#include <ATen/ATen.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hotloop::fuzz::write_input(data, size, "input.pt");
  hotloop::fuzz::expect_clean([&] {
    for (const auto& [name, tensor] :
         hotloop::interop::load_torch_state_dict(path).tensors) {
      if (tensor.numel() > 0 && tensor.numel() < (1 << 20)) {
        (void)tensor.to(at::kDouble).sum().item<double>();
      }
    }
  });
  return 0;
}
