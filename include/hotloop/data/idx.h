#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace hotloop::data {

/// Reads an IDX file (the MNIST family's format), raw or gzip-compressed
/// (detected from the content, not the name).
///
/// Returns a contiguous CPU tensor with the file's dimensions and element
/// type (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
/// 0x0E float64), converted from big-endian. The payload is decompressed
/// straight into the tensor's storage: no intermediate buffer.
///
/// Throws `DataError` naming `path` for a missing file, bad magic, unknown
/// type code, too many or zero-sized dimensions, a short read, trailing
/// bytes, or corrupt gzip data.
at::Tensor read_idx(const std::string& path);

} // namespace hotloop::data
