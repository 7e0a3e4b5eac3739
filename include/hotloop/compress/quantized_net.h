#pragma once

#include "hotloop/compress/observer.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hotloop::compress {

/// One step of a quantized network, in order.
struct QuantizedStage {
  enum class Kind {
    kQuantize,      ///< float input -> quint8 (scale, zero_point)
    kConv2d,        ///< quantized::conv2d(_relu): int8 weight, float bias
    kLinear,        ///< quantized::linear(_relu)
    kLinearDynamic, ///< quantized::linear(_relu)_dynamic: float in and out
    kLinearFloat,   ///< a float Linear(+ReLU) left unquantized
    kMaxPool2d,     ///< on the quantized tensor (its scale kept)
    kFlatten,       ///< from dim 1
    kDequantize,    ///< back to float
    kGelu,          ///< float GELU (after a dynamic linear)
  };
  Kind kind = Kind::kFlatten;
  bool relu = false;
  /// conv, linear: the quantized weight (qint8, per channel on axis 0 or
  /// per tensor; float for kLinearFloat) and the float bias (may be
  /// undefined).
  at::Tensor weight;
  at::Tensor bias;
  /// quantize, conv, linear: the output's scale and zero point.
  double scale = 1;
  int64_t zero_point = 0;
  /// conv: its geometry; max pool: kernel = stride.
  std::vector<int64_t> stride = {1, 1};
  std::vector<int64_t> padding = {0, 0};
  std::vector<int64_t> dilation = {1, 1};
  int64_t groups = 1;
  int64_t kernel = 2;
  /// dynamic linear: activations quantized to 0..127 (FBGEMM's).
  bool reduce_range = false;
};

/// A network on LibTorch's quantized CPU ops (the int8 model that
/// quantize_static or quantize_dynamic makes): its stages run in order on
/// the engine that was selected when it was built or loaded
/// (quantized_engine.h), whose prepacked weights it holds. Inference only;
/// the CPU only.
///
/// input: [B, ...] float; output: float (dequantized logits).
class QuantizedNetImpl : public torch::nn::Module {
 public:
  /// Prepacks the weights for the current engine. `kind` names the source
  /// ("fashion_cnn static", "mlp dynamic"), for messages and checkpoints.
  QuantizedNetImpl(
      std::vector<QuantizedStage> stages, std::string kind, std::string engine);

  at::Tensor forward(const at::Tensor& input);

  const std::vector<QuantizedStage>& stages() const {
    return stages_;
  }
  const std::string& kind() const {
    return kind_;
  }
  /// The engine its weights were packed for.
  const std::string& engine() const {
    return engine_;
  }
  /// Bytes of its weights and biases as stored (int8 weights, their scales
  /// and zero points, float biases).
  int64_t weight_bytes() const;

 private:
  std::vector<QuantizedStage> stages_;
  std::vector<c10::IValue> packed_;
  std::string kind_;
  std::string engine_;
};
TORCH_MODULE(QuantizedNet);

/// Writes `net` as an int8 checkpoint: sealed and verified like every
/// checkpoint (train/checkpoint.h), marked as int8 so that loading it into
/// a float model fails naming it, with `extra` (callback states as JSON
/// text, `{key: state}`: the CLI keeps its TrainedData there) beside it.
/// Atomic.
void save_quantized(
    const std::string& path,
    const QuantizedNetImpl& net,
    const std::string& extra = "");

/// Whether `path` is an int8 checkpoint (reads its seal and records only).
bool is_quantized_checkpoint(const std::string& path);

/// Loads an int8 checkpoint, packing its weights for the current engine.
/// Throws Error naming the file when it is damaged, or when it is a float
/// model's checkpoint ("quantize it first").
QuantizedNet load_quantized(const std::string& path);

} // namespace hotloop::compress
