// `hotloop export` and model.init_from / init_skip / init_strict / freeze
// through the command line.
#include "cli/run_cli.h"
#include "hotloop/cli/app.h"
#include "hotloop/interop/load_weights.h"
#include "hotloop/interop/safetensors.h"
#include "hotloop/interop/torch_file.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace hotloop::cli {
namespace {

namespace fs = std::filesystem;
using ::hotloop::testing::TempDir;
using ::testing::HasSubstr;

using ::hotloop::cli::testing::read_text;
using ::hotloop::cli::testing::Result;
using ::hotloop::cli::testing::run_cli;
using ::hotloop::cli::testing::run_process;
using ::hotloop::cli::testing::small_gpt_on_text;

std::string reference(const std::string& name) {
  return std::string(HOTLOOP_TEST_REFERENCE_DIR) + "/interop/" + name;
}

// The CNN of tests/reference/interop/cnn.pt (channels 4, 8; hidden 16) on
// a small fake MNIST: `command` with the options every test here shares.
std::vector<std::string> cnn_args(
    const TempDir& dir,
    const std::string& command,
    std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {
      command,
      "--trainer.accelerator=cpu",
      "--data.root=" + dir.file("data"),
      "--trainer.default_root_dir=" + dir.file("runs"),
      "--trainer.max_epochs=1",
      "--data.batch_size=32",
      "--data.val_batch_size=50",
      "--model.channels=[4, 8]",
      "--model.hidden=16",
      "--optimizer.lr=0.01"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const fs::path kRun = fs::path("runs") / "fashion_mnist" / "version_0";

TEST(CliInterop, ExportWritesTheModelForPythonAndInitFromReadsItBack) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 128, 100);
  Result r = run_cli(cnn_args(dir, "fit"));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path run = fs::path(dir.path()) / kRun;
  const std::string last = (run / "checkpoints" / "last.ckpt").string();
  r = run_cli({"export", last});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("export: 16 tensors"));
  EXPECT_THAT(
      r.out, HasSubstr("written to " + (run / "model.safetensors").string()));
  const interop::SafetensorsFile file((run / "model.safetensors").string());
  EXPECT_EQ(file.entries().size(), 16u);
  EXPECT_TRUE(file.contains("features.1.num_batches_tracked"));
  EXPECT_THAT(file.metadata().at("hotloop.config"), HasSubstr("model:"));
  EXPECT_EQ(file.metadata().at("hotloop.source"), "last.ckpt");
  std::ifstream json_file(run / "config.json");
  const nlohmann::json config = nlohmann::json::parse(json_file);
  EXPECT_EQ(config["config"]["model"]["channels"], "[4, 8]");
  EXPECT_EQ(config["layout"], "hotloop");

  // The same weights as a state_dict, in float16.
  r = run_cli(
      {"export",
       run.string(),
       "--output",
       dir.file("model.pt"),
       "--dtype",
       "float16"});
  ASSERT_EQ(r.code, 0) << r.err;
  const interop::NamedTensors pt =
      interop::load_torch_state_dict(dir.file("model.pt"));
  EXPECT_EQ(pt.find("features.0.weight")->scalar_type(), at::kHalf);
  EXPECT_EQ(
      pt.find("features.1.num_batches_tracked")->scalar_type(), at::kLong);

  // Validating from the exported file gives the checkpoint's metrics.
  const Result from_ckpt =
      run_cli(cnn_args(dir, "validate", {"--ckpt_path", last}));
  ASSERT_EQ(from_ckpt.code, 0) << from_ckpt.err;
  const Result from_file = run_cli(cnn_args(
      dir,
      "validate",
      {"--model.init_from=" + (run / "model.safetensors").string()}));
  ASSERT_EQ(from_file.code, 0) << from_file.err;
  EXPECT_THAT(
      from_file.out,
      HasSubstr(
          "init_from " + (run / "model.safetensors").string() +
          ": 16 loaded, 0 missing, 0 unexpected, 0 of another shape, 0 "
          "skipped, 0 ignored"));
  const auto metrics = [](const std::string& out) {
    return out.substr(out.find("val_acc "));
  };
  EXPECT_EQ(metrics(from_file.out), metrics(from_ckpt.out));
}

