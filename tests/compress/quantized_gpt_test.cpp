#include "hotloop/compress/quantized_gpt.h"

#include "hotloop/compress/dynamic_linear.h"
#include "hotloop/compress/parametrization.h"
#include "hotloop/compress/prune.h"
#include "hotloop/compress/pruning_amount.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/core/error.h"
#include "hotloop/interop/load_weights.h"
#include "hotloop/models/gpt_generate.h"
#include "hotloop/train/checkpoint.h"
#include "reference_settings.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace hotloop::compress {
namespace {

using hotloop::testing::Reference;
using hotloop::testing::TempDir;
using ::testing::HasSubstr;

at::Tensor ref(const std::string& field, const std::string& name) {
  return hotloop::testing::to_tensor(
      Reference::get("quantization.txt").one("gpt_dynamic", field, name),
      at::kFloat);
}

// The twin of make_quantization_reference.py's nanoGPT.
models::Gpt reference_gpt() {
  models::Gpt gpt(models::GptOptions::tiny());
  const std::string file =
      std::string(HOTLOOP_TEST_REFERENCE_DIR) + "/interop/gpt.safetensors";
  interop::load_weights(*gpt, interop::read_weights(file), file);
  gpt->eval();
  return gpt;
}

// The reference ran on onednn, which each test selects.
using QuantizedGpt = testing::ReferenceSettingsTest;

TEST_F(QuantizedGpt, DynamicEqualsTorchAosQuantizeDynamicOfNanoGpt) {
  models::Gpt gpt = reference_gpt();
  const at::Tensor idx = ref("input", "idx").to(at::kLong);
  const at::Tensor float_logits = gpt->forward(idx);
  EXPECT_EQ(quantize_dynamic_inplace(*gpt, "onednn"), "onednn");
  EXPECT_TRUE(is_quantized(*gpt));
  // torch.ao's layers, by its module names, lm_head too; exact scales.
  std::set<std::string> layers;
  for (const auto& item : gpt->named_modules("", /*include_self=*/false)) {
    if (const auto* layer =
            dynamic_cast<const DynamicLinearImpl*>(item.value().get())) {
      layers.insert(item.key());
      const at::Tensor w = layer->quantized_weight();
      EXPECT_EQ(w.q_scale(), ref("qparams", "weight." + item.key() + ".scale")
                                 .item<double>())
          << item.key();
      EXPECT_EQ(w.q_zero_point(), 0);
    }
  }
  EXPECT_EQ(layers.size(), 9u);
  EXPECT_EQ(layers.count("lm_head"), 1u);
  EXPECT_EQ(layers.count("transformer.h.1.mlp.c_fc"), 1u);
  // The float Linear weights left the model; the embeddings stayed.
  std::set<std::string> parameters;
  for (const auto& p : gpt->named_parameters()) {
    parameters.insert(p.key());
  }
  EXPECT_EQ(parameters.count("transformer.h.0.attn.c_attn.weight"), 0u);
  EXPECT_EQ(parameters.count("transformer.wte.weight"), 1u);
  const at::Tensor logits = gpt->forward(idx);
  const at::Tensor expected = ref("output", "logits");
  ASSERT_EQ(logits.sizes(), expected.sizes());
  const double diff = (logits - expected).abs().max().item<double>();
  EXPECT_LT(diff, 1e-4);
  // Int8, not float: the logits moved off the float model's.
  EXPECT_GT((logits - float_logits).abs().max().item<double>(), 100 * diff);
  // The loss sees the int8 head.
  EXPECT_NEAR(
      gpt->token_loss(idx, idx).item<double>(),
      models::gpt_loss(logits, idx).item<double>(),
      1e-6);
}

TEST_F(QuantizedGpt, SavesAndLoadsAsACheckpointOfItsOwnKind) {
  TempDir dir;
  models::Gpt gpt = reference_gpt();
  const int64_t float_bytes = stored_bytes(*gpt);
  const std::string file = dir.file("gpt.int8.ckpt");
  EXPECT_THROW(save_quantized(file, *gpt), Error); // float
  quantize_dynamic_inplace(*gpt, "onednn");
  // Each Linear weight from 4 bytes a value to 1.
  EXPECT_LT(stored_bytes(*gpt), float_bytes * 6 / 10);
  save_quantized(file, *gpt, R"({"kept": {"a": 1}})");
  EXPECT_TRUE(is_quantized_checkpoint(file));

  // A float GPT of the same options loads it and gives the same logits,
  // and the same generated tokens.
  models::Gpt loaded(models::GptOptions::tiny());
  load_quantized(file, *loaded);
  loaded->eval();
  const at::Tensor idx = ref("input", "idx").to(at::kLong);
  EXPECT_TRUE(at::equal(loaded->forward(idx), gpt->forward(idx)));
  const auto options =
      models::GenerateOptions().max_new_tokens(8).top_k(5).seed(3);
  EXPECT_TRUE(at::equal(
      models::generate(*loaded, idx.narrow(1, 0, 4), options),
      models::generate(*gpt, idx.narrow(1, 0, 4), options)));

  // A float model refuses it; the int8 loader refuses a float checkpoint
  // and another shape.
  models::Gpt float_gpt(models::GptOptions::tiny());
  try {
    train::load_checkpoint(file, *float_gpt);
    FAIL() << "a float GPT loaded an int8 checkpoint";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("an int8 (quantized) checkpoint"));
  }
  train::save_checkpoint(dir.file("float.ckpt"), *float_gpt);
  try {
    load_quantized(dir.file("float.ckpt"), *loaded);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(
        e.what(),
        HasSubstr("float.ckpt: a float model's checkpoint, not an int8 one"));
  }
  models::Gpt wider(models::GptOptions::tiny().n_embd(64));
  try {
    load_quantized(file, *wider);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(
        e.what(),
        HasSubstr("gpt.int8.ckpt: 'transformer.wte.weight' is [64, 32] in "
                  "the file, [64, 64] in the model"));
  }
  EXPECT_FALSE(is_quantized(*wider)); // checked before anything changed
  // A model that is int8 already loads it too.
  load_quantized(file, *loaded);
  EXPECT_TRUE(at::equal(loaded->forward(idx), gpt->forward(idx)));
  // Nor is it a QuantizedNet.
  EXPECT_THROW(load_quantized(file), Error);
}

