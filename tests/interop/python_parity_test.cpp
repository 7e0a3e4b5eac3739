// Both directions against the real Python models, with Python running:
// hotloop's exported weights loaded by torch.load(weights_only=True) (and a
// safetensors reader written from the format's specification) into
// nanoGPT's GPT, torchvision's resnet18 and the CNN's and MLP's twins give
// hotloop's logits; torchvision's resnet18 saved by Python gives Python's
// logits in hotloop. tests/reference/make_interop_reference.py is the
// Python side. Skipped where the test Python has no torch or
// torchvision (the committed files of load_weights_test cover the Python
// to hotloop direction without Python).
#include "hotloop/interop/export.h"
#include "hotloop/interop/load_weights.h"
#include "hotloop/interop/safetensors.h"
#include "hotloop/interop/torch_file.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/gpt.h"
#include "hotloop/models/mlp.h"
#include "hotloop/models/resnet.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hotloop::interop {
namespace {

using ::hotloop::testing::Reference;
using ::hotloop::testing::TempDir;
using ::hotloop::testing::to_tensor;
using ::testing::HasSubstr;

const std::string kScript = std::string(HOTLOOP_SOURCE_DIR) +
                            "/tests/reference/make_interop_reference.py";

// Runs a shell command; its exit status and output (stdout and stderr).
std::pair<int, std::string> shell(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    return {-1, "popen failed"};
  }
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    output += buffer;
  }
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// The interpreter: the environment's HOTLOOP_TEST_PYTHON where set (say a
// wrapper that runs another root's python3), the configured one otherwise.
std::string python() {
  const char* chosen = std::getenv("HOTLOOP_TEST_PYTHON");
  return chosen != nullptr && *chosen != '\0' ? chosen : HOTLOOP_TEST_PYTHON;
}

// "" when python() imports `modules`, else why not.
std::string why_no_python(const std::string& modules = "torch, torchvision") {
  const auto [code, output] = shell(python() + " -c 'import " + modules + "'");
  return code == 0 ? ""
                   : "needs " + python() + " with " + modules + ": " +
                         output.substr(0, output.find('\n'));
}

// "<case> input|tokens ... " and "<case> output logits ..." as the script
// reads them.
void write_case(
    const std::string& path,
    const std::string& name,
    const at::Tensor& input,
    const at::Tensor& logits) {
  std::ofstream out(path);
  const auto shape = [](const at::Tensor& t) {
    return ::hotloop::testing::shape_string(t.sizes());
  };
  if (input.scalar_type() == at::kLong) {
    out << name << " tokens idx " << shape(input);
    const at::Tensor flat = input.flatten();
    for (int64_t i = 0; i < flat.numel(); ++i) {
      out << " " << flat[i].item<int64_t>();
    }
  } else {
    out << name << " input x " << shape(input);
    const at::Tensor k = (input * 64).round().to(at::kLong).flatten();
    for (int64_t i = 0; i < k.numel(); ++i) {
      out << " " << k[i].item<int64_t>();
    }
  }
  out << "\n" << name << " output logits " << shape(logits);
  out.precision(9);
  const at::Tensor flat = logits.flatten().to(at::kDouble);
  for (int64_t i = 0; i < flat.numel(); ++i) {
    out << " " << flat[i].item<double>();
  }
  out << "\n";
}

// A [shape] input of k/64 values, as the script's.
at::Tensor quantized_input(at::IntArrayRef shape, uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  return (at::randn(shape, g) * 64).round() / 64;
}

