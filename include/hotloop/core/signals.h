#pragma once

namespace hotloop {

/// While alive, SIGINT and SIGTERM only raise a flag, so a training loop can
/// finish its step, write a checkpoint and return; a second signal ends the
/// process as usual. The previous handlers come back on destruction.
///
/// One guard at a time per process (nesting is allowed: the outermost one
/// installs and restores). The flag is process-wide.
class StopSignalGuard {
 public:
  StopSignalGuard();
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

  /// Whether SIGINT or SIGTERM arrived since the guard was made; the
  /// signal's number, or 0.
  static int received();
};

} // namespace hotloop
