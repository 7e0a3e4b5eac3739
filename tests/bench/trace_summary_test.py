"""bench/trace_summary.py on recorded traces (tests/bench/traces/):

  cuda_kineto.json  hand-written in the layout of torch.profiler's Kineto
                    export on a GPU (user annotations, cuda_runtime and
                    cuda_driver calls, kernels, copies, a memset, flow and
                    metadata events, profile_memory's allocation records as
                    torch 2.6 writes them), with figures worked out by hand
                    below;
  cpu_torch.json    recorded by make_cpu_trace.py with Debian's torch 1.13
                    (no Kineto: the legacy format, a list of events);
  cpu_torch_kineto.json  the same steps recorded with Debian 13's torch 2.6
                    (Kineto's layout on the CPU).

Run: python3 -m unittest discover -s tests/bench -p '*_test.py'
(CTest runs it as bench_trace_summary).
"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.dont_write_bytecode = True

import trace_summary as ts  # noqa: E402

CUDA = os.path.join(HERE, "traces", "cuda_kineto.json")
CPU = os.path.join(HERE, "traces", "cpu_torch.json")
CPU_KINETO = os.path.join(HERE, "traces", "cpu_torch_kineto.json")
GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_"
        "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas")


class CudaTrace(unittest.TestCase):
    """Steps 1-4, warm-up 2: steady steps 3 and 4, 1,000 us apart."""

    @classmethod
    def setUpClass(cls):
        cls.trace = ts.Trace(CUDA)
        cls.summary = ts.Summary(cls.trace, warmup=2, first=10, top=20)

    def test_reads_the_kineto_layout(self):
        self.assertEqual(self.trace.format, "Kineto")
        self.assertEqual(self.trace.gpu, "NVIDIA H200")
        self.assertEqual(self.trace.numbers(), [1, 2, 3, 4])
        self.assertEqual(self.summary.steady, [3, 4])
        # The gpu_user_annotation copy of step 1 is not a second step 1.
        self.assertEqual(self.trace.steps[1].ts, 0)
        self.assertEqual(len(self.trace.device), 12)

    def test_device_work_goes_to_the_step_that_launched_it(self):
        # Step 4's GEMM and copy end after its annotation; the kernel
        # launched before step 1 belongs to no step.
        per_step = {n: sorted(e.name for e in self.trace.by_step[n]["device"])
                    for n in self.trace.numbers()}
        self.assertEqual(per_step[1], [
            "void conv_fwd_kernel<float, 128>(Params)",
            "void cudnn::winograd_search_kernel<float>(cudnn::Params)"])
        self.assertEqual(per_step[4], [
            "Memcpy DtoH (Device -> Pinned)", "Memset (Device)",
            GEMM, "void conv_fwd_kernel<float, 128>(Params)"])
        self.assertEqual(sum(len(v) for v in per_step.values()), 11)

    def test_steady_wall_busy_and_idle_per_step(self):
        # Window 12,000-14,000 us. Busy: step 3 12,200-12,810 (610 us),
        # step 4 13,150-13,810 (660 us): 1,270 us over 2 steps.
        self.assertEqual(self.summary.window(), (12000.0, 14000.0))
        self.assertEqual(self.summary.wall_per_step(), 1000.0)
        self.assertEqual(self.summary.device_busy_idle(), (635.0, 365.0))

    def test_the_kernel_table(self):
        self.assertEqual(self.summary.kernel_rows(), [
            (ts.short_name(GEMM), 1.0, 400.0),
            ("conv_fwd_kernel<float, 128>", 1.0, 200.0),
            ("[memset] Memset (Device)", 0.5, 25.0),
            ("[memcpy] Memcpy DtoH (Device -> Pinned)", 1.0, 10.0),
        ])

    def test_syncs_per_steady_step(self):
        self.assertEqual(self.summary.steady_syncs(), {
            "cudaStreamSynchronize": (1.0, 300.0),
            "DtoH copies": (1.0, 4.0),
            ".item()": (1.0, 400.0),
        })

    def test_the_first_steps_say_what_happened(self):
        rows = self.summary.step_rows()
        self.assertEqual([r["step"] for r in rows], [1, 2, 3, 4])
        first = rows[0]
        self.assertEqual(first["wall_ms"], 10.0)
        self.assertEqual(first["device_ms"], 1.2)
        self.assertEqual(first["kernels"], 2)
        self.assertEqual(first["syncs"], 1)   # cudaDeviceSynchronize
        self.assertEqual(first["blocked_ms"], 0.5)
        # The 1.5 ms launch call at 5,000 is a module loaded lazily; the
        # others take 10 us.
        self.assertEqual(first["notes"], [
            "module loading 2 calls 2.0 ms",
            "1 launch call over 1 ms 1.5 ms (a module loaded lazily, or a "
            "full launch queue)",
            "allocator growth: 1 cudaMalloc 0.3 ms",
            "1 launch of 1 kernel not in the steady steps (1.0 ms on the "
            "device; most: cudnn::winograd_search_kernel<float> x1)",
            "slow: aten::cudnn_convolution 8.0 ms in 1 call (steady 0.30 ms "
            "in 1)",
        ])
        self.assertEqual(rows[1]["notes"], [])
        self.assertEqual((rows[1]["wall_ms"], rows[1]["device_ms"]),
                         (2.0, 0.6))
        self.assertEqual([r["items"] for r in rows], [0, 0, 1, 1])

    def test_host_time_outside_operators(self):
        # Step 1: 10,000 us, one convolution 100-8,100: 2,000 us outside,
        # not above max(2 ms, 10%) so no note; step 3: a convolution and an
        # .item(), 300 + 400 of 1,000 us.
        self.assertEqual(ts.host_outside_ops(
            self.trace.steps[1], self.trace.by_step[1]["cpu_ops"]), 2000.0)
        self.assertEqual(ts.host_outside_ops(
            self.trace.steps[3], self.trace.by_step[3]["cpu_ops"]), 300.0)
        # A step whose host spends 9 of its 10 ms outside operators says so.
        step = ts.Event({"name": "ProfilerStep#1", "ts": 0, "dur": 10000,
                         "tid": 7}, "user_annotation")
        ops = [ts.Event({"name": "aten::mm", "ts": 500, "dur": 1000,
                         "tid": 7}, "cpu_op"),
               ts.Event({"name": "aten::mm", "ts": 500, "dur": 9000,
                         "tid": 8}, "cpu_op")]   # another thread's
        self.assertEqual(ts.host_outside_ops(step, ops), 9000.0)
        # The backward on the autograd engine's device thread is what the
        # step's thread waits for: not outside.
        ops.append(ts.Event({
            "name": "autograd::engine::evaluate_function: "
                    "ConvolutionBackward0", "ts": 2000, "dur": 6000,
            "tid": 9}, "cpu_op"))
        self.assertEqual(ts.host_outside_ops(step, ops), 3000.0)

    def test_the_first_step_by_operator(self):
        # Step 1: the convolution (100-8,100) called the cudaMalloc and
        # both launches (the search kernel new, the convolution's own as in
        # the steady steps, where each convolution also launches the GEMM:
        # 2 a step); the cudaDeviceSynchronize at 9,000 is outside it.
        rows = self.summary.operator_rows(1)
        self.assertEqual([r["name"] for r in rows],
                         ["aten::cudnn_convolution", ts.OUTSIDE_OPS])
        conv, outside = rows
        # Its largest device allocation is the 64 MiB one (the CPU's 128
        # MiB and the frees are not the device's allocations); the 2 MiB
        # after it is outside.
        self.assertEqual(
            {k: conv[k] for k in ("calls", "host_us", "kernels", "new",
                                  "syncs", "allocs", "device_us",
                                  "largest_bytes", "steady_calls",
                                  "steady_kernels")},
            {"calls": 1, "host_us": 8000.0, "kernels": 2, "new": 1,
             "syncs": 0, "allocs": 1, "device_us": 1200.0,
             "largest_bytes": 64 * 2**20, "steady_calls": 1.0,
             "steady_kernels": 2.0})
        self.assertEqual((outside["kernels"], outside["syncs"],
                          outside["largest_bytes"], outside["calls"],
                          outside["host_us"]),
                         (0, 1, 2 * 2**20, None, None))
        self.assertEqual(len(self.trace.memory), 5)
        self.assertEqual(len(self.trace.by_step[1]["memory"]), 5)
        # The steady steps' .item() is charged its copy and its sync.
        work = ts.work_by_operator(self.trace.by_step[3], set())
        self.assertEqual(work["aten::_local_scalar_dense"]["syncs"], 1)
        self.assertEqual(work["aten::_local_scalar_dense"]["kernels"], 0)
        self.assertEqual(work["aten::_local_scalar_dense"]["device_us"], 10.0)
        self.assertEqual(work["aten::cudnn_convolution"]["new"], 2)

    @staticmethod
    def summarize_edited(edit):
        """The tables of the CUDA trace after edit(its events)."""
        with open(CUDA) as f:
            doc = json.load(f)
        edit(doc["traceEvents"])
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            with open(path, "w") as f:
                json.dump(doc, f)
            return ts.summarize(path, warmup=2)

    def test_without_memory_records_no_largest_column(self):
        def drop_memory(events):
            events[:] = [e for e in events if e.get("name") != "[memory]"]

        text = self.summarize_edited(drop_memory)
        self.assertIn("step 1 by operator", text)
        self.assertNotIn("largest", text)
        self.assertIn("       1       8.00        2      1      0       1 "
                      "      1.20             1        2  "
                      "aten::cudnn_convolution", text.splitlines())
        # A CPU trace has no launches: no table.
        self.assertNotIn("by operator", ts.summarize(CPU_KINETO, warmup=2))

    def test_device_work_without_its_launch_call_has_a_row(self):
        # Step 1's two kernels with their calls' correlation ids taken away.
        events = dict(self.trace.by_step[1])
        events["runtime"] = [ts.Event({"name": e.name, "ts": e.ts,
                                       "dur": e.dur, "tid": e.tid,
                                       "pid": e.pid}, e.cat)
                             for e in events["runtime"]]
        work = ts.work_by_operator(events, set())
        self.assertEqual(work[ts.NO_LAUNCH_CALL]["kernels"], 2)
        self.assertEqual(work[ts.NO_LAUNCH_CALL]["device_us"], 1200.0)
        self.assertEqual(work["aten::cudnn_convolution"]["kernels"], 0)
        self.assertEqual(
            ts.work_by_operator(self.trace.by_step[1], set()).get(
                ts.NO_LAUNCH_CALL), None)

    def test_no_table_with_first_zero_and_no_largest_without_bytes(self):
        self.assertNotIn("by operator", ts.summarize(CUDA, warmup=2,
                                                     first=0))

        def drop_bytes(events):
            for e in events:
                if e.get("name") == "[memory]":
                    del e["args"]["Bytes"]

        text = self.summarize_edited(drop_bytes)
        self.assertIn("step 1 by operator", text)
        self.assertNotIn("largest", text)

    def test_top_folds_the_other_operators_into_one_row(self):
        rows = self.summary.operator_rows(3, top=0)
        self.assertEqual([r["name"] for r in rows], ["(2 other operators)"])
        self.assertEqual((rows[0]["kernels"], rows[0]["syncs"],
                          rows[0]["steady_kernels"]), (2, 1, 2.0))

    def test_launches_go_to_the_innermost_operator_of_their_thread(self):
        def op(name, ts_, dur, tid):
            return ts.Event({"name": name, "ts": ts_, "dur": dur,
                             "tid": tid}, "cpu_op")

        def call(ts_, tid):
            return ts.Event({"name": "cudaLaunchKernel", "ts": ts_,
                             "dur": 1, "tid": tid}, "cuda_runtime")

        ops = [op("aten::conv2d", 0, 100, 1),
               op("aten::cudnn_convolution", 10, 50, 1),
               op("aten::add", 200, 10, 1),
               # The backward on the engine's thread, at the same time.
               op("autograd::engine::evaluate_function: "
                  "ConvolutionBackward0", 0, 300, 2),
               op("aten::convolution_backward", 0, 300, 2)]
        calls = [call(205, 1), call(20, 1), call(80, 1), call(20, 2),
                 call(150, 1), call(400, 2)]
        owners = ts.innermost_ops(ops, calls)
        self.assertEqual([o.name if o else None for o in owners], [
            "aten::add", "aten::cudnn_convolution", "aten::conv2d",
            "aten::convolution_backward", None, None])
        # The two thread-2 ops start and end together: the parent is the
        # one Kineto numbered first, whatever the file's order.
        for first, second in ((3, 4), (4, 3)):
            tied = ops[:3] + [ops[first], ops[second]]
            tied[3].args["External id"] = 10 if first == 3 else 11
            tied[4].args["External id"] = 11 if first == 3 else 10
            self.assertEqual(
                ts.innermost_ops(tied, calls)[3].name,
                "aten::convolution_backward")

    def test_the_text(self):
        text = self.summary.text("gpt2 hotloop")
        lines = text.splitlines()
        self.assertEqual(lines[0], "trace: gpt2 hotloop (Kineto trace, "
                         "9.1 KiB; NVIDIA H200)")
        self.assertIn("steps traced: 1-4 (4); steady: 3-4 (2)", lines)
        self.assertIn("device per steady step: busy 0.64 ms (63.5%), idle "
                      "0.36 ms (36.5%)", lines)
        self.assertIn("host-device syncs per steady step: "
                      "cudaStreamSynchronize 1 (0.30 ms); DtoH copies 1 "
                      "(4 B); .item() 1", lines)
        self.assertIn("        3.5       635.0  63.5%  total", lines)
        self.assertIn("     2       2.00       0.60        2      0  -", lines)
        self.assertIn("       1       8.00        2      1      0       1 "
                      "      64.0       1.20             1        2  "
                      "aten::cudnn_convolution", lines)
        self.assertIn("       -          -        0      0      1       0 "
                      "       2.0       0.00             -        0  "
                      "(outside any operator)", lines)
        self.assertLess(len(text), 4000)

    def test_top_folds_the_rest_into_one_row(self):
        text = ts.Summary(self.trace, warmup=2, top=2).text()
        self.assertIn("        1.5        35.0   3.5%  (2 other kernels)",
                      text.splitlines())

    def test_without_steady_steps_the_last_ones_stand_in(self):
        summary = ts.Summary(self.trace, warmup=10)
        self.assertEqual(summary.steady, [2, 3, 4])
        self.assertIn("steady: 2-4 (3) (no step after 10 traced: the last 3 "
                      "stand in)", summary.text())


class CpuTrace(unittest.TestCase):
    """Five SGD steps of Linear(16, 8) -> ReLU -> Linear(8, 4), each ending
    with loss.item(), recorded by torch 1.13's profiler."""

    PATH, FORMAT = CPU, "legacy profiler"

    @classmethod
    def setUpClass(cls):
        cls.trace = ts.Trace(cls.PATH)
        cls.summary = ts.Summary(cls.trace, warmup=2)

    def test_reads_the_layout(self):
        self.assertEqual(self.trace.format, self.FORMAT)
        self.assertEqual(self.trace.numbers(), [1, 2, 3, 4, 5])
        self.assertEqual(self.trace.device, [])
        self.assertEqual(self.trace.runtime, [])
        self.assertFalse(self.summary.has_device)

    def test_operators_per_step(self):
        rows = {name: calls for name, calls, _ in self.summary.op_rows()}
        # Forward: two addmm; backward: three mm (both weights' gradients
        # and the input gradient of the second layer); one item().
        self.assertEqual(rows["aten::addmm"], 2.0)
        self.assertEqual(rows["aten::mm"], 3.0)
        self.assertEqual(rows["aten::relu"], 1.0)
        self.assertEqual(rows["aten::_local_scalar_dense"], 1.0)
        total = sum(us for _, _, us in self.summary.op_rows())
        self.assertGreater(total, 0)
        self.assertLessEqual(total, self.summary.wall_per_step())

    def test_syncs_are_the_items(self):
        syncs = self.summary.steady_syncs()
        self.assertEqual(list(syncs), [".item()"])
        self.assertEqual(syncs[".item()"][0], 1.0)

    def test_the_text_names_the_cpu_table(self):
        text = self.summary.text()
        self.assertIn("device: no kernels in this trace (CPU only)", text)
        self.assertIn("CPU operators over the steady steps", text)
        self.assertIn("the first 5 steps:", text)


