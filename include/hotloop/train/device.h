#pragma once

#include <c10/core/Device.h>

#include <string>

namespace hotloop::train {

/// The one device this process trains on, from Lightning's `accelerator`
/// and `devices` flags:
/// - accelerator: "auto" (the first CUDA device when there is one, else the
///   CPU), "cpu", "cuda" (or "gpu"), or "cuda:N" for device N;
/// - devices: "auto", a count ("1"), or one index as a list ("[1]" or "1,").
/// CUDA device numbers count the devices CUDA_VISIBLE_DEVICES leaves
/// visible, as everywhere in CUDA. Throws ConfigError naming the flag when
/// the value is malformed, asks for more than one device (one process
/// trains on one device), or names a device that is not there.
c10::Device resolve_device(
    const std::string& accelerator, const std::string& devices);

/// Waits until the work queued so far on `device`'s current stream is done;
/// returns at once for the CPU. Timing asynchronous devices needs it: their
/// host calls return before the work ends.
void synchronize_device(c10::Device device);

} // namespace hotloop::train
