"""scripts/gpu_levers.py: the levers stage's table from bench/run's own
documents (built here by bench/run's build_document, as the stage's runs
write them).

Run: python3 -m unittest discover -s tests/bench -p '*_test.py'
"""

import io
import json
import os
import re
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "scripts"))

import bench_run_test  # noqa: E402  (bench/run, loaded as a module)
import gpu_levers  # noqa: E402

run = bench_run_test.run


def lever_doc(options, steady_tokens, whole_tokens=100000.0, error=None):
    a = bench_run_test.args(impls=["hotloop"], hotloop_option=options)
    hot = {"impl": "hotloop", "samples_per_s": whole_tokens / 1024,
           "steady_samples_per_s": steady_tokens / 1024, "steps": 60,
           "gpu_peak_mb": 10600.0}
    if error:
        hot = {"error": error}
    return bench_run_test.document({"hotloop": hot}, a)


def table(docs, envs=None):
    with tempfile.TemporaryDirectory() as d:
        for i, doc in enumerate(docs):
            with open(os.path.join(d, f"{i}.json"), "w") as f:
                json.dump(doc, f)
            for_env = (envs or {}).get(i)
            if for_env is not None:
                with open(os.path.join(d, f"{i}.env"), "w") as f:
                    f.write("".join(line + "\n" for line in for_env))
        out = io.StringIO()
        with redirect_stdout(out):
            rc = gpu_levers.main(["gpu_levers.py", d])
    return rc, out.getvalue().splitlines()


class LeversTable(unittest.TestCase):
    def test_each_lever_against_the_defaults_of_the_same_call(self):
        rc, lines = table([
            lever_doc([], 300000.0),
            lever_doc(["trainer.sdpa_backend=cudnn"], 330000.0),
            lever_doc(["optimizer.fused=false"], 270000.0)])
        self.assertEqual(rc, 0)
        self.assertEqual(lines[0], "GPT-2 124M levers, hotloop alone, one "
                         "run each (NVIDIA H200)")
        self.assertIn("steady tok/s", lines[1])
        rows = {line.split()[0]: line.split() for line in lines[2:]}
        self.assertEqual(rows["defaults"][1:3], ["300,000", "1.000x"])
        self.assertEqual(rows["trainer.sdpa_backend=cudnn"][1:3],
                         ["330,000", "1.100x"])
        self.assertEqual(rows["optimizer.fused=false"][1:3],
                         ["270,000", "0.900x"])
        # MFU over the H200's 989.4 TFLOP/s, as bench/run's column; the
        # GPU memory the run reported.
        mfu = 300000.0 * run.gpt_flops_per_token(12, 12, 768, 50304, 1024,
                                                 False) / 989.4e12
        self.assertEqual(rows["defaults"][4], f"{100 * mfu:.1f}%")
        self.assertEqual(rows["defaults"][5], "10,600")

    def test_an_environment_lever_is_named_by_its_variable(self):
        # The stage writes N.env beside N.json (empty for a run without).
        rc, lines = table(
            [lever_doc([], 300000.0), lever_doc([], 303000.0),
             lever_doc(["trainer.cuda_graphs=true"], 306000.0)],
            envs={0: [], 1: ["CUBLASLT_WORKSPACE_SIZE=131072"],
                  2: ["A=1", "B=2"]})
        self.assertEqual(rc, 0)
        rows = [line.split() for line in lines[2:]]
        self.assertEqual(rows[0][:3], ["defaults", "300,000", "1.000x"])
        self.assertEqual(rows[1][:3], ["env:CUBLASLT_WORKSPACE_SIZE=131072",
                                       "303,000", "1.010x"])
        self.assertEqual(rows[2][:5], ["trainer.cuda_graphs=true", "env:A=1",
                                       "env:B=2", "306,000", "1.020x"])

    def test_a_long_lever_name_keeps_the_figures_in_their_columns(self):
        three = ["model.fused_layer_norm=true", "model.fused_cross_entropy=true",
                 "model.fused_bias_gradient=true"]
        rc, lines = table([lever_doc([], 300000.0),
                           lever_doc(three, 345000.0)])
        self.assertEqual(rc, 0)
        header = lines[1]
        for line in lines[2:]:
            # The ratio ends where its heading does.
            ratio = re.search(r"\d\.\d{3}x", line)
            self.assertEqual(ratio.end(),
                             header.index("vs defaults") + len("vs defaults"),
                             line)
        self.assertEqual(lines[3].split()[3:5], ["345,000", "1.150x"])

    def test_another_workload_in_its_own_unit(self):
        def resnet(options, steady):
            a = bench_run_test.args(impls=["hotloop"], hotloop_option=options)
            plan = run.make_plan(a, "resnet18_cifar", {})
            hot = {"impl": "hotloop", "samples_per_s": 5300.0,
                   "steady_samples_per_s": steady, "steps": 200}
            return run.build_document(
                a, {"gpu": "NVIDIA H200"},
                {"resnet18_cifar": {"plan": plan, "runs": {"hotloop": hot},
                                    "notes": []}},
                {"jemalloc": None, "allocator": "glibc"})
        rc, lines = table([resnet([], 32607.0),
                           resnet(["trainer.cuda_graphs=true"], 48910.5)])
        self.assertEqual(rc, 0)
        self.assertTrue(lines[0].startswith("ResNet-18"), lines[0])
        self.assertIn("steady samples/s", lines[1])
        row = lines[3].split()
        self.assertEqual(row[:3], ["trainer.cuda_graphs=true", "48,910",
                                   "1.500x"])
        self.assertEqual(row[4], "n/a")  # no MFU outside GPT-2

    def test_a_failed_lever_is_named_and_fails_the_stage(self):
        rc, lines = table([
            lever_doc([], 300000.0),
            lever_doc(["trainer.sdpa_backend=cudnn"], 0.0,
                      error="hotloop exited 2: trainer.sdpa_backend: cudnn "
                      "is not in this LibTorch\nmore")])
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1].split(None, 1),
                         ["trainer.sdpa_backend=cudnn", "failed: hotloop "
                          "exited 2: trainer.sdpa_backend: cudnn is not in "
                          "this LibTorch"])

    def test_no_documents_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            err = io.StringIO()
            with redirect_stdout(io.StringIO()):
                from contextlib import redirect_stderr
                with redirect_stderr(err):
                    rc = gpu_levers.main(["gpu_levers.py", d])
        self.assertEqual(rc, 1)
        self.assertIn("no bench/run JSON in", err.getvalue())


if __name__ == "__main__":
    unittest.main()