class CpuKinetoTrace(CpuTrace):
    """The same five steps recorded by torch 2.6's Kineto profiler: every
    test of CpuTrace holds for it too."""

    PATH, FORMAT = CPU_KINETO, "Kineto"


class Pieces(unittest.TestCase):
    def test_short_names(self):
        self.assertEqual(
            ts.short_name("void at::native::vectorized_elementwise_kernel<4, "
                          "at::native::FillFunctor<float>, at::detail::Array"
                          "<char*, 1> >(int, at::native::FillFunctor<float>, "
                          "at::detail::Array<char*, 1>)", 100),
            "vectorized_elementwise_kernel<4, FillFunctor<float>, "
            "detail::Array<char*, 1> >")
        self.assertEqual(ts.short_name("aten::addmm"), "aten::addmm")
        self.assertEqual(ts.short_name("x" * 100, 10), "xxxxxxx...")
        self.assertEqual(ts.short_name("Memcpy DtoH (Device -> Pinned)",
                                       params=True),
                         "Memcpy DtoH (Device -> Pinned)")

    def test_self_time_leaves_out_nested_ops(self):
        def op(name, ts_, dur, tid=1):
            return ts.Event({"name": name, "ts": ts_, "dur": dur, "pid": 1,
                             "tid": tid}, "cpu_op")
        ops = [op("linear", 0, 100), op("addmm", 10, 60), op("copy", 20, 10),
               op("relu", 100, 5), op("linear", 0, 7, tid=2)]
        self.assertEqual(ts.self_times(ops), {
            "linear": (2, 47.0), "addmm": (1, 50.0), "copy": (1, 10.0),
            "relu": (1, 5.0)})

    def test_busy_union_merges_overlaps_and_clips(self):
        def ev(ts_, dur):
            return ts.Event({"ts": ts_, "dur": dur}, "kernel")
        events = [ev(0, 10), ev(5, 10), ev(30, 10), ev(95, 20)]
        self.assertEqual(ts.busy_union(events, 0, 100), 15 + 10 + 5)
        self.assertEqual(ts.busy_union(events, 8, 35), 7 + 5)


