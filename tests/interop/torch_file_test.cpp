#include "hotloop/interop/torch_file.h"

#include "hotloop/core/error.h"
#include "hotloop/interop/safetensors.h"
#include "hotloop/train/checkpoint.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

namespace hotloop::interop {
namespace {

using ::hotloop::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string reference(const std::string& name) {
  return std::string(HOTLOOP_TEST_REFERENCE_DIR) + "/interop/" + name;
}

std::vector<std::string> names_of(const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors.tensors) {
    names.push_back(name);
  }
  return names;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(TorchFile, ReadsTheStateDictPythonSavedWithBuffersInItsOrder) {
  // tests/reference/make_interop_reference.py: torch.save(cnn.state_dict())
  // after 3 training steps.
  const NamedTensors cnn = load_torch_state_dict(reference("cnn.pt"));
  EXPECT_THAT(
      names_of(cnn),
      ElementsAre(
          "features.0.weight",
          "features.1.weight",
          "features.1.bias",
          "features.1.running_mean",
          "features.1.running_var",
          "features.1.num_batches_tracked",
          "features.4.weight",
          "features.5.weight",
          "features.5.bias",
          "features.5.running_mean",
          "features.5.running_var",
          "features.5.num_batches_tracked",
          "head.1.weight",
          "head.1.bias",
          "head.3.weight",
          "head.3.bias"));
  const at::Tensor& steps = *cnn.find("features.1.num_batches_tracked");
  EXPECT_EQ(steps.scalar_type(), at::kLong);
  EXPECT_EQ(steps.dim(), 0);
  EXPECT_EQ(steps.item<int64_t>(), 3);
  EXPECT_EQ(
      cnn.find("features.0.weight")->sizes(), at::IntArrayRef({4, 1, 3, 3}));
  // The same state_dict as the script wrote it in safetensors.
  const SafetensorsFile same(reference("cnn.safetensors"));
  for (const auto& [name, tensor] : cnn.tensors) {
    EXPECT_TRUE(at::equal(tensor, same.tensor(name))) << name;
  }
  EXPECT_EQ(same.metadata().at("format"), "pt");
}

TEST(TorchFile, ReadsEveryDtypeViewsSharedStoragesAndParameters) {
  const NamedTensors python = load_torch_state_dict(reference("dtypes.pt"));
  const SafetensorsFile same(reference("dtypes.safetensors"));
  const std::pair<const char*, at::ScalarType> dtypes[] = {
      {"F64", at::kDouble},
      {"F32", at::kFloat},
      {"F16", at::kHalf},
      {"BF16", at::kBFloat16},
      {"I64", at::kLong},
      {"I32", at::kInt},
      {"I16", at::kShort},
      {"I8", at::kChar},
      {"U8", at::kByte},
      {"BOOL", at::kBool}};
  for (const auto& [name, dtype] : dtypes) {
    const at::Tensor& t = *python.find(name);
    EXPECT_EQ(t.scalar_type(), dtype) << name;
    const at::Tensor expected = dtype == at::kBool
                                    ? at::arange(6).remainder(2).to(at::kBool)
                                    : at::arange(6).to(dtype);
    EXPECT_TRUE(at::equal(t, expected)) << name;
    EXPECT_TRUE(at::equal(same.tensor(name), expected)) << name;
  }
  // A transposed view keeps its strides.
  const at::Tensor& t = *python.find("t");
  EXPECT_EQ(t.strides(), at::IntArrayRef({1, 3}));
  EXPECT_TRUE(at::equal(t, at::arange(6, at::kFloat).view({2, 3}).t()));
  // b = a[1:3] shares a's storage, as in Python.
  const at::Tensor& a = *python.find("a");
  const at::Tensor& b = *python.find("b");
  EXPECT_TRUE(at::equal(b, at::tensor({10.f, 20.f})));
  EXPECT_EQ(b.data_ptr<float>(), a.data_ptr<float>() + 1);
  EXPECT_TRUE(at::equal(*python.find("p"), at::ones({2})));
}

TEST(TorchFile, ReadsPickleProtocolFourAndNanoGptsCheckpointDict) {
  const NamedTensors mlp = load_torch_state_dict(reference("mlp.pt"));
  const NamedTensors protocol4 =
      load_torch_state_dict(reference("mlp_protocol4.pt"));
  ASSERT_EQ(names_of(protocol4), names_of(mlp));
  EXPECT_THAT(
      names_of(mlp),
      ElementsAre(
          "layers.0.weight",
          "layers.0.bias",
          "layers.1.weight",
          "layers.1.bias",
          "layers.2.weight",
          "layers.2.bias"));
  for (const auto& [name, tensor] : mlp.tensors) {
    EXPECT_TRUE(at::equal(tensor, *protocol4.find(name))) << name;
  }
  // {'model': state_dict, 'iter_num': 5, 'config': argparse.Namespace(...),
  // 'best_val_loss': tensor}: its 'model'; the Namespace is never built.
  const NamedTensors ckpt = load_torch_state_dict(reference("nanogpt_ckpt.pt"));
  EXPECT_EQ(names_of(ckpt), names_of(mlp));
}

TEST(TorchFile, WhatHotloopWritesReadsBackWithStoragesShared) {
  TempDir dir;
  NamedTensors tensors;
  const at::Tensor shared = at::arange(12, at::kFloat).view({3, 4});
  tensors.add("transformer.wte.weight", shared);
  tensors.add("lm_head.weight", shared);
  tensors.add("half", at::tensor({1.5, -2.0}).to(at::kHalf));
  tensors.add("bf16", at::tensor({1.5, -2.0}).to(at::kBFloat16));
  tensors.add("steps", at::scalar_tensor(7, at::kLong));
  tensors.add("mask", at::tensor({1, 0}).to(at::kBool));
  tensors.add("view", shared.t());
  tensors.add("empty", at::empty({0, 3}));
  tensors.add("big", at::full({2}, int64_t{1} << 40));
  const std::string path = dir.file("model.pt");
  save_torch_state_dict(path, tensors);
  const NamedTensors back = load_torch_state_dict(path);
  ASSERT_EQ(names_of(back), names_of(tensors));
  for (const auto& [name, tensor] : tensors.tensors) {
    const at::Tensor& got = *back.find(name);
    EXPECT_EQ(got.scalar_type(), tensor.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), tensor.sizes()) << name;
    EXPECT_TRUE(at::equal(got, tensor)) << name;
  }
  EXPECT_EQ(
      back.find("lm_head.weight")->data_ptr(),
      back.find("transformer.wte.weight")->data_ptr());
  EXPECT_EQ(back.find("view")->strides(), at::IntArrayRef({1, 4}));
  // PyTorch's own layout: one folder, data.pkl, byteorder, data/<key>,
  // version.
  const std::string bytes = read_file(path);
  for (const char* record :
       {"archive/data.pkl",
        "archive/byteorder",
        "archive/data/0",
        "archive/version"}) {
    EXPECT_NE(bytes.find(record), std::string::npos) << record;
  }
}

TEST(TorchFile, EitherFormatStreamsToItsFileAndARefusedWriteNamesIt) {
  // The files hold the bytes the *_bytes functions give, though written
  // from each tensor's memory as they go; a write the disk refuses (files
  // stopped at 1 MB, as a full disk stops them) names the file and keeps
  // the previous one.
  TempDir dir;
  NamedTensors tensors;
  tensors.add("big", at::arange(1 << 20, at::kFloat)); // 4 MB
  tensors.add("small", at::tensor({1.5, -2.0}).to(at::kBFloat16));
  const std::string pt = dir.file("model.pt");
  const std::string st = dir.file("model.safetensors");
  save_torch_state_dict(pt, tensors);
  save_safetensors(st, tensors);
  EXPECT_TRUE(read_file(pt) == torch_state_dict_bytes(tensors));
  EXPECT_TRUE(read_file(st) == safetensors_bytes(tensors));

  const std::string pt_before = read_file(pt);
  const std::string st_before = read_file(st);
  tensors.tensors[0].second.add_(1);
  for (const auto& [path, save] :
       {std::pair<std::string, std::function<void()>>{
            pt, [&] { save_torch_state_dict(pt, tensors); }},
        {st, [&] { save_safetensors(st, tensors); }}}) {
    SCOPED_TRACE(path);
    const std::string what =
        hotloop::testing::error_when_files_stop_at_1mb(save);
    EXPECT_THAT(what, HasSubstr(path + ".tmp."));
    EXPECT_THAT(what, HasSubstr(": write failed: File too large"));
  }
  EXPECT_TRUE(read_file(pt) == pt_before);
  EXPECT_TRUE(read_file(st) == st_before);
  EXPECT_EQ(
      std::distance(
          std::filesystem::directory_iterator(dir.path()),
          std::filesystem::directory_iterator()),
      2);
}

TEST(TorchFile, TheWriterRefusesWhatItCannotWrite) {
  NamedTensors twice;
  twice.add("w", at::ones({1}));
  twice.add("w", at::ones({1}));
  EXPECT_THROWS_WITH(
      Error, torch_state_dict_bytes(twice), "'w' is given twice");
  NamedTensors complex;
  complex.add("c", at::ones({1}, at::kComplexFloat));
  EXPECT_THROWS_WITH(
      Error, torch_state_dict_bytes(complex), "tensor 'c' is ComplexFloat");
}

TEST(TorchFile, RefusesBadFilesWithOneLineNamingThem) {
  TempDir dir;
  EXPECT_THROWS_WITH(
      Error,
      load_torch_state_dict(dir.file("missing.pt")),
      dir.file("missing.pt") + ": cannot open");
  // Cut in half: the zip's end record is gone.
  const std::string cnn = read_file(reference("cnn.pt"));
  write_file(dir.file("half.pt"), cnn.substr(0, cnn.size() / 2));
  EXPECT_THROWS_WITH(
      Error,
      load_torch_state_dict(dir.file("half.pt")),
      dir.file("half.pt") +
          ": not a PyTorch file (torch.save's zip), or "
          "truncated");
  // One byte of a storage changed: its record's CRC-32 fails.
  std::string damaged = cnn;
  // (head.1.weight's 25 KB; its local header, padding and bytes follow the
  // record's name).
  const size_t at = damaged.find("cnn/data/12");
  ASSERT_NE(at, std::string::npos);
  damaged[at + 200] = static_cast<char>(damaged[at + 200] ^ 0x40);
  write_file(dir.file("damaged.pt"), damaged);
  EXPECT_THROWS_WITH(
      Error,
      load_torch_state_dict(dir.file("damaged.pt")),
      dir.file("damaged.pt") +
          ": corrupted PyTorch file (record "
          "'cnn/data/12' fails its CRC-32 check");
  EXPECT_THROWS_WITH(
      Error,
      load_torch_state_dict(reference("legacy.pt")),
      "legacy.pt: written in torch.save's legacy format");
  EXPECT_THROWS_WITH(
      Error,
      load_torch_state_dict(reference("complex.pt")),
      "storage '0' is a torch.ComplexFloatStorage, a dtype hotloop cannot "
      "hold");
  EXPECT_THROWS_WITH(
      Error,
      load_torch_state_dict(reference("mixed.pt")),
      "mixed.pt: 'step' is an integer, not a tensor");
  EXPECT_THROWS_WITH(
      Error,
      load_torch_state_dict(reference("cnn.safetensors")),
      "not a PyTorch file");
  // A hotloop checkpoint is LibTorch's TorchScript archive.
  torch::nn::Linear linear(2, 2);
  train::save_checkpoint(dir.file("last.ckpt"), *linear);
  EXPECT_THROWS_WITH(
      Error,
      load_torch_state_dict(dir.file("last.ckpt")),
      "last.ckpt: a TorchScript archive or a hotloop checkpoint, not a "
      "state_dict");
}

} // namespace
} // namespace hotloop::interop
