#pragma once

namespace hotloop {

/// Seconds since this process started, by the kernel's record of its start
/// (Linux: /proc/self/stat's start time against CLOCK_BOOTTIME, to the
/// clock tick, 10 ms), so that the time the dynamic loader spends on
/// LibTorch's libraries before main counts too; Python's
/// bench/python_train.py reads the same record, so both sides of a
/// warm-up comparison start together. Where /proc cannot be read: the
/// seconds since this library was loaded. Thread-safe.
double seconds_since_process_start();

} // namespace hotloop
