#pragma once

#include "hotloop/interop/named_tensors.h"

#include <string>

namespace hotloop::interop {

/// Reads a state_dict that Python wrote with `torch.save(model.state_dict(),
/// path)` (PyTorch's zip format, 1.6 and later, any version since): the
/// OrderedDict's tensors in its order, parameters and buffers alike
/// (BatchNorm's running statistics and num_batches_tracked), on the CPU.
/// Tensors that shared a storage in Python share one here (a tied
/// embedding); each is a view of the memory-mapped file when its storage
/// is aligned for its dtype (PyTorch aligns every record to 64 bytes),
/// copy-on-write, so the file never changes.
///
/// The pickle is read by hotloop's own restricted reader, never by
/// Python's or LibTorch's: it builds dicts, lists, tuples, strings,
/// numbers and tensors from storages of the ten dtypes safetensors has,
/// and nothing else (an object of any other class is kept opaque, never
/// constructed), as `torch.load(weights_only=True)` would. A file whose top
/// level is not a dict of tensors but holds one under "state_dict"
/// (Lightning's checkpoints) or "model" (nanoGPT's) gives that one.
///
/// Every record's CRC-32 is checked before anything is read. Throws Error
/// naming the file, and the key where there is one, for a missing,
/// truncated or corrupted file, the legacy (pre-1.6) format, a storage of
/// another dtype (complex, quantized), a tensor reaching outside its
/// storage, or a value that is not a tensor.
NamedTensors load_torch_state_dict(const std::string& path);

/// The bytes of a file that Python's `torch.load(path)` (1.13 and 2.x,
/// `weights_only=True` too) reads as an OrderedDict of these tensors, in
/// this order, on the CPU: PyTorch's own zip layout, written by LibTorch's
/// PyTorchStreamWriter (the writer under Python's torch.save) with the
/// pickle torch.save writes. Tensors sharing a storage are written once and
/// share it in Python. Throws Error for a repeated name or a dtype outside
/// those of safetensors_dtype.
std::string torch_state_dict_bytes(const NamedTensors& tensors);

/// Writes torch_state_dict_bytes(tensors) to `path` atomically, from each
/// storage's memory as it goes (never the whole file in memory).
void save_torch_state_dict(
    const std::string& path, const NamedTensors& tensors);

} // namespace hotloop::interop