TEST(CliInterop, FineTunesPythonsWeightsWithFrozenLayersAndANewHead) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 128, 100);
  const std::string python = reference("cnn.pt");
  // Four classes where the file has ten: strict, the head's shape is
  // refused, naming it and both shapes, before anything is written.
  Result r = run_cli(cnn_args(
      dir, "fit", {"--model.num_classes=4", "--model.init_from=" + python}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr(
          "hotloop: error: " + python +
          ": does not match the model: 2 of another shape or dtype "
          "('head.3.weight' is [10, 16] Float in the file, [4, 16] "
          "Float in the model)"));
  EXPECT_FALSE(fs::exists(dir.file("runs")));
  // A new head: skipped, learnt from scratch; the features frozen.
  r = run_cli(cnn_args(
      dir,
      "fit",
      {"--model.num_classes=4",
       "--model.init_from=" + python,
       "--model.init_skip=head.3",
       "--model.freeze=features"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr(": 14 loaded, 0 missing, 0 unexpected, 0 of another shape, 2 "
                "skipped, 0 ignored (names: 'network.' added)\n"));
  EXPECT_THAT(
      r.out, HasSubstr("  skipped        head.3.weight (kept as initialised)"));
  EXPECT_THAT(
      r.out, HasSubstr("freeze: 6 parameters (348 values) trained no further"));
  const interop::NamedTensors trained = interop::read_weights(
      (fs::path(dir.path()) / kRun / "checkpoints" / "last.ckpt").string());
  const interop::NamedTensors original = interop::load_torch_state_dict(python);
  EXPECT_TRUE(at::equal(
      *trained.find("network.features.0.weight"),
      *original.find("features.0.weight")));
  EXPECT_TRUE(at::equal(
      *trained.find("network.features.5.bias"),
      *original.find("features.5.bias")));
  EXPECT_FALSE(at::equal(
      *trained.find("network.head.1.weight"), *original.find("head.1.weight")));
  // Not strict: the head's mismatch is listed, the rest loads.
  r = run_cli(cnn_args(
      dir,
      "validate",
      {"--model.num_classes=4",
       "--model.init_from=" + python,
       "--model.init_strict=false"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      HasSubstr("  another shape  head.3.weight: [10, 16] in the file, [4, "
                "16] in the model (kept as initialised)"));
}

// Data-parallel: every rank loads the file, the frozen layers have no
// gradient for the Reducer to wait on, and they leave the fit as loaded.
TEST(CliInterop, FrozenLayersStayAsLoadedUnderDdp) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 128, 100);
  const std::string python = reference("cnn.pt");
  const int code = run_process(
      cnn_args(
          dir,
          "fit",
          {"--model.init_from=" + python,
           "--model.freeze=features",
           "--trainer.strategy=ddp",
           "--trainer.devices=2",
           "--trainer.dist_timeout=60",
           "--trainer.enable_progress_bar=false"}),
      dir.file("fit.log"));
  const std::string log = read_text(dir.file("fit.log"));
  ASSERT_EQ(code, 0) << log;
  EXPECT_THAT(
      log, HasSubstr("freeze: 6 parameters (348 values) trained no further"));
  const interop::NamedTensors trained = interop::read_weights(
      (fs::path(dir.path()) / kRun / "checkpoints" / "last.ckpt").string());
  const interop::NamedTensors original = interop::load_torch_state_dict(python);
  for (const char* name :
       {"features.0.weight", "features.1.weight", "features.5.bias"}) {
    EXPECT_TRUE(at::equal(
        *trained.find(std::string("network.") + name), *original.find(name)))
        << name;
  }
  EXPECT_FALSE(at::equal(
      *trained.find("network.head.1.weight"), *original.find("head.1.weight")));
}

TEST(CliInterop, BadWeightFilesStopWithOneLineNamingThem) {
  TempDir dir;
  hotloop::testing::write_fake_mnist(dir.file("data"), 64, 50);
  const auto fit_from = [&](const std::string& path) {
    return run_cli(cnn_args(dir, "fit", {"--model.init_from=" + path}));
  };
  Result r = fit_from(dir.file("nope.safetensors"));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(dir.file("nope.safetensors") + ": cannot open"));
  // A file of another model: its keys.
  r = fit_from(reference("gpt.safetensors"));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr(": does not match the model: 16 of the model's entries "
                "missing ('features.0.weight', 'features.1.weight', "
                "'features.1.bias' and 13 more); "));
  // Truncated.
  std::ifstream in(reference("cnn.safetensors"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(dir.file("cut.safetensors"), std::ios::binary)
      << bytes.substr(0, bytes.size() - 100);
  r = fit_from(dir.file("cut.safetensors"));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("cut.safetensors: tensor 'head.3.weight': "));
  EXPECT_THAT(r.err, HasSubstr("truncated?"));
  // A dtype hotloop cannot hold; a value that is not a tensor.
  r = fit_from(reference("complex.pt"));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("a dtype hotloop cannot hold"));
  r = fit_from(reference("mixed.pt"));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("mixed.pt: 'step' is an integer, not a tensor"));
  // Each a single line; nothing written.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("runs")));
  r = run_cli(cnn_args(dir, "fit", {"--model.freeze=fc"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("model.freeze: 'fc' matches no parameter"));
}

TEST(CliInterop, GeneratesFromAHuggingFaceGpt2AsPythonDoes) {
  TempDir dir;
  std::ofstream(dir.file("tokens.bin")) << std::string(64, '\0');
  const std::vector<std::string> gpt2 = {
      "--trainer.accelerator=cpu",
      "--model.name=gpt",
      "--data.dataset=text",
      "--data.path=" + dir.file("tokens.bin"),
      "--data.token_bytes=2",
      "--model.n_layer=2",
      "--model.n_head=2",
      "--model.n_embd=8",
      "--data.block_size=16",
      "--model.init_from=" + reference("gpt2_hf.safetensors")};
  // nanoGPT's padded 50304 rows; the greedy tokens of the Python script.
  std::vector<std::string> args = {"generate"};
  args.insert(args.end(), gpt2.begin(), gpt2.end());
  args.insert(
      args.end(),
      {"--model.vocab_size=50304",
       "--prompt",
       "5 17 42",
       "--max_new_tokens",
       "20",
       "--top_k",
       "1"});
  const Result r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto& entry = hotloop::testing::Reference::get("interop/interop.txt")
                          .one("gpt2_hf", "greedy", "tokens");
  std::string expected;
  for (const double id : entry.values) {
    expected += (expected.empty() ? "" : " ") + std::to_string(int64_t(id));
  }
  EXPECT_EQ(r.out, expected + "\n---------------\n");
  EXPECT_THAT(r.err, HasSubstr("(Hugging Face GPT-2 layout): 28 loaded"));
  EXPECT_THAT(r.err, HasSubstr("4 ignored"));
  EXPECT_THAT(r.err, HasSubstr("padded         wte rows 50257 to 50304"));
}

TEST(CliInterop, AGptExportsToHuggingFacesLayoutAndGeneratesTheSameFromIt) {
  TempDir dir;
  const std::vector<std::string> gpt =
      small_gpt_on_text(dir.path(), {"--trainer.max_epochs=1"});
  std::vector<std::string> fit = {"fit"};
  fit.insert(fit.end(), gpt.begin(), gpt.end());
  Result r = run_cli(fit);
  ASSERT_EQ(r.code, 0) << r.err;
  // Named after the text file.
  const fs::path run = fs::path(dir.path()) / "runs" / "text" / "version_0";
  const std::string last = (run / "checkpoints" / "last.ckpt").string();
  r = run_cli(
      {"export",
       last,
       "--layout",
       "hf-gpt2",
       "--output",
       dir.file("hf/model.safetensors")});
  ASSERT_EQ(r.code, 0) << r.err;
  const interop::SafetensorsFile file(dir.file("hf/model.safetensors"));
  EXPECT_EQ(
      file.entry("h.0.attn.c_attn.weight").shape,
      (std::vector<int64_t>{32, 96}));
  EXPECT_FALSE(file.contains("lm_head.weight"));
  // A state_dict has the tied lm_head.weight as a key of its own, sharing
  // the embedding's storage: its values are counted once.
  r = run_cli({"export", last, "--output", dir.file("pt/model.pt")});
  ASSERT_EQ(r.code, 0) << r.err;
  const interop::NamedTensors pt =
      interop::read_weights(dir.file("pt/model.pt"));
  ASSERT_NE(pt.find("lm_head.weight"), nullptr);
  int64_t stored = 0;
  for (const auto& [name, tensor] : pt.tensors) {
    stored += name == "lm_head.weight" ? 0 : tensor.numel();
  }
  EXPECT_THAT(
      r.out,
      HasSubstr(
          std::to_string(pt.size()) + " tensors (" + std::to_string(stored) +
          " values)"));
  std::ifstream json_file(dir.file("hf/config.json"));
  const nlohmann::json config = nlohmann::json::parse(json_file);
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["n_layer"], 1);
  EXPECT_EQ(config["n_head"], 2);
  EXPECT_EQ(config["n_embd"], 32);
  EXPECT_EQ(config["vocab_size"], 256);
  EXPECT_EQ(config["activation_function"], "gelu");
  const auto generate = [&](const std::string& weights) {
    std::vector<std::string> g = {"generate"};
    g.insert(g.end(), gpt.begin(), gpt.end());
    g.insert(g.end(), {weights, "--prompt", "hot", "--max_new_tokens", "30"});
    return run_cli(g);
  };
  const Result from_ckpt = generate("--ckpt_path=" + last);
  const Result from_hf =
      generate("--model.init_from=" + dir.file("hf/model.safetensors"));
  ASSERT_EQ(from_ckpt.code, 0) << from_ckpt.err;
  ASSERT_EQ(from_hf.code, 0) << from_hf.err;
  EXPECT_EQ(from_hf.out, from_ckpt.out);
}

TEST(CliInterop, ExportArgumentsAreChecked) {
  Result r = run_cli({"export", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("usage: hotloop export CHECKPOINT|RUN_DIR"));
  r = run_cli({"export"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err, HasSubstr("hotloop export needs a checkpoint or a run folder"));
  TempDir dir;
  r = run_cli({"export", dir.path()});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(": a run folder without a checkpoint"));
  r = run_cli({"export", reference("cnn.pt"), "--output", dir.file("x.pt")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("cnn.pt: not a hotloop checkpoint"));
  r = run_cli({"export", reference("cnn.pt"), "--format", "x"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown option --format"));
  r = run_cli({"export", reference("cnn.pt"), "--output", dir.file("x.onnx")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(
      r.err, HasSubstr("x.onnx: the output's extension says its format"));
  EXPECT_TRUE(fs::is_empty(dir.path()));
  // The keys are in every command's help with their defaults.
  r = run_cli({"fit", "--help"});
  EXPECT_THAT(r.out, HasSubstr("--model.init_from="));
  EXPECT_THAT(r.out, HasSubstr("--model.init_strict=true"));
  EXPECT_THAT(r.out, HasSubstr("--model.freeze="));
}

} // namespace
} // namespace hotloop::cli
