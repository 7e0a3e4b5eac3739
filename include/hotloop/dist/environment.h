#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace hotloop::dist {

/// Where this process stands in a distributed run, as its launcher told it
/// through the environment.
struct ProcessEnvironment {
  /// Who set the variables: "torchrun" (or hotloop's own launcher, which
  /// sets the same ones), "slurm", or "" when this process runs alone.
  std::string launcher;
  /// This process's place among all of them, from 0.
  int64_t rank = 0;
  /// Its place among the processes of its machine (the GPU it takes).
  int64_t local_rank = 0;
  int64_t world_size = 1;
  /// Processes on this machine; they share its cores.
  int64_t local_world_size = 1;
  /// This machine's place among the machines (torchrun's GROUP_RANK).
  int64_t node_rank = 0;
  /// Where rank 0 serves the rendezvous (a TCPStore).
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  /// How often torchrun restarted the group (--max_restarts).
  int64_t restart_count = 0;

  bool distributed() const {
    return !launcher.empty();
  }
};

/// Reads torchrun's contract (RANK, LOCAL_RANK, WORLD_SIZE,
/// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
/// TORCHELASTIC_RESTART_COUNT), else SLURM's (SLURM_PROCID,
/// SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID, SLURM_TASKS_PER_NODE, the
/// first host of SLURM_NODELIST; MASTER_PORT or a port from
/// SLURM_JOB_ID), else returns a single process's. Throws ConfigError
/// naming the variable when one is not a number, is out of range (RANK >=
/// WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE, ...) or is missing beside
/// the others. `getenv` is for tests.
ProcessEnvironment read_environment(
    const std::function<const char*(const char*)>& getenv = nullptr);

/// The first host of a SLURM node list: "node[03-05,9],gpu1" -> "node03".
std::string first_slurm_host(const std::string& nodelist);

} // namespace hotloop::dist
