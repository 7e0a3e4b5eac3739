#include "hotloop/interop/load_weights.h"

#include "hotloop/core/error.h"
#include "hotloop/interop/export.h"
#include "hotloop/interop/gpt2_layout.h"
#include "hotloop/interop/safetensors.h"
#include "hotloop/interop/torch_file.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/gpt.h"
#include "hotloop/models/gpt_generate.h"
#include "hotloop/models/mlp.h"
#include "hotloop/models/resnet.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/classifier.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace hotloop::interop {
namespace {

using ::hotloop::testing::Reference;
using ::hotloop::testing::TempDir;
using ::hotloop::testing::to_tensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kTolerance = 1e-5;

std::string reference(const std::string& name) {
  return std::string(HOTLOOP_TEST_REFERENCE_DIR) + "/interop/" + name;
}

const Reference& interop_reference() {
  return Reference::get("interop/interop.txt");
}

at::Tensor case_input(const std::string& name) {
  return to_tensor(interop_reference().one(name, "input", "x"), at::kFloat, 64);
}

at::Tensor expected_logits(
    const std::string& name, const char* field = "logits") {
  return to_tensor(interop_reference().one(name, "output", field), at::kFloat);
}

models::FashionCnn small_cnn(int64_t classes = 10) {
  models::FashionCnnOptions options;
  options.channels = {4, 8};
  options.hidden = 16;
  options.num_classes = classes;
  return models::FashionCnn(options);
}

models::Gpt tiny_gpt() {
  return models::Gpt(models::GptOptions::tiny());
}

models::Gpt gpt2_shaped(int64_t vocab) {
  return models::Gpt(models::GptOptions()
                         .vocab_size(vocab)
                         .block_size(16)
                         .n_layer(2)
                         .n_head(2)
                         .n_embd(8));
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

std::vector<std::string> names_of(const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors.tensors) {
    names.push_back(name);
  }
  return names;
}

TEST(StateDict, NamesAndOrdersEntriesAsPythonsStateDict) {
  // torchvision's resnet18().state_dict(), as make_models_reference.py
  // wrote it: every name, in order.
  const models::ResNet resnet(models::ResNetOptions(18));
  std::vector<std::string> python;
  for (const auto& entry : Reference::get("resnet_state_dicts.txt")
                               .all("resnet18_imagenet", "state")) {
    python.push_back(entry.name);
  }
  EXPECT_EQ(names_of(state_dict(*resnet)), python);
  // The CNN's as its twin's in make_interop_reference.py.
  EXPECT_EQ(
      names_of(state_dict(*small_cnn())),
      names_of(load_torch_state_dict(reference("cnn.pt"))));
}

TEST(LoadWeights, PythonsCnnGivesPythonsLogitsFromEitherFormat) {
  for (const char* file : {"cnn.pt", "cnn.safetensors"}) {
    models::FashionCnn cnn = small_cnn();
    const LoadReport report =
        load_weights(*cnn, read_weights(reference(file)), file);
    EXPECT_TRUE(report.complete()) << file;
    EXPECT_EQ(report.loaded.size(), 16u) << file;
    // num_batches_tracked after the script's 3 steps, running statistics.
    EXPECT_EQ(
        cnn->named_buffers()["features.1.num_batches_tracked"].item<int64_t>(),
        3);
    cnn->eval();
    const at::Tensor logits = cnn->forward(case_input("cnn"));
    EXPECT_LE(max_diff(logits, expected_logits("cnn")), kTolerance) << file;
  }
}

TEST(LoadWeights, PythonsMlpGivesPythonsLogits) {
  models::Mlp mlp(models::MlpOptions(20, 5).hidden({16, 8}));
  load_weights(*mlp, read_weights(reference("mlp.pt")), "mlp.pt");
  EXPECT_LE(
      max_diff(mlp->forward(case_input("mlp")), expected_logits("mlp")),
      kTolerance);
}

// A Lightning checkpoint: its state_dict, under the LightningModule's
// attribute name, beside optimizer and scheduler states, callback states
// with tensors, loops and hyper-parameters, which are read past.
TEST(LoadWeights, ALightningCheckpointGivesItsStateDict) {
  const NamedTensors file = read_weights(reference("lightning.ckpt"));
  EXPECT_THAT(
      names_of(file),
      ElementsAre(
          "model.layers.0.weight",
          "model.layers.0.bias",
          "model.layers.1.weight",
          "model.layers.1.bias",
          "model.layers.2.weight",
          "model.layers.2.bias"));
  models::Mlp mlp(models::MlpOptions(20, 5).hidden({16, 8}));
  const LoadReport report = load_weights(*mlp, file, "lightning.ckpt");
  EXPECT_TRUE(report.complete());
  EXPECT_EQ(report.renamed, "'model.' removed");
  EXPECT_LE(
      max_diff(mlp->forward(case_input("mlp")), expected_logits("mlp")),
      kTolerance);
}

TEST(
    LoadWeights, NanoGptsStateDictLoadsStrictlyWithItsMasksAndTiedHeadIgnored) {
  const Reference& ref = interop_reference();
  const at::Tensor idx = to_tensor(ref.one("gpt", "tokens", "idx"), at::kLong);
  for (const char* file : {"gpt.pt", "gpt.safetensors"}) {
    models::Gpt gpt = tiny_gpt();
    const LoadReport report =
        load_weights(*gpt, read_weights(reference(file)), file);
    EXPECT_TRUE(report.missing.empty()) << file;
    // The .pt has lm_head.weight (wte's storage) and, written by PyTorch
    // 1.13's nanoGPT, each block's attn.bias mask.
    if (std::string(file) == "gpt.pt") {
      EXPECT_THAT(
          report.ignored,
          ::testing::IsSupersetOf({std::string("lm_head.weight")}));
    }
    gpt->eval();
    EXPECT_LE(max_diff(gpt->forward(idx), expected_logits("gpt")), kTolerance)
        << file;
  }
}

TEST(LoadWeights, AHuggingFaceGpt2GivesTheLogitsAndGreedyTokensOfPython) {
  const Reference& ref = interop_reference();
  const at::Tensor idx =
      to_tensor(ref.one("gpt2_hf", "tokens", "idx"), at::kLong);
  const at::Tensor greedy =
      to_tensor(ref.one("gpt2_hf", "greedy", "tokens"), at::kLong);
  NamedTensors file = read_weights(reference("gpt2_hf.safetensors"));
  ASSERT_TRUE(is_hf_gpt2(file));
  // With the `transformer.` prefix too, as GPT2LMHeadModel saves it.
  NamedTensors prefixed;
  for (const auto& [name, tensor] : file.tensors) {
    prefixed.add("transformer." + name, tensor);
  }
  ASSERT_TRUE(is_hf_gpt2(prefixed));
  for (const NamedTensors* weights : {&file, &prefixed}) {
    for (const int64_t vocab : {int64_t{50257}, int64_t{50304}}) {
      models::Gpt gpt = gpt2_shaped(vocab);
      const LoadReport report = load_weights(
          *gpt,
          from_hf_gpt2(*weights, vocab, "gpt2_hf.safetensors"),
          "gpt2_hf.safetensors");
      EXPECT_TRUE(report.complete());
      gpt->eval();
      const at::Tensor logits = gpt->forward(idx).slice(2, 0, 256);
      EXPECT_LE(
          max_diff(logits, expected_logits("gpt2_hf", "logits256")),
          kTolerance);
      // Greedy decoding: top-1 sampling; the padded rows never sampled.
      const at::Tensor tokens = models::generate(
          *gpt,
          greedy.slice(1, 0, 3),
          models::GenerateOptions().max_new_tokens(20).top_k(1).vocab_limit(
              vocab > 50257 ? 50257 : 0));
      EXPECT_TRUE(at::equal(tokens, greedy)) << tokens;
    }
  }
  // Exported back to the layout, the file's tensors bit for bit (less the
  // masks, which hotloop does not keep).
  models::Gpt gpt = gpt2_shaped(50304);
  load_weights(*gpt, from_hf_gpt2(file, 50304, "x"), "x");
  const NamedTensors back = to_hf_gpt2(state_dict(*gpt), 50257);
  size_t compared = 0;
  for (const auto& [name, tensor] : file.tensors) {
    if (name.find("attn.bias") != std::string::npos && tensor.dim() == 4) {
      continue;
    }
    if (name.find("masked_bias") != std::string::npos) {
      continue;
    }
    ASSERT_NE(back.find(name), nullptr) << name;
    EXPECT_TRUE(at::equal(*back.find(name), tensor)) << name;
    ++compared;
  }
  EXPECT_EQ(compared, back.size());
  EXPECT_THROWS_WITH(
      Error,
      from_hf_gpt2(file, 1000, "gpt2_hf.safetensors"),
      "gpt2_hf.safetensors: 'wte.weight' holds 50257 tokens, more than "
      "model.vocab_size=1000");
}

TEST(LoadWeights, AFileOfAnotherModelIsRefusedNamingItsKeysAndNothingChanges) {
  models::Mlp mlp(models::MlpOptions(784, 10).hidden({16}));
  const at::Tensor before = mlp->parameters()[0].clone();
  EXPECT_THROWS_WITH(
      Error,
      load_weights(*mlp, read_weights(reference("cnn.pt")), "cnn.pt"),
      "cnn.pt: does not match the model: 4 of the model's entries missing "
      "('layers.0.weight', 'layers.0.bias', 'layers.1.weight' and 1 more); "
      "16 unexpected ('features.0.weight', 'features.1.weight', "
      "'features.1.bias' and 13 more) (a file of another model?)");
  EXPECT_TRUE(at::equal(mlp->parameters()[0], before));
}

TEST(LoadWeights, AShapeThatDiffersNamesTheKeyAndBothShapes) {
  models::FashionCnn cnn = small_cnn(4);
  const at::Tensor before = cnn->parameters()[0].clone();
  const NamedTensors python = read_weights(reference("cnn.pt"));
  EXPECT_THROWS_WITH(
      Error,
      load_weights(*cnn, python, "cnn.pt"),
      "cnn.pt: does not match the model: 2 of another shape or dtype "
      "('head.3.weight' is [10, 16] Float in the file, [4, 16] Float in the "
      "model)");
  EXPECT_TRUE(at::equal(cnn->parameters()[0], before));
  // Not strict: the rest loads, the head stays as initialised.
  const at::Tensor head = cnn->named_parameters()["head.3.weight"].clone();
  LoadReport report =
      load_weights(*cnn, python, "cnn.pt", LoadOptions().strict(false));
  EXPECT_EQ(report.loaded.size(), 14u);
  ASSERT_EQ(report.mismatched.size(), 2u);
  EXPECT_EQ(report.mismatched[0].name, "head.3.weight");
  EXPECT_EQ(report.mismatched[0].file_shape, (std::vector<int64_t>{10, 16}));
  EXPECT_EQ(report.mismatched[0].model_shape, (std::vector<int64_t>{4, 16}));
  EXPECT_TRUE(at::equal(cnn->named_parameters()["head.3.weight"], head));
  EXPECT_TRUE(at::equal(
      cnn->named_parameters()["features.0.weight"],
      *python.find("features.0.weight")));
  std::ostringstream table;
  report.print(table);
  EXPECT_THAT(
      table.str(),
      HasSubstr("init_from cnn.pt: 14 loaded, 0 missing, 0 unexpected, 2 of "
                "another shape, 0 skipped, 0 ignored\n"
                "  another shape  head.3.weight: [10, 16] in the file, [4, "
                "16] in the model (kept as initialised)\n"));
  // A new head, strict: skip it.
  report = load_weights(
      *small_cnn(4), python, "cnn.pt", LoadOptions().skip({"head.3"}));
  EXPECT_THAT(report.skipped, ElementsAre("head.3.weight", "head.3.bias"));
  EXPECT_EQ(report.loaded.size(), 14u);
}

TEST(LoadWeights, ATaskModulesPrefixIsMatchedEitherWay) {
  // The command line's modules hold the network as `network`.
  train::ImageClassifier module(
      torch::nn::AnyModule(small_cnn()),
      optim::OptimizerOptions{},
      optim::SchedulerOptions{});
  LoadReport report = load_weights(
      module,
      read_weights(reference("cnn.pt")),
      "cnn.pt",
      LoadOptions().model_prefix("network."));
  EXPECT_EQ(report.renamed, "'network.' added");
  EXPECT_EQ(report.loaded.front(), "features.0.weight");
  // Its checkpoint into a bare network.
  TempDir dir;
  train::save_checkpoint(dir.file("last.ckpt"), module);
  EXPECT_EQ(
      detect_weights_format(dir.file("last.ckpt")), WeightsFormat::kCheckpoint);
  const NamedTensors ckpt = read_weights(dir.file("last.ckpt"));
  EXPECT_EQ(ckpt.tensors.front().first, "network.features.0.weight");
  models::FashionCnn bare = small_cnn();
  report = load_weights(*bare, ckpt, "last.ckpt");
  EXPECT_EQ(report.renamed, "'network.' removed");
  EXPECT_TRUE(report.complete());
}

TEST(LoadWeights, FloatingPointWeightsAreCastAndOthersMustMatch) {
  models::FashionCnn cnn = small_cnn();
  NamedTensors weights = read_weights(reference("cnn.pt"));
  for (auto& [name, tensor] : weights.tensors) {
    if (at::isFloatingType(tensor.scalar_type())) {
      tensor = tensor.to(at::kBFloat16);
    }
  }
  load_weights(*cnn, weights, "bf16");
  EXPECT_EQ(cnn->parameters()[0].scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(
      cnn->parameters()[0], weights.find("features.0.weight")->to(at::kFloat)));
  NamedTensors floats;
  floats.add("features.1.num_batches_tracked", at::scalar_tensor(3.0));
  const LoadReport report =
      load_weights(*cnn, floats, "f", LoadOptions().strict(false));
  ASSERT_EQ(report.mismatched.size(), 1u);
  EXPECT_EQ(report.mismatched[0].file_dtype, at::kFloat);
  EXPECT_EQ(report.mismatched[0].model_dtype, at::kLong);
}

TEST(FreezeParameters, StopsTheGradientsOfWhatThePatternsName) {
  models::FashionCnn cnn = small_cnn();
  const std::vector<std::string> frozen =
      freeze_parameters(*cnn, {"features", "head.1.bias"});
  EXPECT_THAT(
      frozen,
      ElementsAre(
          "features.0.weight",
          "features.1.weight",
          "features.1.bias",
          "features.4.weight",
          "features.5.weight",
          "features.5.bias",
          "head.1.bias"));
  for (const auto& p : cnn->named_parameters()) {
    const bool expected_frozen =
        std::find(frozen.begin(), frozen.end(), p.key()) != frozen.end();
    EXPECT_EQ(p.value().requires_grad(), !expected_frozen) << p.key();
  }
  // Under a task module, names are matched without its `network.`.
  train::ImageClassifier module(
      torch::nn::AnyModule(small_cnn()),
      optim::OptimizerOptions{},
      optim::SchedulerOptions{});
  EXPECT_EQ(
      freeze_parameters(module, {"head.*.weight"}, "network.").size(), 2u);
  EXPECT_THROWS_WITH(
      ConfigError,
      freeze_parameters(*cnn, {"fc"}),
      "model.freeze: 'fc' matches no parameter (they are named like "
      "'features.0.weight', 'features.1.weight', 'features.1.bias' and 7 "
      "more)");
}

TEST(NameMatches, GlobsAndBareModuleNames) {
  EXPECT_TRUE(name_matches("layer1", "layer1.0.conv1.weight"));
  EXPECT_FALSE(name_matches("layer1", "layer10.weight"));
  EXPECT_TRUE(name_matches("layer?.0.*", "layer3.0.bn1.bias"));
  EXPECT_TRUE(name_matches("*.bias", "fc.bias"));
  EXPECT_FALSE(name_matches("*.bias", "fc.weight"));
  EXPECT_TRUE(name_matches("fc.weight", "fc.weight"));
}

TEST(WeightsFormat, IsToldByContent) {
  EXPECT_EQ(
      detect_weights_format(reference("cnn.safetensors")),
      WeightsFormat::kSafetensors);
  EXPECT_EQ(detect_weights_format(reference("cnn.pt")), WeightsFormat::kTorch);
  EXPECT_EQ(
      detect_weights_format(reference("legacy.pt")), WeightsFormat::kTorch);
  EXPECT_THROWS_WITH(
      Error,
      detect_weights_format(reference("interop.txt")),
      "interop.txt: not a weights file hotloop reads");
  EXPECT_THROWS_WITH(
      Error, read_weights(reference("nope.pt")), "nope.pt: cannot open");
}

TEST(Export, WritesEitherFormatWithTheTiedHeadAsNanoGptHasIt) {
  TempDir dir;
  models::Gpt gpt = tiny_gpt();
  const NamedTensors pt = export_module(*gpt, dir.file("gpt.pt"));
  EXPECT_NE(pt.find("lm_head.weight"), nullptr);
  const NamedTensors back = load_torch_state_dict(dir.file("gpt.pt"));
  EXPECT_EQ(
      back.find("lm_head.weight")->data_ptr(),
      back.find("transformer.wte.weight")->data_ptr());
  export_module(
      *gpt,
      dir.file("gpt.safetensors"),
      ExportOptions().dtype("bfloat16").metadata({{"k", "v"}}));
  const SafetensorsFile file(dir.file("gpt.safetensors"));
  EXPECT_FALSE(file.contains("lm_head.weight"));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("k"), "v");
  EXPECT_EQ(file.entry("transformer.wte.weight").dtype, at::kBFloat16);
  EXPECT_THROWS_WITH(
      ConfigError,
      export_module(*gpt, dir.file("gpt.onnx")),
      "gpt.onnx: the output's extension says its format");
  EXPECT_THROWS_WITH(
      ConfigError,
      export_module(*gpt, dir.file("x.pt"), ExportOptions().dtype("int8")),
      "--dtype: expected float32, bfloat16 or float16, got 'int8'");
  EXPECT_FALSE(std::ifstream(dir.file("x.pt")).good());
}

} // namespace
} // namespace hotloop::interop
