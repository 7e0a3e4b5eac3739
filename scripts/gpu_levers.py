#!/usr/bin/env python3
"""The levers table of scripts/gpu_run.sh's levers stage: one workload's
hotloop row (GPT-2's unless HOTLOOP_GPU_LEVERS_WORKLOAD chose another) with
its defaults (0.json) and once per lever (1.json, ...), each bench/run's
JSON, as the steady rate against the defaults' in the same call.

    scripts/gpu_levers.py DIR
"""
import glob
import json
import os
import sys


def workload_of(doc):
    """The one workload a levers run measured (bench/run --workloads)."""
    if doc.get("dry_run"):
        names = [r.get("workload") for r in doc.get("runs", [])]
    else:
        names = list(doc.get("workloads", {}))
    return names[0] if names else None


def hotloop_run(doc):
    workload = workload_of(doc)
    if doc.get("dry_run"):  # --cpu: bench/run --dry-run's checks, no rates
        entry = next((r for r in doc.get("runs", [])
                      if r.get("workload") == workload
                      and r.get("impl") == "hotloop"), None)
        if entry and (entry.get("check") == "failed"
                      or entry.get("smoke") == "failed"):
            return {"error": entry.get("smoke_detail")
                    or entry.get("check_detail") or "failed"}
        return entry and {"dry_run": True}
    runs = doc.get("workloads", {}).get(workload, {}).get("runs", [])
    return next((r for r in runs if r.get("impl") == "hotloop"), None)


def lever_name(doc, env=()):
    """The row's name: its hotloop options and, from the stage's N.env
    beside N.json, the environment variables it set (env:NAME=VALUE)."""
    parts = list(doc.get("hotloop_options") or []) + [
        f"env:{e}" for e in env]
    return " ".join(parts) if parts else "defaults"


def lever_env(json_path):
    """The NAME=VALUE lines of the .env file beside a lever's JSON."""
    path = json_path[:-len(".json")] + ".env"
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    paths = sorted(glob.glob(os.path.join(argv[1], "*.json")),
                   key=lambda p: int(os.path.basename(p)[:-5]))
    if not paths:
        print(f"gpu_levers: no bench/run JSON in {argv[1]}", file=sys.stderr)
        return 1
    rows, base, machine, title, unit = [], None, None, None, None
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        machine = machine or doc.get("machine", {})
        workload = doc.get("workloads", {}).get(workload_of(doc), {})
        title = title or workload.get("title") or workload_of(doc)
        unit = unit or workload.get("unit")
        run = hotloop_run(doc)
        rows.append((lever_name(doc, lever_env(path)), run))
        if os.path.basename(path) == "0.json" and run:
            base = run.get("steady_rate")
    gpu = machine.get("gpu") or machine.get("gpu_name") or "n/a"
    short = {"tokens/s": "tok/s", "samples/s": "samples/s"}.get(unit, unit)
    # The name column as wide as the longest lever's name (a lever of
    # several options), so that the figures stay in their columns.
    width = max([34] + [len(name) + 2 for name, _ in rows])
    print(f"{title} levers, hotloop alone, one run each ({gpu})")
    print(f"{'lever':<{width}}{'steady ' + (short or 'rate'):>18}"
          f"{'vs defaults':>13}{'whole run':>11}{'MFU':>7}{'GPU MB':>9}")
    failed = False
    for name, run in rows:
        if not run or "error" in run or "skipped" in run:
            why = (run or {}).get("error") or (run or {}).get("skipped") \
                or "no hotloop row"
            print(f"{name:<{width}}  failed: {why.splitlines()[0]}")
            failed = True
            continue
        if run.get("dry_run"):
            print(f"{name:<{width}}  dry run: the command and a CPU smoke run passed")
            continue
        steady, whole = run.get("steady_rate"), run.get("rate")
        ratio = f"{steady / base:.3f}x" if steady and base else "n/a"
        mfu = run.get("mfu")
        mb = run.get("gpu_peak_mb")
        print(f"{name:<{width}}"
              f"{(f'{steady:,.0f}' if steady else 'n/a'):>18}{ratio:>13}"
              f"{(f'{whole:,.0f}' if whole else 'n/a'):>11}"
              f"{(f'{100 * mfu:.1f}%' if mfu else 'n/a'):>7}"
              f"{(f'{mb:,.0f}' if mb is not None else 'n/a'):>9}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