TEST(PythonParity, HotloopsExportedModelsGiveHotloopsLogitsInPython) {
  if (const std::string why = why_no_python(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  TempDir dir;
  at::manual_seed(3);
  // hotloop's own initialisation, BatchNorm statistics moved by training-
  // mode forwards, then each model exported in both formats.
  models::FashionCnnOptions cnn_options;
  cnn_options.channels = {4, 8};
  cnn_options.hidden = 16;
  models::FashionCnn cnn(cnn_options);
  cnn->train();
  for (int i = 0; i < 3; ++i) {
    cnn->forward(at::randn({8, 1, 28, 28}));
  }
  cnn->eval();
  const at::Tensor cnn_x = quantized_input({2, 1, 28, 28}, 1);
  write_case(dir.file("cnn.txt"), "cnn", cnn_x, cnn->forward(cnn_x));

  models::Mlp mlp(models::MlpOptions(20, 5).hidden({16, 8}));
  const at::Tensor mlp_x = quantized_input({3, 4, 5}, 2);
  write_case(dir.file("mlp.txt"), "mlp", mlp_x, mlp->forward(mlp_x));

  models::Gpt gpt(models::GptOptions::tiny());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : gpt->parameters()) {
      if (p.dim() == 2) {
        p.mul_(10); // O(1) activations, as the reference script's
      }
    }
  }
  gpt->eval();
  const at::Tensor idx = at::randint(0, 64, {2, 16}, at::kLong);
  write_case(dir.file("gpt.txt"), "gpt", idx, gpt->forward(idx));

  models::ResNet resnet(models::ResNetOptions(18).num_classes(10));
  resnet->train();
  for (int i = 0; i < 2; ++i) {
    resnet->forward(at::randn({4, 3, 64, 64}));
  }
  resnet->eval();
  const at::Tensor resnet_x = quantized_input({2, 3, 64, 64}, 4);
  write_case(
      dir.file("resnet18.txt"),
      "resnet18",
      resnet_x,
      resnet->forward(resnet_x));

  for (const char* ext : {".pt", ".safetensors"}) {
    export_module(*cnn, dir.file(std::string("cnn") + ext));
    export_module(*mlp, dir.file(std::string("mlp") + ext));
    export_module(*gpt, dir.file(std::string("gpt") + ext));
    export_module(*resnet, dir.file(std::string("resnet18") + ext));
  }
  const auto [code, output] =
      shell(python() + " " + kScript + " check " + dir.path());
  EXPECT_EQ(code, 0) << output;
  for (const char* file :
       {"cnn.pt",
        "cnn.safetensors",
        "mlp.pt",
        "mlp.safetensors",
        "gpt.pt",
        "gpt.safetensors",
        "resnet18.pt",
        "resnet18.safetensors"}) {
    EXPECT_THAT(output, HasSubstr(std::string("ok ") + file + ":")) << output;
  }
  // torch.load gives an OrderedDict (the .pt) of every entry.
  EXPECT_THAT(output, HasSubstr("ok resnet18.pt: OrderedDict of 122 tensors"));
}

