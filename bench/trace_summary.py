#!/usr/bin/env python3
"""Chrome traces of training steps as a few compact text tables.

Reads the Chrome trace JSON that torch.profiler (export_chrome_trace) and
hotloop's trainer.profiler=pytorch write, with each training step marked by
a user annotation "ProfilerStep#N" (N the step, from 1), and prints:

  - the kernel table over the steady steps (those after --warmup): kernel
    name, launches per step, device microseconds per step and their share
    of the step's wall time, largest first (copies and memsets as rows of
    their own); CPU-only traces get the operators by self time instead;
  - the device's busy and idle time per steady step;
  - the host-device synchronisations per steady step: stream, device and
    event synchronize calls with the host time they blocked, device-to-host
    copies, and .item() (aten::_local_scalar_dense);
  - the first steps one by one: wall time, device time, kernels launched,
    synchronisations, and what happened in each: CUDA module loading
    (cuModuleLoad*/cuLibraryLoad*, and kernel launch calls over 1 ms, lazy
    loading's module loads inside the launch), allocator growth
    (cudaMalloc, cudaHostAlloc), kernels never launched in the steady
    steps (cuDNN's and cuBLAS's algorithm searches launch many), and the
    operators that took far longer than in a steady step (autotuning, SDPA
    plan builds, first calls);
  - the first step by operator: each kernel launch, synchronize and
    cudaMalloc charged to the innermost operator around its call (on the
    call's own thread, so the backward's go to its operators), with the
    operator's calls and host time, its largest device allocation where
    the trace records the allocator ("[memory]" events, torch.profiler's
    profile_memory: a cuDNN search's workspace), and a steady step's calls
    and kernels beside them: which operator's search launched how many
    kernels.

Both trace formats are read: Kineto's ({"traceEvents": [...]}, events with
a "cat": cpu_op, user_annotation, cuda_runtime, cuda_driver, kernel,
gpu_memcpy, gpu_memset) and the legacy profiler's (a list of "X" events
without categories, as torch 1.13 without Kineto writes; every event a CPU
operator). Device work is charged to the step that launched it, through
the correlation id that joins a kernel to its launch call.

Usage:
  bench/trace_summary.py TRACE.json [--warmup 10] [--first 10] [--top 20]
                         [--title TEXT]

Exit status 0, or 2 with one line on stderr when the file is unreadable or
has no ProfilerStep annotations.
"""

import argparse
import json
import os
import re
import sys

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize",
              "cudaEventSynchronize", "cudaMemcpy", "cudaStreamQuery")
# cudaStreamQuery polls; it is counted but does not block. cudaMemcpy (not
# Async) blocks the host until the copy is done.
BLOCKING = ("cudaStreamSynchronize", "cudaDeviceSynchronize",
            "cudaEventSynchronize", "cudaMemcpy")
MODULE_LOAD_PREFIXES = ("cuModuleLoad", "cuLibraryLoad", "cuModuleGetFunction",
                        "cuLibraryGetKernel", "cuLibraryGetModule")
ALLOC_CALLS = ("cudaMalloc", "cudaMallocAsync", "cudaHostAlloc",
               "cudaMallocHost", "cuMemCreate", "cuMemAlloc_v2",
               "cuMemAlloc")
FREE_CALLS = ("cudaFree", "cudaFreeHost", "cudaFreeAsync")
ITEM_OPS = ("aten::_local_scalar_dense",)
# Kernel launch calls (not cudaGraphLaunch). With CUDA's lazy loading (the
# default since CUDA 12) a kernel's first launch loads its module inside
# the launch call, which no cuModuleLoad* record shows (a launch also
# waits when the device's launch queue is full): a launch call over
# SLOW_LAUNCH_US is counted.
LAUNCH_PREFIXES = ("cudaLaunchKernel", "cuLaunchKernel",
                   "cudaLaunchCooperativeKernel")
SLOW_LAUNCH_US = 1000.0
# torch.profiler's profile_memory records: an instant event per allocation
# (args "Bytes" > 0) and free (< 0), "Device Type" 0 for the CPU.
MEMORY_EVENT = "[memory]"
NAME_WIDTH = 72


