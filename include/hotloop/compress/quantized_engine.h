#pragma once

#include <string>
#include <vector>

namespace hotloop::compress {

/// The quantized engines this LibTorch has, by PyTorch's names
/// (torch.backends.quantized.supported_engines without "none"): "x86",
/// "fbgemm", "onednn", "qnnpack". Debian's 1.13 has onednn and qnnpack;
/// the 2.x wheels add x86 and fbgemm.
std::vector<std::string> supported_quantized_engines();

/// The engine quantized ops run on now (torch.backends.quantized.engine).
std::string quantized_engine();

/// Sets the engine: `preference` "auto" picks the first of x86, fbgemm,
/// onednn and qnnpack that LibTorch has (x86 and fbgemm are the fastest on
/// x86 CPUs; onednn where they are missing); a name sets that one. Returns
/// the engine set. Throws ConfigError naming the engines there are for one
/// LibTorch does not have.
std::string select_quantized_engine(const std::string& preference = "auto");

/// Whether activations of `engine` use the reduced range (0..127): FBGEMM
/// and x86 need it against overflow in their int8 kernels, as torch.ao's
/// default qconfigs for them say.
bool engine_reduces_range(const std::string& engine);

} // namespace hotloop::compress
