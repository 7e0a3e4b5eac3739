#include "hotloop/dist/launcher.h"

#include "hotloop/core/error.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <map>
#include <thread>

namespace hotloop::dist {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void remember_signal(int signal) {
  g_signal = signal;
}

std::string environment_value(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

int64_t environment_integer(const char* name, int64_t fallback) {
  const std::string text = environment_value(name);
  if (text.empty()) {
    return fallback;
  }
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  HOTLOOP_CHECK_AS(
      ConfigError,
      *end == '\0' && value >= 0,
      "environment variable ",
      name,
      "='",
      text,
      "': expected a whole number >= 0");
  return value;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return hotloop::detail::str_cat(
        "was killed by signal ", signal, " (", strsignal(signal), ")");
  }
  return hotloop::detail::str_cat("exited with status ", WEXITSTATUS(status));
}

int exit_code(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// Restores the handlers of SIGINT and SIGTERM on destruction.
class SignalForwarding {
 public:
  SignalForwarding() {
    g_signal = 0;
    struct sigaction action {};
    action.sa_handler = remember_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalForwarding() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

} // namespace

LaunchOptions launch_options_from_environment(
    int64_t processes, int64_t num_nodes) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      processes >= 1,
      "trainer.devices: expected at least 1 process, got ",
      processes);
  HOTLOOP_CHECK_AS(
      ConfigError,
      num_nodes >= 1,
      "trainer.num_nodes must be >= 1, got ",
      num_nodes);
  LaunchOptions options;
  options.processes = processes;
  options.num_nodes = num_nodes;
  options.node_rank =
      environment_integer("NODE_RANK", environment_integer("GROUP_RANK", 0));
  options.master_addr = environment_value("MASTER_ADDR");
  options.master_port = environment_integer("MASTER_PORT", 0);
  if (num_nodes > 1) {
    HOTLOOP_CHECK_AS(
        ConfigError,
        !options.master_addr.empty() && options.master_port > 0 &&
            !environment_value("NODE_RANK").empty(),
        "trainer.num_nodes=",
        num_nodes,
        ": start hotloop on every node with NODE_RANK (0 to ",
        num_nodes - 1,
        "), MASTER_ADDR (node 0's address) and MASTER_PORT set, or launch "
        "with torchrun or SLURM");
    HOTLOOP_CHECK_AS(
        ConfigError,
        options.node_rank < num_nodes,
        "environment variable NODE_RANK=",
        options.node_rank,
        " must be below trainer.num_nodes=",
        num_nodes);
  }
  if (options.master_addr.empty()) {
    options.master_addr = "127.0.0.1";
  }
  return options;
}

int64_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  HOTLOOP_CHECK(fd >= 0, "cannot open a socket: ", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool ok =
      ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  HOTLOOP_CHECK(ok, "cannot find a free port: ", std::strerror(errno));
  return ntohs(address.sin_port);
}

int launch(
    const std::string& program,
    const std::vector<std::string>& args,
    const LaunchOptions& options,
    std::ostream& err) {
  const int64_t world = options.processes * options.num_nodes;
  const int64_t port =
      options.master_port > 0 ? options.master_port : free_port();
  const pid_t launcher = ::getpid();
  std::map<pid_t, int64_t> ranks; // live processes
  SignalForwarding forwarding;
  for (int64_t local = 0; local < options.processes; ++local) {
    const int64_t rank = options.node_rank * options.processes + local;
    const pid_t pid = ::fork();
    HOTLOOP_CHECK(pid >= 0, "cannot start rank ", rank, ": fork failed");
    if (pid == 0) {
      // The launcher alone gets the terminal's Ctrl-C and passes it on
      // once: a second SIGINT would end a process without its checkpoint.
      ::setpgid(0, 0);
      // No orphans: this process ends with the launcher, however it ends.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) {
        ::_exit(1);
      }
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      const std::map<std::string, int64_t> variables{
          {"RANK", rank},
          {"LOCAL_RANK", local},
          {"WORLD_SIZE", world},
          {"LOCAL_WORLD_SIZE", options.processes},
          {"GROUP_RANK", options.node_rank},
          {"MASTER_PORT", port},
          {"TORCHELASTIC_RESTART_COUNT", 0},
      };
      for (const auto& [name, value] : variables) {
        ::setenv(name.c_str(), std::to_string(value).c_str(), 1);
      }
      ::setenv("MASTER_ADDR", options.master_addr.c_str(), 1);
      ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(program.c_str()));
      for (const std::string& arg : args) {
        argv.push_back(const_cast<char*>(arg.c_str()));
      }
      argv.push_back(nullptr);
      ::execv(program.c_str(), argv.data());
      std::fprintf(
          stderr,
          "hotloop: rank %lld: cannot run %s: %s\n",
          static_cast<long long>(rank),
          program.c_str(),
          std::strerror(errno));
      ::_exit(127);
    }
    ranks[pid] = rank;
  }

  using Clock = std::chrono::steady_clock;
  int forwarded = 0;
  int result = 0;
  bool failed = false;
  Clock::time_point kill_at = Clock::time_point::max();
  auto signal_all = [&](int signal) {
    for (const auto& [pid, rank] : ranks) {
      ::kill(pid, signal);
    }
  };
  while (!ranks.empty()) {
    if (g_signal != 0 && forwarded == 0) {
      forwarded = g_signal;
      signal_all(forwarded);
    }
    if (Clock::now() >= kill_at) {
      signal_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const auto found = ranks.find(pid);
    if (found == ranks.end()) {
      continue;
    }
    const int64_t rank = found->second;
    ranks.erase(found);
    // After a forwarded signal or a failure, the others' ends are expected.
    const bool expected_stop = forwarded != 0 || failed;
    if (status != 0 && !expected_stop) {
      failed = true;
      result = exit_code(status);
      // One write of the whole line: the other ranks share this stream,
      // and their own errors must not land inside it.
      std::string line = hotloop::detail::str_cat(
          "hotloop: rank ", rank, " ", describe(status));
      if (!ranks.empty()) {
        line += hotloop::detail::str_cat(
            "; stopping the other ",
            ranks.size(),
            " process",
            ranks.size() == 1 ? "" : "es");
      }
      err << line + "\n";
      err.flush();
      if (!ranks.empty()) {
        signal_all(SIGTERM);
        kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(
                                     options.grace_seconds * 1000));
      }
    } else if (status != 0 && forwarded != 0 && result == 0) {
      result = exit_code(status);
    }
  }
  return result;
}

} // namespace hotloop::dist
