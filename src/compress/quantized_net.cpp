#include "hotloop/compress/quantized_net.h"

#include "detail/int8_checkpoint.h"
#include "detail/quantized_ops.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/core/error.h"
#include "hotloop/train/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <nlohmann/json.hpp>

#include <iostream>

namespace hotloop::compress {
namespace {

using Kind = QuantizedStage::Kind;

c10::IValue call(
    const char* name, const char* overload, std::vector<c10::IValue> args) {
  return detail::call_quantized(name, overload, std::move(args));
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kQuantize:
      return "quantize";
    case Kind::kConv2d:
      return "conv2d";
    case Kind::kLinear:
      return "linear";
    case Kind::kLinearDynamic:
      return "linear_dynamic";
    case Kind::kLinearFloat:
      return "linear_float";
    case Kind::kMaxPool2d:
      return "max_pool2d";
    case Kind::kFlatten:
      return "flatten";
    case Kind::kDequantize:
      return "dequantize";
    case Kind::kGelu:
      return "gelu";
  }
  return "";
}

Kind kind_of(const std::string& name, const std::string& path) {
  for (const Kind kind :
       {Kind::kQuantize,
        Kind::kConv2d,
        Kind::kLinear,
        Kind::kLinearDynamic,
        Kind::kLinearFloat,
        Kind::kMaxPool2d,
        Kind::kFlatten,
        Kind::kDequantize,
        Kind::kGelu}) {
    if (name == kind_name(kind)) {
      return kind;
    }
  }
  throw Error(hotloop::detail::str_cat(
      path, ": unknown stage '", name, "' in the int8 model"));
}

bool has_weight(Kind kind) {
  return kind == Kind::kConv2d || kind == Kind::kLinear ||
         kind == Kind::kLinearDynamic || kind == Kind::kLinearFloat;
}

c10::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
}

} // namespace

QuantizedNetImpl::QuantizedNetImpl(
    std::vector<QuantizedStage> stages, std::string kind, std::string engine)
    : stages_(std::move(stages)),
      kind_(std::move(kind)),
      engine_(std::move(engine)) {
  for (const QuantizedStage& stage : stages_) {
    switch (stage.kind) {
      case Kind::kConv2d:
        packed_.push_back(call(
            "quantized::conv2d_prepack",
            "",
            {stage.weight,
             optional(stage.bias),
             c10::IValue(stage.stride),
             c10::IValue(stage.padding),
             c10::IValue(stage.dilation),
             stage.groups}));
        break;
      case Kind::kLinear:
      case Kind::kLinearDynamic:
        packed_.push_back(call(
            "quantized::linear_prepack",
            "",
            {stage.weight, optional(stage.bias)}));
        break;
      default:
        packed_.emplace_back();
    }
  }
}

at::Tensor QuantizedNetImpl::forward(const at::Tensor& input) {
  at::Tensor x = input;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const QuantizedStage& s = stages_[i];
    switch (s.kind) {
      case Kind::kQuantize:
        x = at::quantize_per_tensor(
            x.contiguous(), s.scale, s.zero_point, at::kQUInt8);
        break;
      case Kind::kConv2d:
        x = call(
                s.relu ? "quantized::conv2d_relu" : "quantized::conv2d",
                "new",
                {x, packed_[i], s.scale, s.zero_point})
                .toTensor();
        break;
      case Kind::kLinear:
        x = call(
                s.relu ? "quantized::linear_relu" : "quantized::linear",
                "",
                {x, packed_[i], s.scale, s.zero_point})
                .toTensor();
        break;
      case Kind::kLinearDynamic:
        x = call(
                s.relu ? "quantized::linear_relu_dynamic"
                       : "quantized::linear_dynamic",
                "",
                {x, packed_[i], s.reduce_range})
                .toTensor();
        break;
      case Kind::kLinearFloat:
        x = at::linear(x, s.weight, s.bias);
        if (s.relu) {
          x = at::relu(x);
        }
        break;
      case Kind::kMaxPool2d:
        x = at::max_pool2d(
            x, {s.kernel, s.kernel}, {s.kernel, s.kernel}, {0, 0}, {1, 1});
        break;
      case Kind::kFlatten:
        x = x.flatten(1);
        break;
      case Kind::kDequantize:
        x = x.dequantize();
        break;
      case Kind::kGelu:
        x = at::gelu(x);
        break;
    }
  }
  return x;
}

