#include "hotloop/train/device.h"

#include "hotloop/core/error.h"

#include <ATen/Context.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstdlib>
#include <optional>

namespace hotloop::train {
namespace {

int64_t visible_cuda_devices() {
  return at::hasCUDA() ? static_cast<int64_t>(at::getNumGPUs()) : 0;
}

std::string visible_devices_note() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible == nullptr ? std::string(" (CUDA_VISIBLE_DEVICES is not set)")
                            : hotloop::detail::str_cat(
                                  " (CUDA_VISIBLE_DEVICES='", visible, "')");
}

std::optional<int64_t> parse_index(const std::string& text) {
  if (text.empty() || text.size() > 9 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoll(text);
}

// devices: how many (count) or which one (index).
struct DeviceRequest {
  std::optional<int64_t> count;
  std::optional<int64_t> index;
};

DeviceRequest parse_devices(const std::string& devices) {
  DeviceRequest request;
  if (devices == "auto") {
    return request;
  }
  std::string inner;
  if (devices.size() >= 2 && devices.front() == '[' && devices.back() == ']') {
    inner = devices.substr(1, devices.size() - 2);
  } else if (!devices.empty() && devices.back() == ',') {
    inner = devices.substr(0, devices.size() - 1);
  } else {
    request.count = parse_index(devices);
    HOTLOOP_CHECK_AS(
        ConfigError,
        request.count.has_value() && *request.count > 0,
        "trainer.devices: expected auto, a count such as 1, or one device "
        "index such as [1], got '",
        devices,
        "'");
    HOTLOOP_CHECK_AS(
        ConfigError,
        *request.count == 1,
        "trainer.devices=",
        devices,
        " asks for ",
        devices,
        " devices, but one process trains on one device; pick one with "
        "trainer.devices=[N] or trainer.accelerator=cuda:N, or train on ",
        devices,
        " processes with trainer.strategy=ddp");
    return request;
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      inner.find(',') == std::string::npos,
      "trainer.devices=",
      devices,
      " lists several devices, but one process trains on one device");
  request.index = parse_index(inner);
  HOTLOOP_CHECK_AS(
      ConfigError,
      request.index.has_value(),
      "trainer.devices: expected a device index in '",
      devices,
      "'");
  return request;
}

c10::Device cuda_device(int64_t index, const std::string& flag) {
  const int64_t available = visible_cuda_devices();
  HOTLOOP_CHECK_AS(
      ConfigError,
      available > 0,
      flag,
      " asks for CUDA, but no CUDA device is available",
      at::hasCUDA() ? "" : " (this LibTorch is built without CUDA)",
      visible_devices_note());
  HOTLOOP_CHECK_AS(
      ConfigError,
      index < available,
      flag,
      " asks for CUDA device ",
      index,
      ", but only ",
      available,
      " ",
      available == 1 ? "is" : "are",
      " visible",
      visible_devices_note());
  return c10::Device(
      c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
}

} // namespace

c10::Device resolve_device(
    const std::string& accelerator, const std::string& devices) {
  const DeviceRequest request = parse_devices(devices);
  if (accelerator == "cpu") {
    HOTLOOP_CHECK_AS(
        ConfigError,
        !request.index.has_value() || *request.index == 0,
        "trainer.devices=",
        devices,
        " names a device index, but trainer.accelerator=cpu has only one");
    return c10::Device(c10::kCPU);
  }
  if (accelerator == "auto") {
    if (visible_cuda_devices() == 0) {
      return resolve_device("cpu", devices);
    }
    return cuda_device(request.index.value_or(0), "trainer.devices");
  }
  if (accelerator == "cuda" || accelerator == "gpu") {
    return cuda_device(
        request.index.value_or(0), "trainer.accelerator=" + accelerator);
  }
  if (accelerator.rfind("cuda:", 0) == 0) {
    const std::optional<int64_t> index = parse_index(accelerator.substr(5));
    HOTLOOP_CHECK_AS(
        ConfigError,
        index.has_value(),
        "trainer.accelerator: expected cuda:N with a device number, got '",
        accelerator,
        "'");
    HOTLOOP_CHECK_AS(
        ConfigError,
        !request.index.has_value() || *request.index == *index,
        "trainer.accelerator=",
        accelerator,
        " and trainer.devices=",
        devices,
        " name different devices");
    return cuda_device(*index, "trainer.accelerator=" + accelerator);
  }
  throw ConfigError(hotloop::detail::str_cat(
      "trainer.accelerator: expected auto, cpu, cuda, gpu or cuda:N, got '",
      accelerator,
      "'"));
}

void synchronize_device(c10::Device device) {
  if (device.is_cpu()) {
    return;
  }
  const c10::impl::VirtualGuardImpl guard(device.type());
  guard.getStream(device).synchronize();
}

} // namespace hotloop::train
