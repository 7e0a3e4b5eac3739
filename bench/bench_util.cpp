#include "bench_util.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include <sys/wait.h>

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

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// The string value of "key" in a flat JSON text, unescaping \" and \\ only.
std::optional<std::string> json_string(
    const std::string& text, const std::string& key) {
  const std::string needle = "\"" + key + "\": \"";
  size_t at = text.find(needle);
  if (at == std::string::npos) {
    return std::nullopt;
  }
  std::string value;
  for (at += needle.size(); at < text.size() && text[at] != '"'; ++at) {
    if (text[at] == '\\' && at + 1 < text.size()) {
      ++at;
    }
    value += text[at];
  }
  return value;
}

std::optional<double> json_number(
    const std::string& text, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const size_t at = text.find(needle);
  if (at == std::string::npos) {
    return std::nullopt;
  }
  const char* begin = text.c_str() + at + needle.size();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin) {
    return std::nullopt;
  }
  return value;
}

// Runs `command` through the shell; stdout comes back in `output` (stderr
// passes through to ours). Returns the exit status, or -1 when it could not
// start or was killed.
int run_command(const std::string& command, std::string& output) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return -1;
  }
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    output.append(buffer, n);
  }
  const int status = pclose(pipe);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof(code), "\\u%04x", c);
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

std::string quoted(const std::string& s) {
  return "\"" + json_escape(s) + "\"";
}

} // namespace hotloop::bench