int64_t QuantizedNetImpl::weight_bytes() const {
  int64_t bytes = 0;
  for (const QuantizedStage& s : stages_) {
    if (!s.weight.defined()) {
      continue;
    }
    bytes += s.weight.numel() * (s.weight.is_quantized() ? 1 : 4);
    if (s.weight.is_quantized() &&
        s.weight.qscheme() == at::kPerChannelAffine) {
      bytes += s.weight.size(0) * 16; // a double scale, an int64 zero point
    } else if (s.weight.is_quantized()) {
      bytes += 16;
    }
    if (s.bias.defined()) {
      bytes += s.bias.numel() * 4;
    }
  }
  return bytes;
}

namespace {

// The int8 model as a module of buffers, for save_checkpoint and
// load_checkpoint: per weighted stage i, s<i>_weight (int8 or float),
// s<i>_scales (double), s<i>_zero_points (int64), s<i>_bias (float).
struct Holder : torch::nn::Module {
  void add(const std::string& name, const at::Tensor& t) {
    register_buffer(name, t);
  }
};

} // namespace

void save_quantized(
    const std::string& path,
    const QuantizedNetImpl& net,
    const std::string& extra) {
  auto holder = std::make_shared<Holder>();
  nlohmann::json stages = nlohmann::json::array();
  const auto& all = net.stages();
  for (size_t i = 0; i < all.size(); ++i) {
    const QuantizedStage& s = all[i];
    nlohmann::json stage = {
        {"kind", kind_name(s.kind)},
        {"relu", s.relu},
        {"scale", s.scale},
        {"zero_point", s.zero_point},
        {"stride", s.stride},
        {"padding", s.padding},
        {"dilation", s.dilation},
        {"groups", s.groups},
        {"kernel", s.kernel},
        {"reduce_range", s.reduce_range}};
    const std::string prefix = "s" + std::to_string(i) + "_";
    if (s.weight.defined()) {
      stage["weight_shape"] = s.weight.sizes().vec();
      if (s.weight.is_quantized()) {
        const bool per_channel = s.weight.qscheme() == at::kPerChannelAffine ||
                                 s.weight.qscheme() == at::kPerChannelSymmetric;
        stage["weight"] =
            per_channel ? "qint8_per_channel" : "qint8_per_tensor";
        holder->add(prefix + "weight", s.weight.int_repr().contiguous());
        if (per_channel) {
          stage["axis"] = s.weight.q_per_channel_axis();
          holder->add(prefix + "scales", s.weight.q_per_channel_scales());
          holder->add(
              prefix + "zero_points", s.weight.q_per_channel_zero_points());
        } else {
          holder->add(
              prefix + "scales",
              at::full({1}, s.weight.q_scale(), at::kDouble));
          holder->add(
              prefix + "zero_points",
              at::full({1}, s.weight.q_zero_point(), at::kLong));
        }
      } else {
        stage["weight"] = "float";
        holder->add(prefix + "weight", s.weight.contiguous());
      }
      if (s.bias.defined()) {
        stage["bias_shape"] = s.bias.sizes().vec();
        holder->add(prefix + "bias", s.bias.contiguous());
      }
    }
    stages.push_back(stage);
  }
  detail::save_int8_checkpoint(
      path,
      *holder,
      {{"kind", net.kind()}, {"engine", net.engine()}, {"stages", stages}},
      extra);
}

bool is_quantized_checkpoint(const std::string& path) {
  const train::CheckpointSummary summary = train::describe_checkpoint(path);
  return summary.content_read &&
         train::marks_int8_model(summary.callback_states);
}

