#include "bench_util.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

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

} // namespace hotloop::bench
