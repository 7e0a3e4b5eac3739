#include "hotloop/dist/environment.h"

#include "hotloop/core/error.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace hotloop::dist {
namespace {

using Getenv = std::function<const char*(const char*)>;

// The variable's value as a whole number >= `min`; `fallback` when unset.
int64_t integer(
    const Getenv& getenv, const char* name, int64_t fallback, int64_t min = 0) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') {
    return fallback;
  }
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  HOTLOOP_CHECK_AS(
      ConfigError,
      *end == '\0' && end != text,
      "environment variable ",
      name,
      "='",
      text,
      "': expected a whole number");
  HOTLOOP_CHECK_AS(
      ConfigError,
      value >= min,
      "environment variable ",
      name,
      "=",
      value,
      ": expected >= ",
      min);
  return value;
}

std::string text(const Getenv& getenv, const char* name, std::string fallback) {
  const char* value = getenv(name);
  return value == nullptr || *value == '\0' ? fallback : std::string(value);
}

int64_t required(
    const Getenv& getenv,
    const char* name,
    const char* beside,
    int64_t min = 0) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      getenv(name) != nullptr && *getenv(name) != '\0',
      "environment variable ",
      name,
      " is not set, but ",
      beside,
      " is: a launcher (torchrun, SLURM, hotloop --trainer.strategy=ddp) "
      "sets both");
  return integer(getenv, name, 0, min);
}

void check_below(
    int64_t value, const char* name, int64_t bound, const char* bound_name) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      value < bound,
      "environment variable ",
      name,
      "=",
      value,
      " must be below ",
      bound_name,
      "=",
      bound);
}

ProcessEnvironment from_torchrun(const Getenv& getenv) {
  ProcessEnvironment env;
  env.launcher = "torchrun";
  env.rank = integer(getenv, "RANK", 0);
  env.world_size = required(getenv, "WORLD_SIZE", "RANK", 1);
  check_below(env.rank, "RANK", env.world_size, "WORLD_SIZE");
  env.local_rank = integer(getenv, "LOCAL_RANK", env.rank);
  env.local_world_size = integer(getenv, "LOCAL_WORLD_SIZE", env.world_size, 1);
  check_below(
      env.local_rank, "LOCAL_RANK", env.local_world_size, "LOCAL_WORLD_SIZE");
  HOTLOOP_CHECK_AS(
      ConfigError,
      env.local_world_size <= env.world_size,
      "environment variable LOCAL_WORLD_SIZE=",
      env.local_world_size,
      " must be at most WORLD_SIZE=",
      env.world_size);
  env.node_rank = integer(getenv, "GROUP_RANK", 0);
  env.master_addr = text(getenv, "MASTER_ADDR", "127.0.0.1");
  env.master_port = integer(getenv, "MASTER_PORT", 29500, 1);
  HOTLOOP_CHECK_AS(
      ConfigError,
      env.master_port <= 65535,
      "environment variable MASTER_PORT=",
      env.master_port,
      ": expected a port number, 1 to 65535");
  env.restart_count = integer(getenv, "TORCHELASTIC_RESTART_COUNT", 0);
  return env;
}

ProcessEnvironment from_slurm(const Getenv& getenv) {
  ProcessEnvironment env;
  env.launcher = "slurm";
  env.rank = integer(getenv, "SLURM_PROCID", 0);
  env.world_size = required(getenv, "SLURM_NTASKS", "SLURM_PROCID", 1);
  check_below(env.rank, "SLURM_PROCID", env.world_size, "SLURM_NTASKS");
  env.local_rank = integer(getenv, "SLURM_LOCALID", 0);
  // SLURM_TASKS_PER_NODE reads like "2(x3),1": this node's count is not
  // named, so take the first one (srun --ntasks-per-node makes them equal).
  const std::string per_node = text(getenv, "SLURM_TASKS_PER_NODE", "");
  env.local_world_size = per_node.empty()
                             ? env.world_size
                             : std::max(1, std::atoi(per_node.c_str()));
  check_below(
      env.local_rank,
      "SLURM_LOCALID",
      env.local_world_size,
      "the tasks per node of SLURM_TASKS_PER_NODE");
  env.node_rank = integer(getenv, "SLURM_NODEID", 0);
  env.master_addr = text(getenv, "MASTER_ADDR", "");
  if (env.master_addr.empty()) {
    env.master_addr =
        first_slurm_host(text(getenv, "SLURM_NODELIST", "127.0.0.1"));
  }
  // Lightning's choice: a port from the job id, the same on every node.
  const std::string job = text(getenv, "SLURM_JOB_ID", "0");
  const std::string tail = job.size() > 4 ? job.substr(job.size() - 4) : job;
  env.master_port =
      integer(getenv, "MASTER_PORT", 15000 + std::atoi(tail.c_str()), 1);
  env.restart_count = integer(getenv, "SLURM_RESTART_COUNT", 0);
  return env;
}

} // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // "prefix[a-b,c],other": the first host is prefix + a.
  const auto comma = nodelist.find(',');
  const auto bracket = nodelist.find('[');
  if (bracket == std::string::npos ||
      (comma != std::string::npos && comma < bracket)) {
    return nodelist.substr(0, comma);
  }
  const std::string prefix = nodelist.substr(0, bracket);
  const auto end = nodelist.find_first_of("-,]", bracket + 1);
  return prefix + nodelist.substr(bracket + 1, end - bracket - 1);
}

ProcessEnvironment read_environment(const Getenv& getenv_in) {
  const Getenv getenv =
      getenv_in ? getenv_in
                : Getenv([](const char* name) { return std::getenv(name); });
  if (getenv("RANK") != nullptr || getenv("WORLD_SIZE") != nullptr) {
    if (getenv("RANK") == nullptr) {
      required(getenv, "RANK", "WORLD_SIZE");
    }
    return from_torchrun(getenv);
  }
  // Inside an allocation SLURM sets these for an interactive shell too;
  // only srun's tasks (SLURM_NTASKS > 1 with a task id) are ranks.
  if (getenv("SLURM_PROCID") != nullptr &&
      integer(getenv, "SLURM_NTASKS", 1, 1) > 1) {
    return from_slurm(getenv);
  }
  return ProcessEnvironment{};
}

} // namespace hotloop::dist