// quantize_dynamic makes an int8 copy from what the forward uses (a pruned
// layer's masked weight); a second quantization of an int8 model changes
// nothing; a model without biases quantizes, saves and loads.
TEST_F(QuantizedGpt, ACopyFromPrunedWeightsAndAModelWithoutBiases) {
  models::Gpt gpt = reference_gpt();
  torch::nn::Module& c_fc = *gpt->named_modules()["transformer.h.0.mlp.c_fc"];
  l1_unstructured(c_fc, "weight", PruningAmount::fraction(0.5));
  recompute_pruned(*gpt);
  const at::Tensor idx = ref("input", "idx").to(at::kLong);
  const at::Tensor float_logits = gpt->forward(idx);
  models::Gpt int8 = quantize_dynamic(*gpt, "onednn");
  EXPECT_FALSE(is_quantized(*gpt));
  EXPECT_TRUE(at::equal(gpt->forward(idx), float_logits));
  const auto* layer = dynamic_cast<const DynamicLinearImpl*>(
      int8->named_modules()["transformer.h.0.mlp.c_fc"].get());
  ASSERT_NE(layer, nullptr);
  const at::Tensor values = layer->quantized_weight().int_repr();
  EXPECT_GE((values == 0).sum().item<int64_t>(), values.numel() / 2);
  EXPECT_LT((int8->forward(idx) - float_logits).abs().max().item<double>(), 0.5);

  const at::Tensor before = int8->forward(idx);
  quantize_dynamic_inplace(*int8, "onednn");
  int64_t layers = 0;
  for (const auto& module : int8->modules(/*include_self=*/false)) {
    layers += dynamic_cast<const DynamicLinearImpl*>(module.get()) != nullptr;
  }
  EXPECT_EQ(layers, 9);
  EXPECT_TRUE(at::equal(int8->forward(idx), before));

  TempDir dir;
  models::Gpt plain(models::GptOptions::tiny().bias(false));
  plain->eval();
  quantize_dynamic_inplace(*plain, "onednn");
  save_quantized(dir.file("plain.ckpt"), *plain);
  models::Gpt back(models::GptOptions::tiny().bias(false));
  back->eval();
  load_quantized(dir.file("plain.ckpt"), *back);
  EXPECT_TRUE(at::equal(back->forward(idx), plain->forward(idx)));
}