class BadInput(unittest.TestCase):
    def write(self, text):
        handle, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(handle, "w") as f:
            f.write(text)
        self.addCleanup(os.remove, path)
        return path

    def run_main(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            status = ts.main(list(argv))
        return status, out.getvalue(), err.getvalue()

    def test_a_trace_without_steps_is_refused(self):
        path = self.write(json.dumps({"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0,
             "dur": 1}]}))
        status, out, err = self.run_main(path)
        self.assertEqual((status, out), (2, ""))
        self.assertEqual(err, f"trace_summary: {path}: no ProfilerStep#N "
                         "annotations: the steps were not marked "
                         "(torch.profiler's record_function or hotloop's "
                         "trainer.profiler=pytorch mark them)\n")

    def test_not_json_and_missing_files(self):
        path = self.write("[{")
        status, _, err = self.run_main(path)
        self.assertEqual(status, 2)
        self.assertTrue(err.startswith(f"trace_summary: {path}: not JSON ("))
        status, _, err = self.run_main("/nonexistent/trace.json")
        self.assertEqual((status, err), (2, "trace_summary: "
                         "/nonexistent/trace.json: No such file or "
                         "directory\n"))
        path = self.write('{"events": []}')
        self.assertEqual(self.run_main(path)[2],
                         f"trace_summary: {path}: neither a list of trace "
                         "events nor an object with traceEvents\n")

    def test_main_prints_the_tables(self):
        status, out, err = self.run_main(CUDA, "--warmup", "2", "--title",
                                         "t")
        self.assertEqual((status, err), (0, ""))
        self.assertTrue(out.startswith("trace: t (Kineto trace"))


if __name__ == "__main__":
    unittest.main()