class TraceError(Exception):
    pass


# --------------------------------------------------------------------------
# Reading


class Event:
    __slots__ = ("name", "cat", "ts", "dur", "pid", "tid", "args")

    def __init__(self, raw, cat):
        self.name = str(raw.get("name", ""))
        self.cat = cat
        self.ts = float(raw.get("ts", 0.0))
        self.dur = float(raw.get("dur", 0.0) or 0.0)
        self.pid = raw.get("pid")
        self.tid = raw.get("tid")
        self.args = raw.get("args") or {}

    @property
    def end(self):
        return self.ts + self.dur

    def correlation(self):
        value = self.args.get("correlation")
        return int(value) if isinstance(value, (int, float)) else None


class Trace:
    """The events of one trace, sorted by start, by kind."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path) as f:
                doc = json.load(f)
        except OSError as e:
            raise TraceError(f"{path}: {e.strerror}")
        except ValueError as e:
            raise TraceError(f"{path}: not JSON ({e})")
        if isinstance(doc, list):
            raw_events, self.format = doc, "legacy profiler"
            self.meta = {}
        elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"),
                                                  list):
            raw_events, self.format = doc["traceEvents"], "Kineto"
            self.meta = doc
        else:
            raise TraceError(f"{path}: neither a list of trace events nor "
                             "an object with traceEvents")
        if isinstance(doc, dict) and doc.get("hotloop_writer"):
            # hotloop's own, where LibTorch has no Kineto.
            self.format = "hotloop CPU-operator"
        self.size = os.path.getsize(path)
        self.steps = {}       # N -> Event (the host-side annotation)
        self.cpu_ops = []
        self.runtime = []     # cuda_runtime and cuda_driver calls
        self.device = []      # kernels, copies, memsets
        self.memory = []      # the allocator's records (profile_memory)
        for raw in raw_events:
            if isinstance(raw, dict) and raw.get("ph") == "i" and \
                    raw.get("name") == MEMORY_EVENT:
                self.memory.append(Event(raw, "memory"))
                continue
            if not isinstance(raw, dict) or raw.get("ph") != "X":
                continue
            cat = raw.get("cat")
            name = str(raw.get("name", ""))
            step = STEP_RE.match(name)
            if step and cat in (None, "user_annotation", "cpu_op",
                                "python_function"):
                number = int(step.group(1))
                # The first annotation of a step wins (a legacy trace may
                # hold it once per thread).
                if number not in self.steps:
                    self.steps[number] = Event(raw, "user_annotation")
                continue
            if cat is None or cat in ("cpu_op", "user_annotation"):
                self.cpu_ops.append(Event(raw, cat or "cpu_op"))
            elif cat in ("cuda_runtime", "cuda_driver"):
                self.runtime.append(Event(raw, cat))
            elif cat in DEVICE_CATS:
                self.device.append(Event(raw, cat))
        if not self.steps:
            raise TraceError(f"{path}: no ProfilerStep#N annotations: the "
                             "steps were not marked (torch.profiler's "
                             "record_function or hotloop's "
                             "trainer.profiler=pytorch mark them)")
        for events in (self.cpu_ops, self.runtime, self.device, self.memory):
            events.sort(key=lambda e: e.ts)
        self.gpu = None
        for prop in self.meta.get("deviceProperties") or []:
            if isinstance(prop, dict) and prop.get("name"):
                self.gpu = prop["name"]
                break
        self._assign()

    def numbers(self):
        return sorted(self.steps)

    def _step_of(self, ts):
        """The step whose annotation holds host time ts, or None."""
        for number in self._order:
            step = self.steps[number]
            if step.ts <= ts < step.end:
                return number
            if ts < step.ts:
                return None
        return None

    def _assign(self):
        """Charges every event to a step: host events by their start, device
        events by their launch call's start (correlation), else by their
        own start."""
        self._order = self.numbers()
        self.by_step = {n: {"cpu_ops": [], "runtime": [], "device": [],
                            "memory": []}
                        for n in self._order}
        launch_step = {}
        for e in self.runtime:
            n = self._step_of(e.ts)
            if n is not None:
                self.by_step[n]["runtime"].append(e)
                corr = e.correlation()
                if corr is not None:
                    launch_step[corr] = n
        for kind in ("cpu_ops", "memory"):
            for e in getattr(self, kind):
                n = self._step_of(e.ts)
                if n is not None:
                    self.by_step[n][kind].append(e)
        self.unlaunched = 0
        for e in self.device:
            corr = e.correlation()
            n = launch_step.get(corr) if corr is not None else None
            if n is None:
                n = self._step_of(e.ts)
                self.unlaunched += 1
            if n is not None:
                self.by_step[n]["device"].append(e)


# --------------------------------------------------------------------------
# Figures


def short_name(name, width=NAME_WIDTH, params=False):
    """A kernel's or operator's name to print: without a leading "void",
    its parameter list (unless `params`) and the at::/native:: namespaces,
    cut to width. Two kernels that differ only in what is cut stay two rows
    (the tables key on the whole name)."""
    text = name[5:] if name.startswith("void ") else name
    # The parameter list: the last top-level "(...)" at the end.
    if text.endswith(")") and not params:
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            if text[i] == ")":
                depth += 1
            elif text[i] == "(":
                depth -= 1
                if depth == 0:
                    if i > 0 and text[:i].strip():
                        text = text[:i]
                    break
    for prefix in ("(anonymous namespace)::", "at::native::", "at::"):
        text = text.replace(prefix, "")
    text = text.strip() or name
    return text if len(text) <= width else text[:width - 3] + "..."


def plural(count, noun, nouns=None):
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def external_id(event):
    value = event.args.get("External id")
    return value if isinstance(value, (int, float)) else 0


def ops_by_thread(ops):
    """{(pid, tid): [operator]} of the CPU operators (not the user
    annotations), each thread's in start order, a parent before its
    children: of a parent and a child of one start and length, the parent
    started first, so its External id (Kineto's, given in start order) is
    the smaller."""
    by_thread = {}
    for op in ops:
        if op.cat != "user_annotation":
            by_thread.setdefault((op.pid, op.tid), []).append(op)
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (e.ts, -e.dur, external_id(e)))
    return by_thread


def self_times(ops):
    """{name: (calls, self microseconds)} of CPU operators, each op's time
    less that of the ops nested in it on its thread."""
    result = {}
    for thread_ops in ops_by_thread(ops).values():
        stack = []      # [event, children time]
        done = []

        def close(until):
            while stack and stack[-1][0].end <= until:
                event, children = stack.pop()
                done.append((event, max(0.0, event.dur - children)))
                if stack:
                    stack[-1][1] += event.dur

        for op in thread_ops:
            close(op.ts)
            stack.append([op, 0.0])
        close(float("inf"))
        for event, own in done:
            calls, total = result.get(event.name, (0, 0.0))
            result[event.name] = (calls + 1, total + own)
    return result


def busy_union(events, start, end):
    """Microseconds within [start, end) covered by at least one event."""
    spans = sorted((max(e.ts, start), min(e.end, end)) for e in events
                   if e.end > start and e.ts < end)
    total, cur_start, cur_end = 0.0, None, None
    for s, t in spans:
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, t
        else:
            cur_end = max(cur_end, t)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


# The autograd engine's records of the backward's functions: on a GPU they
# run on the engine's device thread while the step's thread waits in
# backward(), which no operator of its own covers.
BACKWARD_FUNCTION = "autograd::engine::evaluate_function"


def host_outside_ops(step, ops):
    """Microseconds of the step's own thread inside its annotation that no
    operator covers, nor the backward it waits for on another thread: the
    host's own code (callbacks, loggers, waiting for data), which no
    operator's time names."""
    own = [e for e in ops if e.cat == "cpu_op" and (
        e.tid == step.tid or e.name.startswith(BACKWARD_FUNCTION))]
    return step.dur - busy_union(own, step.ts, step.end)


def innermost_ops(ops, events):
    """[operator or None] for each of events: the innermost CPU operator on
    the event's own thread whose span holds the event's start (a launch or
    a synchronize runs inside the operator that called it; the backward's
    run on the autograd engine's thread, inside its functions' ops)."""
    by_thread = ops_by_thread(ops)
    order = sorted(range(len(events)), key=lambda i: events[i].ts)
    result = [None] * len(events)
    cursor, stacks = {}, {}
    for i in order:
        event = events[i]
        key = (event.pid, event.tid)
        thread_ops = by_thread.get(key)
        if not thread_ops:
            continue
        stack = stacks.setdefault(key, [])
        j = cursor.get(key, 0)
        while j < len(thread_ops) and thread_ops[j].ts <= event.ts:
            op = thread_ops[j]
            while stack and stack[-1].end <= op.ts:
                stack.pop()
            stack.append(op)
            j += 1
        cursor[key] = j
        while stack and stack[-1].end <= event.ts:
            stack.pop()
        result[i] = stack[-1] if stack else None
    return result


OUTSIDE_OPS = "(outside any operator)"
NO_LAUNCH_CALL = "(no launch call in the step)"


def device_allocations(memory):
    """The allocations among profile_memory's records that are the
    device's (not the CPU's, not frees)."""
    return [e for e in memory
            if e.args.get("Device Type", 0) != 0 and
            float(e.args.get("Bytes", 0) or 0) > 0]


def work_by_operator(events, steady_kernels):
    """{operator name: {"kernels", "new", "device_us", "syncs", "allocs",
    "largest_bytes"}} of one step's events ({"cpu_ops", "runtime",
    "device"} and "memory" where recorded): each launch, synchronize and
    cudaMalloc charged to the innermost operator around its call; "new"
    counts the kernels whose names no steady step launched; largest_bytes
    is the largest device allocation from the caching allocator (in a cuDNN
    search, the largest workspace among the algorithms it times)."""
    runtime = events["runtime"]
    owners = innermost_ops(events["cpu_ops"], runtime)
    launched = {}
    for e in events["device"]:
        corr = e.correlation()
        if corr is not None:
            launched.setdefault(corr, []).append(e)
    table = {}

    def row_of(name):
        return table.setdefault(name, {
            "kernels": 0, "new": 0, "device_us": 0.0, "syncs": 0,
            "allocs": 0, "largest_bytes": 0})

    def charge(row, device_event):
        row["device_us"] += device_event.dur
        if device_event.cat == "kernel":
            row["kernels"] += 1
            row["new"] += device_event.name not in steady_kernels

    def name_of(owner):
        return owner.name if owner else OUTSIDE_OPS

    memory = device_allocations(events.get("memory", ()))
    for e, owner in zip(memory, innermost_ops(events["cpu_ops"], memory)):
        row = row_of(name_of(owner))
        row["largest_bytes"] = max(row["largest_bytes"],
                                   float(e.args["Bytes"]))
    for call, owner in zip(runtime, owners):
        kernels = launched.get(call.correlation(), ()) \
            if call.correlation() is not None else ()
        blocking = call.name in BLOCKING
        alloc = call.name in ALLOC_CALLS
        if not (kernels or blocking or alloc):
            continue
        row = row_of(name_of(owner))
        for e in kernels:
            charge(row, e)
        row["syncs"] += blocking
        row["allocs"] += alloc
    # Device work whose launch call is not among the step's (no
    # correlation id, or its call outside the step's annotation).
    calls = {c.correlation() for c in runtime if c.correlation() is not None}
    for e in events["device"]:
        if e.correlation() is None or e.correlation() not in calls:
            charge(row_of(NO_LAUNCH_CALL), e)
    return table


def device_label(cat, name):
    if cat == "kernel":
        return short_name(name)
    kind = "memcpy" if cat == "gpu_memcpy" else "memset"
    return (f"[{kind}] "
            f"{short_name(name, NAME_WIDTH - len(kind) - 3, params=True)}")


def sync_counts(runtime, cpu_ops, device):
    """{what: (count, host microseconds)} of the host-device
    synchronisations among a step's events."""
    out = {}
    for e in runtime:
        if e.name in SYNC_CALLS:
            count, us = out.get(e.name, (0, 0.0))
            out[e.name] = (count + 1, us + e.dur)
    for e in device:
        if e.cat == "gpu_memcpy" and "DtoH" in e.name:
            count, nbytes = out.get("DtoH copies", (0, 0.0))
            out["DtoH copies"] = (count + 1,
                                  nbytes + float(e.args.get("bytes", 0) or 0))
    for e in cpu_ops:
        if e.name in ITEM_OPS:
            count, us = out.get(".item()", (0, 0.0))
            out[".item()"] = (count + 1, us + e.dur)
    return out


def blocking_syncs(counts):
    return sum(counts.get(name, (0, 0))[0] for name in BLOCKING)


def fmt(value, digits=1):
    return f"{value:,.{digits}f}"


class Summary:
    """The tables of one trace."""

    def __init__(self, trace, warmup=10, first=10, top=20):
        self.trace = trace
        self.warmup = warmup
        self.first = first
        self.top = top
        numbers = trace.numbers()
        steady = [n for n in numbers if n > warmup]
        self.steady_note = ""
        if not steady:
            steady = numbers[-min(3, len(numbers)):]
            self.steady_note = (f" (no step after {warmup} traced: the last "
                                f"{len(steady)} stand in)")
        self.steady = steady
        self.has_device = bool(trace.device)

    # -- steady steps ------------------------------------------------------

    def window(self):
        """(start, end) of the steady steps on the host clock, the end
        stretched to the last device work they launched."""
        steps = [self.trace.steps[n] for n in self.steady]
        start = min(s.ts for s in steps)
        end = max(s.end for s in steps)
        for n in self.steady:
            for e in self.trace.by_step[n]["device"]:
                end = max(end, e.end)
        return start, end

    def steady_events(self, kind):
        return [e for n in self.steady for e in self.trace.by_step[n][kind]]

    def steady_kernel_names(self):
        return {e.name for e in self.steady_events("device")
                if e.cat == "kernel"}

    def wall_per_step(self):
        start, end = self.window()
        return (end - start) / len(self.steady)

    def kernel_rows(self):
        """[(label, launches/step, device us/step)] largest first."""
        n = len(self.steady)
        table = {}
        for e in self.steady_events("device"):
            key = (e.cat, e.name)
            count, us = table.get(key, (0, 0.0))
            table[key] = (count + 1, us + e.dur)
        rows = [(device_label(e_cat, name), count / n, us / n)
                for (e_cat, name), (count, us) in table.items()]
        rows.sort(key=lambda r: (-r[2], r[0]))
        return rows

    def op_rows(self):
        """[(name, calls/step, self us/step)] of the CPU operators."""
        n = len(self.steady)
        table = self_times(self.steady_events("cpu_ops"))
        rows = [(short_name(name), calls / n, us / n)
                for name, (calls, us) in table.items()]
        rows.sort(key=lambda r: (-r[2], r[0]))
        return rows

    def device_busy_idle(self):
        """(busy us/step, idle us/step) over the steady window."""
        start, end = self.window()
        busy = busy_union(self.trace.device, start, end)
        n = len(self.steady)
        return busy / n, (end - start - busy) / n

    def steady_syncs(self):
        counts = sync_counts(self.steady_events("runtime"),
                             self.steady_events("cpu_ops"),
                             self.steady_events("device"))
        n = len(self.steady)
        return {k: (c / n, v / n) for k, (c, v) in counts.items()}

    # -- the first steps -----------------------------------------------------

    def step_rows(self):
        """One dict per step among the first `first` traced."""
        steady_kernels = self.steady_kernel_names()
        n = len(self.steady)
        steady_self = {name: (calls / n, us / n) for name, (calls, us) in
                       self_times(self.steady_events("cpu_ops")).items()}
        rows = []
        for number in self.trace.numbers()[:self.first]:
            step = self.trace.steps[number]
            events = self.trace.by_step[number]
            device = events["device"]
            kernels = [e for e in device if e.cat == "kernel"]
            counts = sync_counts(events["runtime"], events["cpu_ops"], device)
            notes = []
            loads = [e for e in events["runtime"]
                     if e.name.startswith(MODULE_LOAD_PREFIXES)]
            if loads:
                notes.append(f"module loading {plural(len(loads), 'call')} "
                             f"{fmt(sum(e.dur for e in loads) / 1000)} ms")
            slow_launches = [e for e in events["runtime"]
                             if e.name.startswith(LAUNCH_PREFIXES) and
                             e.dur > SLOW_LAUNCH_US]
            if slow_launches:
                notes.append(
                    f"{plural(len(slow_launches), 'launch call')} over "
                    f"{SLOW_LAUNCH_US / 1000:g} ms "
                    f"{fmt(sum(e.dur for e in slow_launches) / 1000)} ms "
                    "(a module loaded lazily, or a full launch queue)")
            allocs = [e for e in events["runtime"] if e.name in ALLOC_CALLS]
            if allocs:
                notes.append("allocator growth: " + ", ".join(
                    f"{plural(sum(1 for e in allocs if e.name == name), name, name)}"
                    for name in sorted({e.name for e in allocs}))
                    + f" {fmt(sum(e.dur for e in allocs) / 1000)} ms")
            frees = [e for e in events["runtime"] if e.name in FREE_CALLS]
            if frees:
                notes.append(f"{plural(len(frees), 'free')} "
                             f"{fmt(sum(e.dur for e in frees) / 1000)} ms")
            if number not in self.steady and steady_kernels:
                new = [e for e in kernels if e.name not in steady_kernels]
                if new:
                    names = {}
                    for e in new:
                        names[e.name] = names.get(e.name, 0) + 1
                    common = sorted(names.items(), key=lambda kv: -kv[1])[0]
                    notes.append(
                        f"{plural(len(new), 'launch', 'launches')} of "
                        f"{plural(len(names), 'kernel')} not in the steady "
                        f"steps ({fmt(sum(e.dur for e in new) / 1000)} ms on "
                        f"the device; most: {short_name(common[0], 40)} "
                        f"x{common[1]})")
            # The calls say whether an operator ran more often than in a
            # steady step (a second pass) or as often, but slower (a
            # search, a first call).
            slow = []
            for name, (calls, us) in self_times(events["cpu_ops"]).items():
                usual_calls, usual = steady_self.get(name, (0.0, 0.0))
                extra = us - usual
                if extra > max(2000.0, 0.1 * step.dur):
                    slow.append((extra, name, us, calls, usual, usual_calls))
            slow.sort(reverse=True)
            if slow:
                notes.append("slow: " + ", ".join(
                    f"{short_name(name, 48)} {fmt(us / 1000)} ms in "
                    f"{plural(calls, 'call')} (steady {fmt(usual / 1000, 2)} "
                    f"ms in {usual_calls:,.3g})"
                    for _, name, us, calls, usual, usual_calls in slow[:3]))
            outside = host_outside_ops(step, events["cpu_ops"])
            if outside > max(2000.0, 0.1 * step.dur):
                notes.append(f"host outside operators {fmt(outside / 1000)} "
                             "ms")
            blocked = sum(counts.get(k, (0, 0.0))[1] for k in BLOCKING)
            rows.append({
                "step": number,
                "wall_ms": step.dur / 1000,
                "device_ms": sum(e.dur for e in device) / 1000,
                "kernels": len(kernels),
                "syncs": blocking_syncs(counts),
                "blocked_ms": blocked / 1000,
                "items": counts.get(".item()", (0, 0))[0],
                "notes": notes,
            })
        return rows

    def operator_rows(self, number, top=6):
        """Rows of step `number`'s work by operator (work_by_operator), the
        `top` with the most host time first, then one row for the rest and
        one for the work outside any operator. Each row: name, calls and
        host microseconds in the step, its work, and a steady step's calls
        and kernels of the same operator, for comparison."""
        events = self.trace.by_step[number]
        steady_kernels = self.steady_kernel_names()
        work = work_by_operator(events, steady_kernels)
        if not work:
            return []
        n = len(self.steady)
        steady_work = {}
        for s in self.steady:
            for name, row in work_by_operator(self.trace.by_step[s],
                                              steady_kernels).items():
                steady_work[name] = steady_work.get(name, 0) + row["kernels"]

        def host(ops):
            table = {}
            for op in ops:
                if op.cat != "user_annotation":
                    calls, us = table.get(op.name, (0, 0.0))
                    table[op.name] = (calls + 1, us + op.dur)
            return table

        own = host(events["cpu_ops"])
        usual = host(self.steady_events("cpu_ops"))
        rows = []
        for name, row in work.items():
            calls, us = own.get(name, (0, 0.0))
            steady_calls = usual.get(name, (0, 0.0))[0] / n
            rows.append(dict(row, name=name, calls=calls, host_us=us,
                             steady_calls=steady_calls,
                             steady_kernels=steady_work.get(name, 0) / n))
        unnamed = (OUTSIDE_OPS, NO_LAUNCH_CALL)
        outside = [r for r in rows if r["name"] in unnamed]
        rows = [r for r in rows if r["name"] not in unnamed]
        rows.sort(key=lambda r: (-r["host_us"], r["name"]))
        shown, rest = rows[:top], rows[top:]
        if rest:
            folded = {"name": f"({plural(len(rest), 'other operator')})",
                      "calls": None, "host_us": None, "steady_calls": None}
            for key in ("kernels", "new", "device_us", "syncs", "allocs",
                        "steady_kernels"):
                folded[key] = sum(r[key] for r in rest)
            folded["largest_bytes"] = max(r["largest_bytes"] for r in rest)
            shown.append(folded)
        for r in outside:
            r.update(calls=None, host_us=None, steady_calls=None)
        return shown + outside

    # -- text ----------------------------------------------------------------

    def text(self, title=None):
        t = self.trace
        lines = []
        numbers = t.numbers()
        size = t.size / 2**20
        what = f"{t.format} trace, {size:.1f} MiB" if size >= 0.1 else \
            f"{t.format} trace, {t.size / 1024:.1f} KiB"
        head = f"trace: {title or os.path.basename(t.path)} ({what}"
        if t.gpu:
            head += f"; {t.gpu}"
        lines.append(head + ")")
        lines.append(f"steps traced: {numbers[0]}-{numbers[-1]} "
                     f"({len(numbers)}); steady: {self.steady[0]}-"
                     f"{self.steady[-1]} ({len(self.steady)})"
                     + self.steady_note)
        wall = self.wall_per_step()
        lines.append(f"steady step: {fmt(wall / 1000, 2)} ms wall")
        if self.has_device:
            busy, idle = self.device_busy_idle()
            lines.append(
                f"device per steady step: busy {fmt(busy / 1000, 2)} ms "
                f"({100 * busy / wall:.1f}%), idle {fmt(idle / 1000, 2)} ms "
                f"({100 * idle / wall:.1f}%)")
        else:
            lines.append("device: no kernels in this trace (CPU only)")
        syncs = self.steady_syncs()
        if syncs:
            parts = []
            for name in SYNC_CALLS:
                if name in syncs:
                    count, us = syncs[name]
                    parts.append(f"{name} {count:g} ({fmt(us / 1000, 2)} ms)")
            if "DtoH copies" in syncs:
                count, nbytes = syncs["DtoH copies"]
                parts.append(f"DtoH copies {count:g} ({nbytes:,.0f} B)")
            if ".item()" in syncs:
                parts.append(f".item() {syncs['.item()'][0]:g}")
            lines.append("host-device syncs per steady step: "
                         + "; ".join(parts))
        else:
            lines.append("host-device syncs per steady step: none")
        lines.append("")
        if self.has_device:
            rows = self.kernel_rows()
            lines.append("kernels over the steady steps (per step; share: of "
                         "the step's wall time):")
            lines.append(f"  {'launches':>9} {'device us':>11} {'share':>6}  "
                         "kernel")
            unit = "kernels"
        else:
            rows = self.op_rows()
            lines.append("CPU operators over the steady steps (per step, "
                         "self time; share: of the step's wall time):")
            lines.append(f"  {'calls':>9} {'self us':>11} {'share':>6}  "
                         "operator")
            unit = "operators"
        shown, rest = rows[:self.top], rows[self.top:]
        for label, count, us in shown:
            lines.append(f"  {count:>9,.1f} {us:>11,.1f} "
                         f"{100 * us / wall:>5.1f}%  {label}")
        if rest:
            count = sum(r[1] for r in rest)
            us = sum(r[2] for r in rest)
            lines.append(f"  {count:>9,.1f} {us:>11,.1f} "
                         f"{100 * us / wall:>5.1f}%  ({len(rest)} other "
                         f"{unit})")
        count = sum(r[1] for r in rows)
        us = sum(r[2] for r in rows)
        lines.append(f"  {count:>9,.1f} {us:>11,.1f} {100 * us / wall:>5.1f}%"
                     "  total")
        lines.append("")
        shown_steps = min(self.first, len(numbers))
        lines.append("the first step:" if shown_steps == 1 else
                     f"the first {shown_steps} steps:")
        lines.append(f"  {'step':>4} {'wall ms':>10} {'device ms':>10} "
                     f"{'kernels':>8} {'syncs':>6}  what happened")
        for row in self.step_rows():
            notes = "; ".join(row["notes"]) or "-"
            lines.append(f"  {row['step']:>4} {row['wall_ms']:>10,.2f} "
                         f"{row['device_ms']:>10,.2f} {row['kernels']:>8,} "
                         f"{row['syncs']:>6}  {notes}")
        first = numbers[0]
        rows = self.operator_rows(first) \
            if self.first > 0 and first not in self.steady else []
        if rows:
            lines.append("")
            memory = bool(device_allocations(t.by_step[first]["memory"]))
            lines.append(
                f"step {first} by operator (each launch, synchronize and "
                "cudaMalloc charged to the innermost operator around its "
                "call; new: kernels no steady step launched"
                + ("; largest: its largest device allocation, a cuDNN "
                   "search's workspace" if memory else "") + "):")
            lines.append(f"  {'calls':>6} {'host ms':>10} {'kernels':>8} "
                         f"{'new':>6} {'syncs':>6} {'mallocs':>7} "
                         + (f"{'largest MB':>10} " if memory else "")
                         + f"{'device ms':>10}  {'steady calls':>12} "
                         f"{'kernels':>8}  operator")

            def cell(value, width, text):
                return f"{'-':>{width}}" if value is None else \
                    f"{text(value):>{width}}"

            for r in rows:
                lines.append(
                    "  " + cell(r["calls"], 6, lambda v: f"{v:,}") + " "
                    + cell(r["host_us"], 10, lambda v: fmt(v / 1000, 2))
                    + f" {r['kernels']:>8,} {r['new']:>6,} {r['syncs']:>6,} "
                    f"{r['allocs']:>7,} "
                    + (f"{fmt(r['largest_bytes'] / 2**20, 1):>10} "
                       if memory else "")
                    + f"{fmt(r['device_us'] / 1000, 2):>10}  "
                    + cell(r["steady_calls"], 12, lambda v: f"{v:,.3g}")
                    + f" {r['steady_kernels']:>8,.3g}  "
                    + short_name(r["name"], 48))
        return "\n".join(lines) + "\n"


def summarize(path, warmup=10, first=10, top=20, title=None):
    """The text tables of the trace at path (raises TraceError)."""
    return Summary(Trace(path), warmup, first, top).text(title)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n")[2:]))
    parser.add_argument("trace")
    parser.add_argument("--warmup", type=int, default=10,
                        help="steps before the steady ones (default 10)")
    parser.add_argument("--first", type=int, default=10,
                        help="steps listed one by one (default 10)")
    parser.add_argument("--top", type=int, default=20,
                        help="rows of the kernel table (default 20)")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    for flag in ("warmup", "first", "top"):
        if getattr(args, flag) < 0:
            parser.error(f"--{flag} must be >= 0")
    try:
        text = summarize(args.trace, args.warmup, args.first, args.top,
                         args.title)
    except TraceError as e:
        print(f"trace_summary: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
