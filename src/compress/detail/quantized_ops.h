#pragma once

// LibTorch's quantized operators (quantized::linear_prepack,
// quantized::conv2d, ...) called through the dispatcher: their prepacked
// weights are TorchScript classes, handled as IValues, and the C++ API has
// no typed call for them.

#include <ATen/core/ivalue.h>

#include <vector>

namespace hotloop::compress::detail {

/// Runs the operator `name`.`overload` ("" for the default) on `args` and
/// returns its first result.
c10::IValue call_quantized(
    const char* name, const char* overload, std::vector<c10::IValue> args);

} // namespace hotloop::compress::detail
