#include "hotloop/core/signals.h"

#include <atomic>
#include <csignal>

namespace hotloop {
namespace {

volatile std::sig_atomic_t g_received = 0;
int g_depth = 0;
struct sigaction g_previous_int;
struct sigaction g_previous_term;

extern "C" void on_stop_signal(int signal) {
  g_received = signal;
  // The next one of these ends the process the usual way.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(signal, &fallback, nullptr);
}

} // namespace

StopSignalGuard::StopSignalGuard() {
  if (g_depth++ > 0) {
    return;
  }
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

StopSignalGuard::~StopSignalGuard() {
  if (--g_depth > 0) {
    return;
  }
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  g_received = 0;
}

int StopSignalGuard::received() {
  return g_received;
}

} // namespace hotloop