QuantizedNet load_quantized(const std::string& path) {
  const detail::Int8File file =
      detail::read_int8_file(path, "hotloop quantize");
  const nlohmann::json& model = file.record;
  HOTLOOP_CHECK(
      model.contains("stages"),
      path,
      ": an int8 model of kind '",
      model.value("kind", std::string()),
      "', which runs as the model it came from: load it with "
      "load_quantized(path, model) (hotloop test and generate do)");
  auto holder = std::make_shared<Holder>();
  const nlohmann::json& described = model.at("stages");
  for (size_t i = 0; i < described.size(); ++i) {
    const nlohmann::json& stage = described[i];
    if (!stage.contains("weight_shape")) {
      continue;
    }
    const std::string prefix = "s" + std::to_string(i) + "_";
    const auto shape = stage.at("weight_shape").get<std::vector<int64_t>>();
    const std::string weight = stage.at("weight").get<std::string>();
    if (weight == "float") {
      holder->add(prefix + "weight", at::empty(shape));
    } else {
      holder->add(prefix + "weight", at::empty(shape, at::kChar));
      const int64_t n = weight == "qint8_per_channel" ? shape.at(0) : 1;
      holder->add(prefix + "scales", at::empty({n}, at::kDouble));
      holder->add(prefix + "zero_points", at::empty({n}, at::kLong));
    }
    if (stage.contains("bias_shape")) {
      holder->add(
          prefix + "bias",
          at::empty(stage.at("bias_shape").get<std::vector<int64_t>>()));
    }
  }
  // Not load_checkpoint, which refuses int8 checkpoints for float models.
  train::verify_checkpoint(path, &std::cerr);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path, at::kCPU);
    torch::serialize::InputArchive records;
    archive.read("model", records);
    holder->load(records);
  } catch (const c10::Error& e) {
    throw Error(hotloop::detail::str_cat(
        path, ": cannot load the int8 model: ", e.what_without_backtrace()));
  }
  const auto buffers = holder->named_buffers();
  std::vector<QuantizedStage> stages;
  for (size_t i = 0; i < described.size(); ++i) {
    const nlohmann::json& d = described[i];
    QuantizedStage s;
    s.kind = kind_of(d.at("kind").get<std::string>(), path);
    s.relu = d.at("relu").get<bool>();
    s.scale = d.at("scale").get<double>();
    s.zero_point = d.at("zero_point").get<int64_t>();
    s.stride = d.at("stride").get<std::vector<int64_t>>();
    s.padding = d.at("padding").get<std::vector<int64_t>>();
    s.dilation = d.at("dilation").get<std::vector<int64_t>>();
    s.groups = d.at("groups").get<int64_t>();
    s.kernel = d.at("kernel").get<int64_t>();
    s.reduce_range = d.at("reduce_range").get<bool>();
    const std::string prefix = "s" + std::to_string(i) + "_";
    if (has_weight(s.kind) && d.contains("weight_shape")) {
      const std::string weight = d.at("weight").get<std::string>();
      const at::Tensor values = buffers[prefix + "weight"];
      if (weight == "float") {
        s.weight = values;
      } else if (weight == "qint8_per_channel") {
        s.weight = at::_make_per_channel_quantized_tensor(
            values,
            buffers[prefix + "scales"],
            buffers[prefix + "zero_points"],
            d.at("axis").get<int64_t>());
      } else {
        s.weight = at::_make_per_tensor_quantized_tensor(
            values,
            buffers[prefix + "scales"].item<double>(),
            buffers[prefix + "zero_points"].item<int64_t>());
      }
      if (d.contains("bias_shape")) {
        s.bias = buffers[prefix + "bias"];
      }
    }
    stages.push_back(std::move(s));
  }
  return QuantizedNet(
      std::move(stages),
      model.at("kind").get<std::string>(),
      quantized_engine());
}

} // namespace hotloop::compress
