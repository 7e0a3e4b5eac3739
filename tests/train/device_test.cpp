#include "hotloop/train/device.h"

#include "hotloop/core/error.h"
#include "test_util.h"

#include <ATen/Context.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hotloop::train {
namespace {

bool has_cuda() {
  return at::hasCUDA() && at::getNumGPUs() > 0;
}

TEST(ResolveDevice, CpuAndAutoWithoutCudaGiveTheCpu) {
  EXPECT_EQ(resolve_device("cpu", "auto"), c10::Device(c10::kCPU));
  EXPECT_EQ(resolve_device("cpu", "1"), c10::Device(c10::kCPU));
  if (!has_cuda()) {
    EXPECT_EQ(resolve_device("auto", "auto"), c10::Device(c10::kCPU));
  }
}

TEST(ResolveDevice, CudaFlagsPickTheNamedVisibleDevice) {
  if (!has_cuda()) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  const c10::Device first(c10::DeviceType::CUDA, 0);
  EXPECT_EQ(resolve_device("auto", "auto"), first);
  EXPECT_EQ(resolve_device("cuda", "1"), first);
  EXPECT_EQ(resolve_device("gpu", "[0]"), first);
  EXPECT_EQ(resolve_device("cuda:0", "0,"), first);
  EXPECT_THROWS_WITH(
      ConfigError,
      resolve_device("cuda:64", "auto"),
      "trainer.accelerator=cuda:64 asks for CUDA device 64, but only");
}

TEST(ResolveDevice, CudaWithoutADeviceSaysWhatIsVisible) {
  if (has_cuda()) {
    GTEST_SKIP() << "this machine has a CUDA device";
  }
  EXPECT_THROWS_WITH(
      ConfigError,
      resolve_device("cuda", "auto"),
      "trainer.accelerator=cuda asks for CUDA, but no CUDA device is "
      "available");
  EXPECT_THROWS_WITH(
      ConfigError, resolve_device("cuda:1", "auto"), "CUDA_VISIBLE_DEVICES");
}

TEST(ResolveDevice, MalformedOrSeveralDevicesNameTheFlag) {
  EXPECT_THROWS_WITH(
      ConfigError,
      resolve_device("tpu", "auto"),
      "trainer.accelerator: expected auto, cpu, cuda, gpu or cuda:N, got "
      "'tpu'");
  EXPECT_THROWS_WITH(
      ConfigError,
      resolve_device("cuda:x", "auto"),
      "trainer.accelerator: expected cuda:N with a device number, got "
      "'cuda:x'");
  EXPECT_THROWS_WITH(
      ConfigError,
      resolve_device("cpu", "2"),
      "trainer.devices=2 asks for 2 devices, but one process trains on one "
      "device");
  EXPECT_THROWS_WITH(
      ConfigError,
      resolve_device("cpu", "[0,1]"),
      "trainer.devices=[0,1] lists several devices");
  EXPECT_THROWS_WITH(
      ConfigError,
      resolve_device("cpu", "many"),
      "trainer.devices: expected auto, a count such as 1, or one device "
      "index such as [1], got 'many'");
  EXPECT_THROWS_WITH(
      ConfigError,
      resolve_device("cpu", "[1]"),
      "trainer.devices=[1] names a device index, but trainer.accelerator=cpu "
      "has only one");
  EXPECT_THROWS_WITH(
      ConfigError, resolve_device("cuda:0", "[1]"), "name different devices");
}

} // namespace
} // namespace hotloop::train
