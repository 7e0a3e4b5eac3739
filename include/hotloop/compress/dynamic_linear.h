#pragma once

#include "hotloop/models/gpt.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/QEngine.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace hotloop::compress {

/// torch.ao.nn.quantized.dynamic.Linear: a Linear layer whose weight is
/// int8 (qint8, per tensor, symmetric: torch.ao's default_dynamic_qconfig's
/// MinMaxObserver) and whose input is quantized at each call from its own
/// range (quint8, the range reduced to 0..127 as torch.ao asks of
/// quantized::linear_dynamic), the output float. It takes a Linear layer's
/// place in a Gpt (models::GptLinearReplacement; quantize_dynamic_inplace).
///
/// Its buffers are what checkpoints hold: `weight` (the int8 values,
/// [out, in]), `scale` and `zero_point` ([1], double and int64) and `bias`
/// (float [out], where the layer has one). The weight is packed for the
/// current quantized engine (quantized_engine.h) at the first forward after
/// they change, so a loaded checkpoint runs as it is. CPU only, inference
/// only.
///
/// A small call on the onednn or qnnpack engine (a weight of at most 2^20
/// values, at most 2^24 multiply-adds: one token of a generation with a KV
/// cache, for a GPT up to 1024 wide) runs the same arithmetic in float: the
/// input quantized from its range as the engine's kernel quantizes it
/// (onednn honours reduce_range, qnnpack does not), times the int8 weight
/// as floats. Its outputs equal the kernel's to float rounding (a few
/// 1e-7 of the largest), and it costs a float layer's product and three
/// small ops, where LibTorch 1.13's onednn kernel sets itself up anew for
/// each input range it has not seen (hundreds of microseconds a call: a
/// generating tiny GPT went from 0.04x the float model's tokens/s to about
/// 0.9x; bench/int8_linear_calls and docs/PERFORMANCE.md have the
/// figures). The layer then keeps a float copy of its weight
/// (float_copy_bytes(): 4 bytes a value beside the int8 one) for as long
/// as the int8 weight stays the same. Larger calls, and every call on
/// another engine (fbgemm, x86), run the int8 kernel.
class DynamicLinearImpl : public models::GptLinearReplacement {
 public:
  /// A layer of zeros, for a checkpoint to fill.
  DynamicLinearImpl(int64_t in_features, int64_t out_features, bool bias);
  /// The int8 form of a float layer (weight [out, in], bias [out] or
  /// undefined), observed as torch.ao's quantize_dynamic observes it.
  static std::shared_ptr<DynamicLinearImpl> quantize(
      const at::Tensor& weight, const at::Tensor& bias);

  /// x: [..., in] -> [..., out] float (x is taken as float32).
  at::Tensor forward(const at::Tensor& x) override;

  /// The weight as a quantized tensor (qint8, per tensor).
  at::Tensor quantized_weight() const;

  /// Whether a call on `rows` rows runs in float (above) on the current
  /// quantized engine.
  bool runs_in_float(int64_t rows) const;

  /// The bytes of the float copy of the weight that small calls keep (0
  /// before the first).
  int64_t float_copy_bytes() const;

 private:
  at::Tensor weight_;
  at::Tensor scale_;
  at::Tensor zero_point_;
  at::Tensor bias_;
  int64_t in_features_;
  int64_t out_features_;
  mutable std::mutex mutex_;
  c10::IValue packed_;
  // What packed_ was made from: each buffer's storage and version, the
  // engine.
  std::vector<std::pair<const void*, int64_t>> packed_from_;
  int64_t packed_engine_ = -1;
  at::Tensor float_weight_;
  std::vector<std::pair<const void*, int64_t>> float_from_;

  // runs_in_float on `engine`, read once by forward.
  bool runs_in_float(int64_t rows, at::QEngine engine) const;
};

} // namespace hotloop::compress