// quantized::linear_dynamic itself on a weight packed for the current
// engine, with reduce_range as torch.ao's dynamic Linear calls it (qnnpack
// ignores it).
at::Tensor kernel_output(
    const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& bias) {
  auto& dispatcher = c10::Dispatcher::singleton();
  std::vector<c10::IValue> stack{qweight, bias};
  dispatcher.findSchemaOrThrow("quantized::linear_prepack", "")
      .callBoxed(&stack);
  stack = {x, stack[0], quantized_engine() != "qnnpack"};
  dispatcher.findSchemaOrThrow("quantized::linear_dynamic", "")
      .callBoxed(&stack);
  return stack[0].toTensor();
}

// The most a small call's output moves off the kernel's, over inputs of
// several ranges (all positive, all negative, mixed, one value), relative
// to the kernel's largest output.
double worst_small_call_difference(DynamicLinearImpl& layer) {
  const at::Tensor qweight = layer.quantized_weight();
  const at::Tensor bias = layer.named_buffers()["bias"];
  double worst = 0;
  for (int i = 0; i < 40; ++i) {
    at::Tensor x = at::randn({1, 128}) * (0.1 + i % 5) + (i % 3 - 1) * 2.0;
    if (i == 0) {
      x = at::full({1, 128}, 0.5);
    }
    const at::Tensor expected = kernel_output(x, qweight, bias);
    const at::Tensor got = layer.forward(x);
    worst = std::max(
        worst,
        ((got - expected).abs().max() / expected.abs().max()).item<double>());
  }
  return worst;
}

// One token of a generation is one row: on onednn and qnnpack the layer
// runs that in float, as each engine's kernel would quantize the input,
// and larger calls on the kernel itself.
using DynamicLinear = testing::ReferenceSettingsTest;

TEST_F(DynamicLinear, ASmallCallRunsTheKernelsArithmeticInFloat) {
  const at::NoGradGuard no_grad;
  at::manual_seed(0);
  const at::Tensor weight = at::randn({384, 128}) * 0.05;
  const at::Tensor bias = at::randn({384}) * 0.1;
  const std::vector<std::string> engines = supported_quantized_engines();
  for (const char* engine : {"onednn", "qnnpack"}) {
    if (std::find(engines.begin(), engines.end(), engine) == engines.end()) {
      continue;
    }
    SCOPED_TRACE(engine);
    select_quantized_engine(engine);
    auto layer = DynamicLinearImpl::quantize(weight, bias);
    EXPECT_TRUE(layer->runs_in_float(1));
    EXPECT_TRUE(layer->runs_in_float(341)); // 341 x 128 x 384 <= 2^24
    EXPECT_FALSE(layer->runs_in_float(342));
    EXPECT_FALSE(layer->runs_in_float(0));
    EXPECT_EQ(layer->float_copy_bytes(), 0);
    EXPECT_LT(worst_small_call_difference(*layer), 2e-6);
    EXPECT_EQ(layer->float_copy_bytes(), 384 * 128 * 4);

    // A larger call is the kernel's own, as is any call of a layer with
    // more than 2^20 weights.
    const at::Tensor rows = at::randn({2, 200, 128});
    EXPECT_TRUE(at::equal(
        layer->forward(rows),
        kernel_output(rows, layer->quantized_weight(), bias)));

    EXPECT_FALSE(
        DynamicLinearImpl(1024, 1025, false).runs_in_float(/*rows=*/1));
    EXPECT_TRUE(DynamicLinearImpl(1024, 1024, false).runs_in_float(1));

    // New int8 values (a checkpoint loaded into the layer) replace the
    // float copy at the next call.
    at::Tensor values = layer->named_buffers()["weight"];
    values.copy_(values.flip(0));
    EXPECT_LT(worst_small_call_difference(*layer), 2e-6);
  }
}

} // namespace
} // namespace hotloop::compress
