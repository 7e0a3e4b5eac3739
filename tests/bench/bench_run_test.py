"""bench/run's accounting without running anything: the warm-up figures and
targets (issue 29, item 3), the MFU column's peak handed to hotloop and the
check that its step profile agrees (item 7), the rate targets, on runs as
run_hotloop and python_train.py report them.

Run: python3 -m unittest discover -s tests/bench -p '*_test.py'
"""

import argparse
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True


def load_bench_run():
    path = os.path.join(REPO, "bench", "run")
    loader = importlib.machinery.SourceFileLoader("bench_run", path)
    spec = importlib.util.spec_from_loader("bench_run", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


run = load_bench_run()


def args(**over):
    values = dict(suite="cuda", quick=False, precision="auto", impls=[
        "hotloop", "python-tuned", "python-compile"], hotloop_option=[],
        threads=0, data_root=None, traces=None, peak_flops=989.4e12,
        hotloop="/bin/hotloop", python="/usr/bin/python3", configs=".")
    values.update(over)
    return argparse.Namespace(**values)


def gpt2_runs(hot_step10=8.94, tuned_step10=4.1, hot_util=None):
    """GPT-2 rows as the 2026-11-26 H200 run gave them (per sample: the
    tables multiply by the block of 1024)."""
    hot_profile = {"steady_samples_per_s": 323494 / 1024,
                   "process_to_first_step_s": 2.5,
                   "process_to_step10_s": hot_step10}
    if hot_util is not None:
        hot_profile.update(utilization=hot_util,
                           peak_source="trainer.peak_tflops")
    return {
        "hotloop": {"impl": "hotloop", "samples_per_s": 85651 / 1024,
                    "steady_samples_per_s": 323494 / 1024, "steps": 60,
                    "profile": hot_profile,
                    "process_to_first_step_s": 2.5,
                    "process_to_step10_s": hot_step10},
        "python-tuned": {"impl": "python-tuned",
                         "samples_per_s": 307487 / 1024,
                         "steady_samples_per_s": 377311 / 1024, "steps": 60,
                         "process_to_first_step_s": 3.1,
                         "process_to_step10_s": tuned_step10},
        "python-compile": {"skipped": "torch.compile needs torch >= 2.0"},
    }


def document(runs, a=None, gpu="NVIDIA H200"):
    a = a or args()
    plan = run.make_plan(a, "gpt2", {"data": {"block_size": 1024}})
    machine = {"gpu": gpu, "gpu_peak_bf16_flops": a.peak_flops}
    results = {"gpt2": {"plan": plan, "runs": runs, "notes": []}}
    return run.build_document(a, machine, results, {
        "jemalloc": None, "allocator": "glibc"})


def target(doc, start):
    return next(t for t in doc["targets"] if t["name"].startswith(start))


class Warmup(unittest.TestCase):
    def test_each_side_from_its_process_start(self):
        doc = document(gpt2_runs())
        runs = doc["workloads"]["gpt2"]["runs"]
        self.assertEqual(
            run.warmup_text(runs),
            "from the process start to the first step / to the end of step "
            "10: hotloop 2.50 s / 8.94 s, python-tuned 3.10 s / 4.10 s "
            "(0.46x hotloop's)")
        tuned = next(r for r in runs if r["impl"] == "python-tuned")
        self.assertAlmostEqual(tuned["warmup_ratio"], 4.1 / 8.94)

    def test_a_run_without_step_10_reads_a_dash(self):
        runs = gpt2_runs()
        runs["python-tuned"]["process_to_step10_s"] = None
        text = run.warmup_text(document(runs)["workloads"]["gpt2"]["runs"])
        self.assertIn("python-tuned 3.10 s / -", text)

    def test_the_targets(self):
        doc = document(gpt2_runs())
        t = target(doc, "CUDA GPT-2 124M process start to the end of step 10 "
                   "<= the tuned")
        self.assertEqual(t["status"], "MISS")
        self.assertEqual(t["detail"], "hotloop 8.94 s, python-tuned 4.10 s "
                         "(hotloop 4.84 s longer, 118% over)")
        # The first 10 steps: from the start of step 1 (2.5 s after the
        # process's) to the end of step 10.
        t = target(doc, "CUDA GPT-2 124M (bf16) first 10 steps <= 2 s")
        self.assertEqual(t["status"], "MISS")
        self.assertAlmostEqual(t["value"], 6.44)
        self.assertEqual(t["detail"], "6.44 s (target <= 2 s; 222% over) on "
                         "NVIDIA H200")
        doc = document(gpt2_runs(hot_step10=4.0, tuned_step10=4.1))
        self.assertEqual(target(doc, "CUDA GPT-2 124M process start")
                         ["status"], "PASS")
        self.assertEqual(target(doc, "CUDA GPT-2 124M (bf16) first 10 steps")
                         ["status"], "PASS")
        # Another GPU: no verdict on the seconds.
        doc = document(gpt2_runs(hot_step10=4.0), gpu="NVIDIA A100")
        t = target(doc, "CUDA GPT-2 124M (bf16) first 10 steps")
        self.assertEqual(t["status"], "n/a")
        self.assertEqual(t["detail"], "1.50 s on NVIDIA A100: the target is "
                         "for an H100 or H200")


class Rates(unittest.TestCase):
    def test_steady_tokens_against_the_tuned_loop_and_compile(self):
        doc = document(gpt2_runs())
        t = target(doc, "CUDA GPT-2 124M (bf16) >= 1.15x")
        self.assertEqual(t["status"], "MISS")
        self.assertAlmostEqual(t["value"], 323494 / 377311)
        self.assertEqual(t["detail"], "0.86x (target >= 1.15x; 25% short); "
                         "steady tokens/s: hotloop 323,494, python-tuned "
                         "377,311")
        t = target(doc, "CUDA GPT-2 124M (bf16) >= torch.compile")
        self.assertEqual((t["status"], t["detail"]), (
            "n/a", "python-compile skipped: torch.compile needs torch >= "
            "2.0"))
        t = target(doc, "CUDA GPT-2 124M (bf16) >= 40% MFU")
        self.assertEqual(t["status"], "MISS")
        self.assertTrue(t["detail"].startswith("28.0% MFU (target >= 40%; "),
                        t["detail"])


class OneTruthAboutTheStep(unittest.TestCase):
    def test_hotloop_gets_the_mfu_columns_peak_for_bf16_runs(self):
        a = args()
        plan = run.make_plan(a, "gpt2", {"data": {"block_size": 1024}})
        self.assertIn("--trainer.peak_tflops=989.4",
                      run.hotloop_flags(a, "gpt2", plan))
        # float32 (the CNN), an unknown GPU, or the CPU suite: hotloop
        # measures its own peak.
        cnn = run.make_plan(a, "cnn", {})
        self.assertFalse(any(f.startswith("--trainer.peak_tflops")
                             for f in run.hotloop_flags(a, "cnn", cnn)))
        unknown = args(peak_flops=None)
        self.assertFalse(any(f.startswith("--trainer.peak_tflops")
                             for f in run.hotloop_flags(unknown, "gpt2",
                                                        plan)))
        cpu = args(suite="cpu")
        self.assertFalse(any(
            f.startswith("--trainer.peak_tflops") for f in run.hotloop_flags(
                cpu, "gpt2", run.make_plan(cpu, "gpt2", {}))))

    def test_a_profile_that_disagrees_with_the_column_is_named(self):
        doc = document(gpt2_runs(hot_util=0.094))
        hot = next(r for r in doc["workloads"]["gpt2"]["runs"]
                   if r["impl"] == "hotloop")
        self.assertAlmostEqual(hot["mfu"], 0.2797, places=4)
        self.assertEqual(run.mfu_disagreement(hot),
                         "hotloop's step profile says 9.4% MFU, the MFU "
                         "column 28.0%: they count FLOPs or the steady rate "
                         "differently")
        agreeing = document(gpt2_runs(hot_util=hot["mfu"]))
        hot = next(r for r in agreeing["workloads"]["gpt2"]["runs"]
                   if r["impl"] == "hotloop")
        self.assertEqual(run.mfu_disagreement(hot), "")


class FirstStep(unittest.TestCase):
    def test_the_first_step_and_its_three_largest_phases(self):
        self.assertEqual(
            run.first_step_text({"data": 0.01, "forward": 0.5,
                                 "backward": 0.3, "optimizer": 0.0,
                                 "logging": 8.9}),
            "the first step 9.71 s (logging 8.90 s, forward 0.50 s, "
            "backward 0.30 s)")
        self.assertEqual(run.first_step_text({}), "")
        text = run.profile_text({"phases": {"forward": 1.0},
                                 "setup_s": 0.25, "warmup_s": 11.5,
                                 "first_step": {"logging": 9.0}})
        self.assertIn("set-up before the first step 0.25 s, the first 10 "
                      "steps 11.50 s; the first step 9.00 s "
                      "(logging 9.00 s)", text)
        # The set-up's parts, largest first, where summary.json has them.
        text = run.profile_text({"phases": {"forward": 1.0},
                                 "setup_s": 2.42, "warmup_s": 2.54,
                                 "setup_parts": {"callbacks": 0.1,
                                                 "strategy": 0.01,
                                                 "sanity_check": 1.9,
                                                 "model_summary": 0.41}})
        self.assertIn("set-up before the first step 2.42 s (sanity check "
                      "1.90 s, model summary 0.41 s, callbacks 0.10 s), the "
                      "first 10 steps 2.54 s", text)


class Traces(unittest.TestCase):
    def test_the_traces_line(self):
        runs = [{"impl": "hotloop", "trace": {
                    "file": "/r/gpt2-hotloop.txt", "trace_mb": 38.25,
                    "steps": 13}},
                {"impl": "python-tuned", "trace": {
                    "error": "traced python_train.py run failed (exit 2)\n"
                             "    | details"}},
                {"impl": "python-lightning"}]
        self.assertEqual(
            run.traces_text(runs),
            "traces: hotloop gpt2-hotloop.txt (38.2 MiB trace); "
            "python-tuned FAILED: traced python_train.py run failed (exit 2)")

    def test_trace_impls_chooses_whom_to_trace(self):
        everyone = argparse.Namespace(trace_impls=None)
        self.assertEqual(run.traced_impls(everyone), run.TRACED_IMPLS)
        self.assertEqual(
            run.traced_impls(argparse.Namespace(trace_impls="hotloop")),
            ("hotloop",))



class MachineWarmup(unittest.TestCase):
    """Each CUDA workload's rows follow an untimed run, so that the first
    row does not pay alone for the machine's cold caches (the 2026-11-27
    H200 run: ResNet-18's first hotloop process took 8.17 s for its first
    10 steps, the next one 2.35 s)."""

    def warm(self, impls, fail=None):
        calls = []

        def fake_hotloop(a, workload, plan, config, config_path, root):
            calls.append(("hotloop", plan["limit"], plan["epochs"], root))
            if fail:
                raise run.RunError(fail + "\nlog tail")
            return {"process_to_step10_s": 10.6, "wall_s": 12.0}

        def fake_python(a, workload, impl, plan, config, root):
            calls.append((impl, plan["limit"], plan["epochs"], root))
            return {"process_to_step10_s": 10.9, "wall_s": 13.0}

        saved = run.run_hotloop, run.run_python
        run.run_hotloop, run.run_python = fake_hotloop, fake_python
        try:
            with tempfile.TemporaryDirectory() as d:
                a = args(impls=impls)
                plan = run.make_plan(a, "resnet18_cifar", {})
                result = run.machine_warmup(a, "resnet18_cifar", plan, {},
                                            "cfg.yaml", d)
                self.assertEqual(os.listdir(d), [])  # its folder is gone
        finally:
            run.run_hotloop, run.run_python = saved
        return calls, result

    def test_hotloops_recipe_cut_to_twelve_batches(self):
        calls, result = self.warm(["hotloop", "python-tuned"])
        self.assertEqual([c[:3] for c in calls], [("hotloop", 12, 1)])
        self.assertEqual(result, {"impl": "hotloop",
                                  "process_to_step10_s": 10.6,
                                  "wall_s": 12.0})
        self.assertEqual(
            run.machine_warmup_text(result),
            "machine warm-up: an untimed 12-batch hotloop run before the "
            "rows (10.60 s from its process start to the end of step 10), "
            "so that none of them pays the first use of the machine's "
            "libraries and caches")

    def test_without_hotloop_the_first_implementation(self):
        calls, result = self.warm(["python-tuned", "python-compile"])
        self.assertEqual([c[:3] for c in calls], [("python-tuned", 12, 1)])
        self.assertEqual(result["impl"], "python-tuned")

    def test_a_failed_warmup_is_named_not_fatal(self):
        _, result = self.warm(["hotloop"], fail="hotloop fit failed (exit 2)")
        self.assertEqual(result, {"impl": "hotloop",
                                  "error": "hotloop fit failed (exit 2)"})
        self.assertEqual(run.machine_warmup_text(result),
                         "machine warm-up: an untimed 12-batch hotloop run "
                         "before the rows failed: hotloop fit failed (exit 2)")
        self.assertEqual(run.machine_warmup_text(None), "")


class Merge(unittest.TestCase):
    """--merge: one table from the documents of two calls."""

    def documents(self):
        # hotloop and python-tuned; python-compile skipped
        first = document(gpt2_runs())
        later = gpt2_runs()
        second = document({
            "python-compile": {"impl": "python-compile",
                               "samples_per_s": 250000 / 1024,
                               "steady_samples_per_s": 426464 / 1024,
                               "steps": 60},
            # A second tuned row: the first document's is kept.
            "python-tuned": dict(later["python-tuned"],
                                 steady_samples_per_s=1.0)},
            a=args(impls=["python-tuned", "python-compile"]))
        return first, second

    def test_rows_ratios_and_targets_against_the_merged_hotloop_row(self):
        first, second = self.documents()
        self.assertEqual(target(first, "CUDA GPT-2 124M (bf16) >= "
                                "torch.compile")["status"], "n/a")
        doc = run.merge_documents([first, second], ["a.json", "b.json"])
        rows = doc["workloads"]["gpt2"]["runs"]
        self.assertEqual([(r["impl"], r["call"]) for r in rows],
                         [("hotloop", 1), ("python-tuned", 1),
                          ("python-compile", 2)])
        self.assertEqual(doc["impls"],
                         ["hotloop", "python-tuned", "python-compile"])
        tuned, compiled = rows[1], rows[2]
        self.assertAlmostEqual(tuned["hotloop_ratio"], 323494 / 377311)
        self.assertAlmostEqual(compiled["hotloop_ratio"], 323494 / 426464)
        self.assertAlmostEqual(compiled["steady_rate"], 426464)
        t = target(doc, "CUDA GPT-2 124M (bf16) >= torch.compile")
        self.assertEqual(t["status"], "MISS")
        self.assertEqual([c["path"] for c in doc["merged_from"]],
                         ["a.json", "b.json"])
        # The inputs are left as they were.
        self.assertNotIn("call", first["workloads"]["gpt2"]["runs"][0])

    def test_documents_that_do_not_fit_are_refused_by_name(self):
        first, second = self.documents()
        other = document(gpt2_runs(), gpu="NVIDIA H100 80GB HBM3")
        with self.assertRaisesRegex(
                run.MergeError, "b.json ran on NVIDIA H100 80GB HBM3, a.json "
                "on NVIDIA H200: one table holds one machine's rows"):
            run.merge_documents([first, other], ["a.json", "b.json"])
        cpu = dict(second, suite="cpu")
        with self.assertRaisesRegex(run.MergeError,
                                    "b.json has suite cpu, a.json cuda"):
            run.merge_documents([first, cpu], ["a.json", "b.json"])
        # Another recipe of a workload: its ratios would compare two runs.
        longer = json.loads(json.dumps(second))
        longer["workloads"]["gpt2"]["limit_batches"] = 120
        with self.assertRaisesRegex(run.MergeError,
                                    "b.json: gpt2's limit_batches is 120, "
                                    "a.json's 60"):
            run.merge_documents([first, longer], ["a.json", "b.json"])
        with self.assertRaisesRegex(run.MergeError, "c.json: a --dry-run "
                                    "document has no figures"):
            run.merge_documents([first, {"dry_run": True}],
                                ["a.json", "c.json"])

    def test_calls_are_numbered_by_file(self):
        # gpu_run's bench.json holds a document per workload: all of the
        # first file's rows are call 1, whichever workload comes first.
        first, second = self.documents()
        cnn_like = json.loads(json.dumps(first))
        cnn_like["workloads"] = {"other": dict(
            first["workloads"]["gpt2"], title="other")}
        doc = run.merge_documents(
            [cnn_like, first, second],
            [{"path": "one/bench.json", "call": 1, "label": "one (other)"},
             {"path": "one/bench.json", "call": 1, "label": "one (gpt2)"},
             {"path": "two/bench.json", "call": 2, "label": "two (gpt2)"}])
        self.assertEqual([c["path"] for c in doc["merged_from"]],
                         ["one/bench.json", "two/bench.json"])
        self.assertEqual(
            [(r["impl"], r["call"]) for r in doc["workloads"]["gpt2"]["runs"]],
            [("hotloop", 1), ("python-tuned", 1), ("python-compile", 2)])
        self.assertEqual({r["call"] for r in doc["workloads"]["other"]["runs"]},
                         {1})

    def test_the_command_prints_one_table(self):
        first, second = self.documents()
        for doc in (first, second):
            doc["machine"].update(
                cpu="Xeon", cores=16, os="Ubuntu", kernel="6.1",
                date="2026-11-27", load_before="0", load_after="0")
            for row in doc["workloads"]["gpt2"]["runs"]:
                row["peak_rss_mb"] = 1000
        doc = run.merge_documents([first, second], ["a.json", "b.json"])
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run.print_table(doc)
        text = out.getvalue()
        self.assertIn("call 2:  b.json (2026-11-27;", text)
        self.assertIn("  merged: python-compile from call 2; the rest from "
                      "call 1", text)
        with tempfile.TemporaryDirectory() as tmp:
            # A bench/run document and gpu_run's bench.json of another call.
            a, b = os.path.join(tmp, "a.json"), os.path.join(tmp, "bench.json")
            with open(a, "w") as f:
                json.dump(first, f)
            with open(b, "w") as f:
                json.dump({"bench": {"gpt2": second}}, f)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = run.merge_main(argparse.Namespace(
                    merge=[a, b], json=True, json_out=None))
            self.assertEqual(code, 0)
            merged = json.loads(out.getvalue())
            self.assertEqual(merged["merged_from"][1]["path"], b)
            self.assertEqual([r["impl"] for r in
                              merged["workloads"]["gpt2"]["runs"]],
                             ["hotloop", "python-tuned", "python-compile"])
            paths = []
            for name, doc in (("a.json", first), ("b.json", {"suite": 1})):
                paths.append(os.path.join(tmp, name))
                with open(paths[-1], "w") as f:
                    json.dump(doc, f)
            bad = argparse.Namespace(merge=paths, json=False, json_out=None)
            self.assertEqual(run.merge_main(bad), 2)


if __name__ == "__main__":
    unittest.main()
