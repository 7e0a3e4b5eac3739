#include "hotloop/compress/quantized_gpt.h"

#include "detail/int8_checkpoint.h"
#include "detail/quantized_weights.h"
#include "hotloop/compress/dynamic_linear.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/core/error.h"
#include "hotloop/train/checkpoint.h"

#include <nlohmann/json.hpp>

#include <map>
#include <sstream>

namespace hotloop::compress {
namespace {

constexpr const char* kKind = "gpt dynamic";

std::string shape_text(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
  return out.str();
}

// Name -> shape of each of the model's tensors once its Linear layers are
// DynamicLinear ones (as it is, where they are already).
std::map<std::string, std::string> int8_signature(models::GptImpl& model) {
  std::map<std::string, std::string> out;
  for (const auto& p : model.named_parameters()) {
    out[p.key()] = shape_text(p.value().sizes());
  }
  for (const auto& b : model.named_buffers()) {
    out[b.key()] = shape_text(b.value().sizes());
  }
  if (is_quantized(model)) {
    return out;
  }
  // replace_linears offers each layer without changing anything here.
  model.replace_linears(
      [&](const std::string& name,
          const at::Tensor& weight,
          const at::Tensor&) -> std::shared_ptr<models::GptLinearReplacement> {
        out[name + ".weight"] = shape_text(weight.sizes());
        out[name + ".scale"] = shape_text({1});
        out[name + ".zero_point"] = shape_text({1});
        return nullptr;
      });
  return out;
}

} // namespace

std::string quantize_dynamic_inplace(
    models::GptImpl& model, const std::string& engine) {
  const std::string chosen = select_quantized_engine(engine);
  for (const at::Tensor& p : model.parameters()) {
    HOTLOOP_CHECK(
        p.device().is_cpu(),
        "quantize_dynamic: the GPT must be on the CPU (int8 Linear layers "
        "run there), it is on ",
        p.device());
  }
  model.replace_linears(
      [](const std::string&, const at::Tensor& weight, const at::Tensor& bias)
          -> std::shared_ptr<models::GptLinearReplacement> {
        return DynamicLinearImpl::quantize(weight, bias);
      });
  return chosen;
}

models::Gpt quantize_dynamic(
    models::GptImpl& model, const std::string& engine) {
  models::Gpt copy(model.options());
  {
    // The values the model's forward uses: a pruned layer's masked ones.
    const at::NoGradGuard no_grad;
    const auto modules = model.named_modules();
    const auto value = [&](const std::string& name, bool parameter) {
      const size_t dot = name.rfind('.');
      torch::nn::Module& owner = *modules[name.substr(0, dot)];
      const std::string leaf = name.substr(dot + 1);
      return parameter ? detail::forward_value(owner, leaf)
                       : detail::buffer_value(owner, leaf);
    };
    for (auto& p : copy->named_parameters()) {
      p.value().copy_(value(p.key(), /*parameter=*/true));
    }
    for (auto& b : copy->named_buffers()) {
      b.value().copy_(value(b.key(), /*parameter=*/false));
    }
  }
  copy->eval();
  quantize_dynamic_inplace(*copy, engine);
  return copy;
}

bool is_quantized(const models::GptImpl& model) {
  for (const auto& module : model.modules(/*include_self=*/false)) {
    if (dynamic_cast<const DynamicLinearImpl*>(module.get()) != nullptr) {
      return true;
    }
  }
  return false;
}

int64_t stored_bytes(const models::GptImpl& model) {
  int64_t bytes = 0;
  for (const at::Tensor& p : model.parameters()) {
    bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  for (const at::Tensor& b : model.buffers()) {
    bytes += b.numel() * static_cast<int64_t>(b.element_size());
  }
  return bytes;
}

void save_quantized(
    const std::string& path, models::GptImpl& model, const std::string& extra) {
  HOTLOOP_CHECK(
      is_quantized(model),
      path,
      ": the GPT is float; quantize_dynamic_inplace makes it int8 first");
  detail::save_int8_checkpoint(
      path, model, {{"kind", kKind}, {"engine", quantized_engine()}}, extra);
}

void load_quantized(const std::string& path, models::GptImpl& model) {
  const detail::Int8File file =
      detail::read_int8_file(path, "hotloop quantize --mode dynamic");
  const std::string kind = file.record.at("kind").get<std::string>();
  HOTLOOP_CHECK(
      kind == kKind,
      path,
      ": an int8 model of kind '",
      kind,
      "', not an int8 GPT ('",
      kKind,
      "')");
  // The names and shapes the int8 form of `model` has, checked against the
  // file's before the model changes.
  std::map<std::string, std::string> mine = int8_signature(model);
  for (const auto& [name, shape] : file.summary.model) {
    const auto found = mine.find(name);
    HOTLOOP_CHECK(
        found != mine.end(),
        path,
        ": '",
        name,
        "' of the file's int8 GPT is not in the model (are model.n_layer "
        "and the other model.* options the run's?)");
    HOTLOOP_CHECK(
        found->second == shape,
        path,
        ": '",
        name,
        "' is ",
        shape,
        " in the file, ",
        found->second,
        " in the model (are model.n_embd, model.vocab_size and the other "
        "model.* options the run's?)");
    mine.erase(found);
  }
  HOTLOOP_CHECK(
      mine.empty(),
      path,
      ": the model's '",
      mine.empty() ? std::string() : mine.begin()->first,
      "' is not in the file's int8 GPT (are model.n_layer and the other "
      "model.* options the run's?)");
  // Layers of zeros in the Linear layers' places, for the file to fill.
  model.replace_linears(
      [](const std::string&, const at::Tensor& weight, const at::Tensor& bias)
          -> std::shared_ptr<models::GptLinearReplacement> {
        return std::make_shared<DynamicLinearImpl>(
            weight.size(1), weight.size(0), bias.defined());
      });
  train::load_checkpoint(path, model);
}

} // namespace hotloop::compress