TEST(PythonParity, TorchvisionsResnet18SavedByPythonGivesPythonsLogits) {
  if (const std::string why = why_no_python(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  TempDir dir;
  const auto [code, output] =
      shell(python() + " " + kScript + " resnet " + dir.path());
  ASSERT_EQ(code, 0) << output;
  std::ifstream text(dir.file("resnet18.txt"));
  std::string input_line;
  std::string output_line;
  std::getline(text, input_line);
  std::getline(text, output_line);
  const auto parse =
      [](const std::string& line, at::ScalarType dtype, double scale) {
        std::istringstream in(line);
        std::string name, field, tensor_name, shape;
        in >> name >> field >> tensor_name >> shape;
        std::vector<double> values;
        double v = 0;
        while (in >> v) {
          values.push_back(v);
        }
        return at::tensor(values, at::kDouble)
            .view(::hotloop::testing::parse_shape(shape))
            .div(scale)
            .to(dtype);
      };
  const at::Tensor x = parse(input_line, at::kFloat, 64);
  const at::Tensor expected = parse(output_line, at::kFloat, 1);
  for (const char* file : {"resnet18.pt", "resnet18.safetensors"}) {
    models::ResNet resnet(models::ResNetOptions(18).num_classes(10));
    const LoadReport report =
        load_weights(*resnet, read_weights(dir.file(file)), file);
    EXPECT_TRUE(report.complete()) << file;
    EXPECT_EQ(report.loaded.size(), 122u) << file;
    resnet->eval();
    EXPECT_LE((resnet->forward(x) - expected).abs().max().item<double>(), 1e-5)
        << file;
  }
}

// torch alone (scripts/torch2.sh's root has PyTorch 2.6 without
// torchvision: there this runs 2.x's weights_only reader).
TEST(PythonParity, TorchLoadWithWeightsOnlyReadsEveryDtypeHotloopWrites) {
  if (const std::string why = why_no_python("torch"); !why.empty()) {
    GTEST_SKIP() << why;
  }
  TempDir dir;
  NamedTensors tensors;
  const std::pair<const char*, at::ScalarType> dtypes[] = {
      {"f64", at::kDouble},
      {"f32", at::kFloat},
      {"f16", at::kHalf},
      {"bf16", at::kBFloat16},
      {"i64", at::kLong},
      {"i32", at::kInt},
      {"i16", at::kShort},
      {"i8", at::kChar},
      {"u8", at::kByte},
      {"bool", at::kBool}};
  for (const auto& [name, dtype] : dtypes) {
    tensors.add(name, at::arange(6).remainder(2).to(dtype));
  }
  const at::Tensor shared = at::arange(6, at::kFloat);
  tensors.add("a", shared);
  tensors.add("b", shared.view({2, 3}).t());
  save_torch_state_dict(dir.file("all.pt"), tensors);
  const std::string check =
      "import torch, collections\n"
      "d = torch.load('" +
      dir.file("all.pt") +
      "', weights_only=True)\n"
      "assert type(d) is collections.OrderedDict, type(d)\n"
      "names = ['f64','f32','f16','bf16','i64','i32','i16','i8','u8','bool']\n"
      "types = [torch.float64, torch.float32, torch.float16, torch.bfloat16,\n"
      "         torch.int64, torch.int32, torch.int16, torch.int8, "
      "torch.uint8,\n"
      "         torch.bool]\n"
      "assert list(d) == names + ['a', 'b'], list(d)\n"
      "for n, t in zip(names, types):\n"
      "    assert d[n].dtype == t and d[n].tolist() == "
      "torch.arange(6).remainder(2).to(t).tolist(), n\n"
      "assert d['b'].tolist() == [[0, 3], [1, 4], [2, 5]]\n"
      "assert d['b'].data_ptr() == d['a'].data_ptr()\n"
      "print('read', len(d))\n";
  std::ofstream(dir.file("check.py")) << check;
  const auto [code, output] = shell(python() + " " + dir.file("check.py"));
  EXPECT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("read 12"));
}

// The safetensors library itself (Debian 13's python3-safetensors, which
// scripts/torch2.sh installs in its root; Debian 12 has none, so it is
// skipped here): it reads every dtype and the metadata hotloop writes, and
// hotloop reads what it writes.
TEST(PythonParity, TheSafetensorsLibraryReadsHotloopsFilesAndTheReverse) {
  if (const std::string why = why_no_python("torch, safetensors");
      !why.empty()) {
    GTEST_SKIP() << why;
  }
  TempDir dir;
  const std::pair<const char*, at::ScalarType> dtypes[] = {
      {"f64", at::kDouble},
      {"f32", at::kFloat},
      {"f16", at::kHalf},
      {"bf16", at::kBFloat16},
      {"i64", at::kLong},
      {"i32", at::kInt},
      {"i16", at::kShort},
      {"i8", at::kChar},
      {"u8", at::kByte},
      {"bool", at::kBool}};
  // Each dtype's [2, 3] tensor of 0..5 (halves for the floating ones, 0/1
  // for bool), as the script builds it.
  const auto expected = [](at::ScalarType dtype) {
    at::Tensor t = at::arange(6, at::kDouble).view({2, 3});
    if (dtype == at::kBool) {
      return t.remainder(2).to(dtype);
    }
    return (at::isFloatingType(dtype) ? t * 0.5 : t).to(dtype);
  };
  NamedTensors ours;
  for (const auto& [name, dtype] : dtypes) {
    ours.add(name, expected(dtype));
  }
  ours.metadata["format"] = "pt";
  ours.metadata["written_by"] = "hotloop";
  save_safetensors(dir.file("hotloop.safetensors"), ours);
  const std::string script =
      "import sys, torch\n"
      "from safetensors import safe_open\n"
      "from safetensors.torch import load_file, save_file\n"
      "names = ['f64','f32','f16','bf16','i64','i32','i16','i8','u8','bool']\n"
      "types = [torch.float64, torch.float32, torch.float16, torch.bfloat16,\n"
      "         torch.int64, torch.int32, torch.int16, torch.int8, "
      "torch.uint8,\n"
      "         torch.bool]\n"
      "def expected(t):\n"
      "    x = torch.arange(6, dtype=torch.float64).view(2, 3)\n"
      "    if t == torch.bool: return x.remainder(2).to(t)\n"
      "    return (x * 0.5 if t.is_floating_point else x).to(t)\n"
      "d = load_file(sys.argv[1])\n"
      "assert sorted(d) == sorted(names), sorted(d)\n"
      "for n, t in zip(names, types):\n"
      "    assert d[n].dtype == t and torch.equal(d[n], expected(t)), n\n"
      "with safe_open(sys.argv[1], 'pt') as f:\n"
      "    meta = f.metadata()\n"
      "assert meta == {'format': 'pt', 'written_by': 'hotloop'}, meta\n"
      "save_file({n: expected(t) for n, t in zip(names, types)}, sys.argv[2],\n"
      "          metadata={'format': 'pt', 'written_by': 'python'})\n"
      "print('read', len(d))\n";
  std::ofstream(dir.file("roundtrip.py")) << script;
  const auto [code, output] = shell(
      python() + " " + dir.file("roundtrip.py") + " " +
      dir.file("hotloop.safetensors") + " " + dir.file("python.safetensors"));
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("read 10"));

  const SafetensorsFile theirs(dir.file("python.safetensors"));
  EXPECT_EQ(theirs.metadata().at("written_by"), "python");
  ASSERT_EQ(theirs.entries().size(), 10u);
  for (const auto& [name, dtype] : dtypes) {
    const at::Tensor t = theirs.tensor(name);
    EXPECT_EQ(t.scalar_type(), dtype) << name;
    EXPECT_TRUE(t.equal(expected(dtype))) << name;
  }
}

} // namespace
} // namespace hotloop::interop
