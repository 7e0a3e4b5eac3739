#pragma once

// c10's device guard: the emulator has one device (tests/cuda_emulation).

namespace c10::cuda {

struct CUDAGuard {
  template <typename Device>
  explicit CUDAGuard(const Device&) {}
};

} // namespace c10::cuda
