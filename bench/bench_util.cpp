#include "bench_util.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

namespace hotloop::bench {

std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

Machine describe_machine() {
  Machine machine;
  machine.libtorch = TORCH_VERSION;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      machine.cpu = colon == std::string::npos ? line : line.substr(colon + 2);
      break;
    }
  }
  if (machine.cpu.empty()) {
    machine.cpu = "unknown";
  }
  machine.cores = std::thread::hardware_concurrency();
  machine.intra_op_threads = at::get_num_threads();
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(
      date, sizeof(date), "%Y-%m-%d %H:%M:%S %Z", std::localtime(&now));
  machine.date = date;
  machine.load_before = load_average();
  return machine;
}

void print_machine(
    const Machine& machine,
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::printf(
      "machine: %s, %u cores; LibTorch %s (%d intra-op threads)\n",
      machine.cpu.c_str(),
      machine.cores,
      machine.libtorch.c_str(),
      machine.intra_op_threads);
  for (const auto& [label, text] : extra) {
    std::printf("%-8s %s\n", (label + ":").c_str(), text.c_str());
  }
  std::printf(
      "date:    %s; load average %s before, %s after\n",
      machine.date.c_str(),
      machine.load_before.c_str(),
      machine.load_after.c_str());
}

} // namespace hotloop::bench
