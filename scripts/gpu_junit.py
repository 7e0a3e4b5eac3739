#!/usr/bin/env python3
"""Reads the JUnit file of a CTest run of hotloop's suite and says what ran.

    gpu_junit.py JUNIT.xml --gpu   # on a GPU machine: every CUDA-only test
                                   # and the TensorBoard reader must pass
    gpu_junit.py JUNIT.xml         # elsewhere: they must be skipped (with
                                   # their reason), not fail

Prints the counts, every failed test, every skipped test with the reason
it gave, and the state of each CUDA-only test (docs/GPU.md lists them).
With --gpu, a test that skipped itself for want of CUDA or a GPU -- listed
below or not -- counts against the run, as does a listed test that the
build does not have (renamed or gone: update the list). Exit status 0 when
nothing failed and the CUDA-only tests are as expected, 1 otherwise, 2 when
the file cannot be read.
"""

import argparse
import re
import sys
import xml.etree.ElementTree as ElementTree

# Tests that run only with a CUDA build of LibTorch and a GPU (they skip
# themselves elsewhere), and the CTest test that needs Python's tensorboard
# package, which the GPU machine has.
CUDA_ONLY = (
    "DataLoaderCuda.BatchesArriveOnTheDeviceEqualToTheHostBatches",
    "DataLoaderCuda.CollateBatchesArePinnedAndMayLackATarget",
    "MeanMetric.AcceleratorTensorsAreSummedOnTheDevice",
    "Checkpoint.RestoresEveryCudaDevicesGenerator",
    "Checkpoint.LoadsOntoTheModelsDeviceEitherWay",
    "ResolveDevice.CudaFlagsPickTheNamedVisibleDevice",
    "TrainerTest.Fp16MixedSkipsTheStepOfAnOverflowAndHalvesTheScale",
    "TrainerTest.Fp16MixedResumesOnTheGpuBitForBit",
    "TrainerTest.ANonFiniteLossOnTheGpuStopsAtTheNextReadNamingTheSteps",
    "ProcessGroupNccl.OneProcessReducesOnItsGpuAndDdpKeepsTheGradients",
    "TrainerTest.CudaGraphsTrainAsTheEagerStepOnTheGpu",
    "AddLayerNormCuda.TheKernelsGiveTheAtenOpsValuesAndGradients",
    "AddLayerNormCuda.WhatTheKernelsDoNotTakeGoesToTheAtenOps",
    "AddLayerNormCuda.OnlyTheSumsGradientGivesTheWeightAndBiasNone",
    "AddLayerNormCuda.ABackwardWithCreateGraphIsAnErrorNamingTheOption",
    "AddLayerNormCuda.UnderAutocastTheOutputIsWhatTheNextMatmulReads",
    "AddLayerNormCuda.TheGptWithFusedLayerNormTrainsAsWithout",
    "ChunkedCrossEntropyCuda.TheFusedKernelGivesTheAtenPathsLossAndGradients",
    "ChunkedCrossEntropyCuda.TheGptWithFusedCrossEntropyTrainsAsWithout",
    "LinearGeluCuda.TheKernelGivesTheAtenOpsValuesAndGradients",
    "LinearGeluCuda.TheGptWithFusedBiasGradientTrainsAsWithout",
    "GptCuda.EveryFusedKernelTogetherTrainsAsWithout",
)
TENSORBOARD = "tensorboard_python_reader"
# Tests that check the CPU-only answer and skip themselves where CUDA is.
CPU_ONLY = (
    "DataLoader.AnUnavailableDeviceIsAConfigError",
    "ResolveDevice.CudaWithoutADeviceSaysWhatIsVisible",
    "ProcessGroup.NcclIsRefusedByABuildWithoutCudaBeforeTheRendezvous",
)
# A skip reason that means "no CUDA here".
NO_CUDA = re.compile(r"needs a CUDA build|CUDA|GPU")


def skip_reason(case):
    """The reason a skipped test gave: GoogleTest's lines between
    'file:line: Skipped' and '[  SKIPPED ]', or the test's own output, or
    CTest's skip message."""
    out = case.findtext("system-out") or ""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped"):
            reason = []
            for text in lines[i + 1:]:
                if text.startswith("[  SKIPPED ]"):
                    break
                if text.strip():
                    reason.append(text.strip())
            if reason:
                return " ".join(reason)
    text = " ".join(line.strip() for line in lines if line.strip() and
                    not line.startswith("["))
    if text:
        return text[:200]
    skipped = case.find("skipped")
    return skipped.get("message", "") if skipped is not None else ""


def read(path):
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    cases = {}
    for suite in suites:
        for case in suite.findall("testcase"):
            status = case.get("status", "run")
            if case.find("failure") is not None or \
                    case.find("error") is not None or status == "fail":
                state = "failed"
            elif case.find("skipped") is not None or status == "notrun":
                state = "skipped"
            elif status == "disabled":
                state = "disabled"
            else:
                state = "passed"
            cases[case.get("name")] = {
                "state": state,
                "reason": skip_reason(case) if state == "skipped" else "",
                "time": float(case.get("time") or 0),
            }
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("junit")
    parser.add_argument("--gpu", action="store_true",
                        help="a GPU machine: the CUDA-only tests must pass")
    args = parser.parse_args()
    try:
        cases = read(args.junit)
    except (OSError, ElementTree.ParseError) as e:
        print(f"gpu_junit: cannot read {args.junit}: {e}", file=sys.stderr)
        return 2
    counts = {}
    for case in cases.values():
        counts[case["state"]] = counts.get(case["state"], 0) + 1
    print(f"tests: {len(cases)}: " + ", ".join(
        f"{counts.get(s, 0)} {s}" for s in
        ("passed", "failed", "skipped", "disabled") if counts.get(s)))
    failed = sorted(n for n, c in cases.items() if c["state"] == "failed")
    for name in failed:
        print(f"  FAILED  {name}")
    bad = []
    for name, case in sorted(cases.items()):
        if case["state"] == "skipped":
            print(f"  skipped {name}: {case['reason']}")

    where = "GPU machine" if args.gpu else "machine without CUDA"
    print(f"CUDA-only tests ({where}: expected "
          f"{'passed' if args.gpu else 'skipped'}):")
    for name in CUDA_ONLY + (TENSORBOARD,):
        case = cases.get(name)
        if case is None:
            print(f"  MISSING {name}: not in this build's tests (renamed? "
                  "update scripts/gpu_junit.py and docs/GPU.md)")
            bad.append(name)
            continue
        state = case["state"]
        ok = state == "passed" if args.gpu else state != "failed"
        if name == TENSORBOARD and not args.gpu:
            ok = state != "failed"  # passes where tensorboard is installed
        detail = f": {case['reason']}" if case["reason"] else ""
        print(f"  {'ok' if ok else 'BAD':<7} {name}: {state}{detail}")
        if not ok:
            bad.append(name)
    if args.gpu:
        # Any other test that skipped itself for want of CUDA.
        for name, case in sorted(cases.items()):
            if name in CUDA_ONLY or name == TENSORBOARD or \
                    name in CPU_ONLY or case["state"] != "skipped":
                continue
            if NO_CUDA.search(case["reason"]):
                print(f"  BAD     {name}: skipped on a GPU machine: "
                      f"{case['reason']}")
                bad.append(name)
    print(f"CUDA-only tests: {'PASS' if not bad else 'FAIL'}"
          + (f" ({', '.join(sorted(set(bad)))})" if bad else ""))
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())
