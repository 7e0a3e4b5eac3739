// The command line's pruning section, hotloop quantize and hotloop shrink,
// and int8 checkpoints through test and predict.

#include "cli/run_cli.h"
#include "hotloop/cli/app.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/interop/load_weights.h"
#include "test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace hotloop::cli {
namespace {

namespace fs = std::filesystem;
using ::hotloop::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

using ::hotloop::cli::testing::Result;
using ::hotloop::cli::testing::run_cli;

std::vector<std::string> small_fit(
    const TempDir& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {
      "fit",
      "--trainer.accelerator=cpu",
      "--data.root=" + dir.file("data"),
      "--trainer.default_root_dir=" + dir.file("runs"),
      "--trainer.max_epochs=2",
      "--data.batch_size=32",
      "--data.val_batch_size=50",
      "--model.channels=[4, 8]",
      "--model.hidden=16",
      "--optimizer.lr=0.01"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

fs::path run_folder(const TempDir& dir, int version = 0) {
  return fs::path(dir.file("runs")) / "fashion_mnist" /
         ("version_" + std::to_string(version));
}

TEST(CompressCli, PruningSectionPrunesReportsSparsityAndTheCheckpointTests) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 100);
  Result r = run_cli({"fit", "--help"});
  EXPECT_THAT(r.out, HasSubstr("--pruning.amount"));
  EXPECT_THAT(r.out, HasSubstr("--pruning.pruning_fn"));
  r = run_cli(small_fit(
      dir,
      {"--pruning.enabled=true",
       "--pruning.amount=0.3",
       "--pruning.verbose=1",
       "--pruning.parameter_names=weight"}));
  ASSERT_EQ(r.code, 0) << r.err;
  // The weights: 36 + 4 + 288 + 8 + 16 * 392 + 16 * 10; 0.3 of them, then
  // 0.3 of what is left.
  EXPECT_THAT(
      r.out,
      HasSubstr("Applied `L1Unstructured`. Pruned: 0/6768 (0.00%) -> "
                "2030/6768 (29.99%)\n"));
  EXPECT_THAT(
      r.out,
      HasSubstr("Applied `L1Unstructured`. Pruned: 2030/6768 (29.99%) -> "
                "3451/6768 (50.99%)\n"));
  std::ifstream in(run_folder(dir) / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  ASSERT_TRUE(summary.contains("pruning")) << summary.dump(2);
  EXPECT_EQ(summary.at("pruning").at("prunings"), 2);
  EXPECT_NEAR(
      summary.at("pruning").at("total_sparsity").get<double>(), 0.51, 0.001);
  EXPECT_TRUE(summary.at("pruning")
                  .at("sparsity")
                  .contains("network.features.0.weight"));
  // The report shows it as a table of its own.
  r = run_cli({"report", run_folder(dir).string()});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream report(run_folder(dir) / "report.html");
  const std::string html(
      (std::istreambuf_iterator<char>(report)),
      std::istreambuf_iterator<char>());
  EXPECT_THAT(html, HasSubstr("network.features.0.weight"));
  // The last checkpoint carries the masks and tests on a fresh model.
  r = run_cli(
      {"test",
       "--config=" + (run_folder(dir) / "config.yaml").string(),
       "--ckpt_path=last"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("test_acc "));
}

TEST(CompressCli, BadPruningSettingsAreNamedAndWriteNothing) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 50);
  Result r = run_cli(
      small_fit(dir, {"--pruning.enabled=true", "--pruning.amount=1.5"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("pruning.amount: '1.5': amount=1.5 should either be a float in "
                "the range [0, 1] or a non-negative integer"));
  r = run_cli(small_fit(
      dir,
      {"--pruning.enabled=true",
       "--pruning.pruning_fn=ln_structured",
       "--pruning.pruning_dim=0",
       "--pruning.pruning_norm=2"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("pruning: Only the \"unstructured\" PRUNING_TYPE is supported "
                "with `use_global_unstructured=True`"));
  r = run_cli(small_fit(
      dir,
      {"--pruning.enabled=true",
       "--pruning.parameters_to_prune=network.features.9.weight"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("no parameter 'network.features.9.weight' in the model; its "
                "parameters: network.features.0.weight, "));
  EXPECT_FALSE(fs::exists(run_folder(dir)));
}

TEST(CompressCli, QuantizeWritesAnInt8CheckpointThatTestAndPredictRun) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 100);
  Result r = run_cli(small_fit(dir, {"--trainer.max_epochs=1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string config =
      "--config=" + (run_folder(dir) / "config.yaml").string();
  const std::string int8 = dir.file("model.int8.ckpt");
  r = run_cli(
      {"quantize",
       config,
       "--ckpt_path=last",
       "--calibration_batches=2",
       "--output=" + int8});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("quantize: static int8 on the "));
  EXPECT_THAT(r.out, HasSubstr("calibrated on 2 training batches"));
  EXPECT_THAT(r.out, HasSubstr("int8: val_acc "));
  EXPECT_TRUE(compress::is_quantized_checkpoint(int8));
  r = run_cli({"test", config, "--ckpt_path=" + int8});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("test_acc "));
  r = run_cli(
      {"predict",
       config,
       "--ckpt_path=" + int8,
       "--output=" + dir.file("p.csv")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(dir.file("p.csv")));
  r = run_cli({"checkpoint", int8});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("int8_model"));

  // A CNN has no Linear-only path for dynamic quantization: named, nothing
  // written.
  r = run_cli(
      {"quantize",
       config,
       "--ckpt_path=last",
       "--mode=dynamic",
       "--output=" + dir.file("dynamic.ckpt")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("cannot quantize hotloop::models::FashionCnnImpl "
                "dynamically: hotloop quantizes the Linear layers of an mlp "
                "(quantize_dynamic) and of a gpt"));
  EXPECT_FALSE(fs::exists(dir.file("dynamic.ckpt")));
  r = run_cli({"quantize", config});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("hotloop quantize needs --ckpt_path"));
  // An int8 checkpoint is not quantized again, nor shrunk.
  for (const char* command : {"quantize", "shrink"}) {
    r = run_cli(
        {command,
         config,
         "--ckpt_path=" + int8,
         "--output=" + dir.file("again.ckpt")});
    EXPECT_EQ(r.code, 1) << command;
    EXPECT_THAT(
        r.err,
        HasSubstr(
            int8 + ": an int8 (quantized) checkpoint, not a float "
                   "model's"))
        << command;
    EXPECT_FALSE(fs::exists(dir.file("again.ckpt"))) << command;
  }
}

// A GPT's Linear layers int8: quantize --mode dynamic, then test and
// generate from the int8 file.
TEST(CompressCli, QuantizeDynamicMakesAnInt8GptThatTestAndGenerateRun) {
  TempDir dir;
  const std::vector<std::string> gpt = ::hotloop::cli::testing::
      small_gpt_on_text(dir.path(), {"--trainer.name=gpt"});
  const auto command = [&](const std::string& name,
                           std::vector<std::string> extra) {
    std::vector<std::string> args = {name};
    args.insert(args.end(), gpt.begin(), gpt.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  Result r = command("fit", {"--trainer.max_epochs=1"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string int8 = dir.file("int8/gpt.int8.ckpt"); // a new folder
  // Static int8 has no kernels for attention: named, nothing written.
  r = command("quantize", {"--ckpt_path=last", "--output=" + int8});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err, HasSubstr("hotloop quantize: a GPT quantizes dynamically"));
  EXPECT_FALSE(fs::exists(fs::path(int8).parent_path()));

  // Its folder is made as predict's is; a folder as --output is named.
  r = command(
      "quantize",
      {"--ckpt_path=last", "--mode=dynamic", "--output=" + dir.path()});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(": is a folder; expected a file name"));
  r = command(
      "quantize", {"--ckpt_path=last", "--mode=dynamic", "--output=" + int8});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("quantize: dynamic int8 (the GPT's Linear layers, lm_head "
                "included) on the "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "fp32: val_loss [0-9.]+, [1-9][0-9]* tokens/s; int8: "
                         "val_loss [0-9.]+, [1-9][0-9]* tokens/s"));
  // Generation, one token at a time, is timed apart: there int8 can lose.
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "generate \\(one sequence, KV cache\\): fp32 "
                         "[1-9][0-9]* tokens/s; int8 [1-9][0-9]* tokens/s"));
  EXPECT_TRUE(compress::is_quantized_checkpoint(int8));
  // The float checkpoint's val_loss and the int8 one's, both printed, are
  // close: the same model.
  const auto losses = [](const std::string& out) {
    std::vector<double> found;
    for (size_t at = out.find("val_loss "); at != std::string::npos;
         at = out.find("val_loss ", at + 1)) {
      found.push_back(std::stod(out.substr(at + 9)));
    }
    return found;
  };
  const std::vector<double> both = losses(r.out);
  ASSERT_EQ(both.size(), 2u) << r.out;
  EXPECT_NEAR(both[1], both[0], 0.05 * both[0]);

  // Int8 runs on the CPU in float32: another precision is named.
  r = command(
      "test", {"--ckpt_path=" + int8, "--trainer.precision=bf16-mixed"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr(int8 + ": an int8 model runs in float32 around its int8 "
                       "layers, not trainer.precision=bf16-mixed"));
  r = command("test", {"--ckpt_path=" + int8});
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t at = r.out.find("test_loss ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NEAR(std::stod(r.out.substr(at + 10)), both[1], 1e-3);

  r = command(
      "generate",
      {"--ckpt_path=" + int8,
       "--prompt=hot",
       "--max_new_tokens=12",
       "--temperature=0.1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("hot", 0), 0u) << r.out;
  EXPECT_THAT(r.err, HasSubstr("generate: 12 tokens in "));
  // Training refuses the int8 file, naming it; so do model.init_from and
  // export, which take float weights.
  r = command(
      "fit", {"--trainer.max_epochs=2", "--ckpt_path=" + int8});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err, HasSubstr(int8 + ": an int8 (quantized) checkpoint, not a float "
                              "model's"));
  const std::string weights =
      ": an int8 (quantized) checkpoint: its tensors are int8 values and "
      "scales, not a float model's weights";
  r = command("fit", {"--trainer.max_epochs=1", "--model.init_from=" + int8});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(int8 + weights));
  r = run_cli({"export", int8, "--output", dir.file("gpt.safetensors")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(int8 + weights));
  EXPECT_FALSE(fs::exists(dir.file("gpt.safetensors")));
}

TEST(CompressCli, ShrinkMakesAStructurallyPrunedCnnSmallerWithTheSameResults) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 100);
  // Half the last block's filters, pruned by their L1 norm.
  Result r = run_cli(small_fit(
      dir,
      {"--trainer.max_epochs=1",
       "--pruning.enabled=true",
       "--pruning.pruning_fn=ln_structured",
       "--pruning.use_global_unstructured=false",
       "--pruning.pruning_dim=0",
       "--pruning.pruning_norm=1",
       "--pruning.parameters_to_prune=network.features.4.weight"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string config =
      "--config=" + (run_folder(dir) / "config.yaml").string();
  const std::string small = dir.file("small.ckpt");
  r = run_cli({"shrink", config, "--ckpt_path=last", "--output=" + small});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("shrink: [4, 8, 16] -> [4, 4, 16] units"));
  EXPECT_THAT(r.out, HasSubstr("--model.channels=[4, 4] --model.hidden=16"));
  r = run_cli({"test", config, "--ckpt_path=last"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string pruned_line = r.out.substr(r.out.find("test_acc"), 30);
  r = run_cli(
      {"test", config, "--model.channels=[4, 4]", "--ckpt_path=" + small});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.substr(r.out.find("test_acc"), 30), pruned_line);
}

} // namespace
} // namespace hotloop::cli

namespace hotloop::cli {
namespace {

TEST(CompressCli, QuantizationAwareFitWritesAnInt8ModelThatTestRuns) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 256, 100);
  Result r = run_cli({"fit", "--help"});
  EXPECT_THAT(r.out, HasSubstr("--quantization.qat"));
  EXPECT_THAT(r.out, HasSubstr("--quantization.freeze_bn_epoch"));
  r = run_cli(small_fit(
      dir,
      {"--quantization.qat=true",
       "--quantization.engine=onednn",
       "--quantization.freeze_bn_epoch=1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path int8 = run_folder(dir) / "int8.ckpt";
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "quantization-aware training: int8 model (onednn) written to " +
          int8.string()));
  ASSERT_TRUE(compress::is_quantized_checkpoint(int8.string()));
  std::ifstream in(run_folder(dir) / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  ASSERT_TRUE(summary.contains("quantization_aware_training"))
      << summary.dump(2);
  EXPECT_EQ(
      summary.at("quantization_aware_training").at("kind"), "fashion_cnn qat");
  const std::string config =
      "--config=" + (run_folder(dir) / "config.yaml").string();
  // The int8 model, and the QAT checkpoint itself (fake-quantized float).
  r = run_cli({"test", config, "--ckpt_path=" + int8.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("test_acc "));
  r = run_cli({"test", config, "--ckpt_path=last"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("test_acc "));
  // The observers stay still in test unless the stages name it: the loss
  // differs when they move.
  const Result moving = run_cli(
      {"test",
       config,
       "--ckpt_path=last",
       "--quantization.observer_enabled_stages=train,test"});
  ASSERT_EQ(moving.code, 0) << moving.err;
  const auto loss_line = [](const std::string& text) {
    const size_t at = text.find("test_loss");
    return at == std::string::npos ? std::string()
                                   : text.substr(at, text.find('\n', at) - at);
  };
  EXPECT_NE(loss_line(r.out), "");
  EXPECT_NE(loss_line(r.out), loss_line(moving.out));
  // hotloop quantize converts the QAT checkpoint without calibration.
  r = run_cli(
      {"quantize",
       config,
       "--ckpt_path=last",
       "--output=" + dir.file("again.int8.ckpt")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("quantize: the quantization-aware model converted to int8 on "
                "the onednn engine"));
  EXPECT_TRUE(compress::is_quantized_checkpoint(dir.file("again.int8.ckpt")));
  // Resumed, the fit goes on from the QAT checkpoint.
  r = run_cli(
      {"fit",
       config,
       "--ckpt_path=last",
       "--trainer.max_epochs=3",
       "--trainer.default_root_dir=" + dir.file("runs")});
  ASSERT_EQ(r.code, 0) << r.err;
}

TEST(CompressCli, QuantizationAwareFitStartsFromModelInitFrom) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 128, 50);
  Result r = run_cli(small_fit(dir, {"--trainer.max_epochs=1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path float_ckpt = run_folder(dir) / "checkpoints" / "last.ckpt";
  // lr 1e-30: the QAT fit's weights stay the float model's (an update
  // that small vanishes in float32).
  r = run_cli(small_fit(
      dir,
      {"--trainer.max_epochs=1",
       "--optimizer.lr=1e-30",
       "--optimizer.weight_decay=0",
       "--model.init_from=" + float_ckpt.string(),
       "--quantization.qat=true"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const interop::NamedTensors before = interop::read_weights(float_ckpt);
  const interop::NamedTensors after = interop::read_weights(
      (run_folder(dir, 1) / "checkpoints" / "last.ckpt").string());
  for (const auto& [qat_name, float_name] :
       std::vector<std::pair<std::string, std::string>>{
           {"network.features.0.weight", "network.features.0.weight"},
           {"network.features.0.bn.weight", "network.features.1.weight"},
           {"network.features.1.weight", "network.features.4.weight"},
           {"network.head.0.weight", "network.head.1.weight"},
           {"network.head.1.bias", "network.head.3.bias"}}) {
    ASSERT_NE(after.find(qat_name), nullptr) << qat_name;
    ASSERT_NE(before.find(float_name), nullptr) << float_name;
    EXPECT_TRUE(after.find(qat_name)->equal(*before.find(float_name)))
        << qat_name;
  }
  EXPECT_TRUE(fs::exists(run_folder(dir, 1) / "int8.ckpt"));
}

TEST(CompressCli, BadQuantizationSettingsAreNamedAndWriteNothing) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 50);
  Result r = run_cli(small_fit(
      dir, {"--quantization.qat=true", "--quantization.observer=minmax"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("quantization.observer=minmax needs quantization.fused=false"));
  r = run_cli(small_fit(
      dir,
      {"--quantization.qat=true",
       "--quantization.observer_enabled_stages=train,predict"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("quantization.observer_enabled_stages: expected train, "
                "validate or test, got 'predict'"));
  r = run_cli(small_fit(
      dir, {"--quantization.qat=true", "--trainer.precision=bf16-mixed"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err,
      HasSubstr("quantization.qat trains in float32 (the fake quantizers "
                "observe float32 ranges): set trainer.precision=32-true, not "
                "bf16-mixed"));
  r = run_cli(
      small_fit(dir, {"--quantization.qat=true", "--model.name=resnet18"}));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(
      r.err,
      HasSubstr("quantization-aware: hotloop has quantized "
                "kernels for fashion_cnn and mlp"));
  EXPECT_FALSE(fs::exists(run_folder(dir)));
}

} // namespace
} // namespace hotloop::cli
