#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace hotloop::dist {

/// How hotloop starts the processes of a data-parallel run itself (as
/// Lightning's launcher does), on one node of `num_nodes`.
struct LaunchOptions {
  /// Processes on this node (trainer.devices).
  int64_t processes = 2;
  int64_t num_nodes = 1;
  /// This node's place (NODE_RANK or GROUP_RANK; 0 on a single node).
  int64_t node_rank = 0;
  /// Where rank 0 serves the rendezvous; MASTER_ADDR, else 127.0.0.1.
  std::string master_addr = "127.0.0.1";
  /// MASTER_PORT; 0: a free port of this machine (single node only).
  int64_t master_port = 0;
  /// Seconds the other processes get to stop after one failed, before they
  /// are killed.
  double grace_seconds = 30;
};

/// LaunchOptions from the environment for `processes` per node and
/// `num_nodes` nodes: NODE_RANK (or GROUP_RANK), MASTER_ADDR, MASTER_PORT,
/// which several nodes need (ConfigError naming what is missing).
LaunchOptions launch_options_from_environment(
    int64_t processes, int64_t num_nodes);

/// Runs `program` with `args` in `options.processes` processes, each with
/// torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
/// GROUP_RANK, MASTER_ADDR, MASTER_PORT), and waits for them. SIGINT and
/// SIGTERM are passed on to every process once (each finishes its step and
/// checkpoints). When one fails (a non-zero exit or a signal it did not
/// get from here), says which on `err`, stops the others with SIGTERM,
/// then SIGKILL after the grace period. No process outlives the launcher,
/// even one killed with SIGKILL. Returns 0 when every process succeeded,
/// else the first failing process's status (128 + signal for a signal).
int launch(
    const std::string& program,
    const std::vector<std::string>& args,
    const LaunchOptions& options,
    std::ostream& err);

/// A TCP port of this machine that nothing listens on now.
int64_t free_port();

} // namespace hotloop::dist
