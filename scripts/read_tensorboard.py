#!/usr/bin/env python3
"""Reads a TensorBoard log folder the way TensorBoard does (the `tensorboard`
package's EventAccumulator) and lists or checks what it holds.

    read_tensorboard.py LOGDIR
        Lists every tag: scalars, histograms, images, text (tensors) and the
        hparams plugin's experiment, session start and session end.

    read_tensorboard.py LOGDIR --self-check
        Checks the run that hotloop's C++ test writes (tests/log/
        tensorboard_test.cpp, write_self_check_run). To make one:
            HOTLOOP_TENSORBOARD_SELF_CHECK_DIR=/tmp/tb build/tests/hotloop_tests \\
                --gtest_filter='*SelfCheck*'
            python3 scripts/read_tensorboard.py /tmp/tb --self-check

    read_tensorboard.py LOGDIR --expect-scalar train/loss:3[:0.25] \\
        --expect-histogram weights:1 --expect-image samples:2 \\
        --expect-text notes:3[:TEXT] --expect-hparams lr,batch_size
        Checks that each tag has an event at that step (and that value or
        text); --expect-hparams checks the hparams plugin data names those
        hyperparameters. Each option may be repeated.

Exit status: 0 when every check passes, 1 with one line per failed check on
stderr, 2 for bad arguments. Needs the `tensorboard` package; numpy, PIL and
torch are used when present for deeper checks.
"""

import argparse
import math
import os
import sys

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.plugins.hparams import api_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HPARAMS_TAGS = {
    "experiment": "_hparams_/experiment",
    "session_start_info": "_hparams_/session_start_info",
    "session_end_info": "_hparams_/session_end_info",
}


def load(logdir):
    """Every event of the run in `logdir` (size 0 keeps all of them)."""
    keep_all = {
        ea.COMPRESSED_HISTOGRAMS: 0,
        ea.IMAGES: 0,
        ea.AUDIO: 0,
        ea.SCALARS: 0,
        ea.HISTOGRAMS: 0,
        ea.TENSORS: 0,
    }
    return ea.EventAccumulator(logdir, size_guidance=keep_all).Reload()


def hparams_data(acc):
    """{'experiment': Experiment, 'session_start_info': ..., ...} for the
    hparams plugin summaries present, parsed as the plugin does."""
    try:
        contents = acc.PluginTagToContent("hparams")
    except KeyError:
        return {}
    data = {}
    for field, tag in HPARAMS_TAGS.items():
        if tag in contents:
            parsed = plugin_data_pb2.HParamsPluginData.FromString(contents[tag])
            data[field] = (parsed.version, getattr(parsed, field))
    return data


def value_text(value):
    """A google.protobuf.Value as (kind, python value)."""
    kind = value.WhichOneof("kind")
    return kind, getattr(value, kind) if kind else None


class Checker:
    def __init__(self, acc):
        self.acc = acc
        self.tags = acc.Tags()
        self.failures = []

    def fail(self, message):
        self.failures.append(message)

    def event_at(self, kind, getter, tag, step):
        if tag not in self.tags[kind]:
            self.fail(f"{kind}: no tag {tag!r} (have {sorted(self.tags[kind])})")
            return None
        events = [e for e in getter(tag) if e.step == step]
        if len(events) != 1:
            steps = [e.step for e in getter(tag)]
            self.fail(f"{kind} {tag!r}: {len(events)} events at step {step} "
                      f"(steps {steps})")
            return None
        return events[0]

    def scalar(self, tag, step, value=None):
        event = self.event_at(ea.SCALARS, self.acc.Scalars, tag, step)
        # Stored as float32.
        if event and value is not None and not math.isclose(
                event.value, value, rel_tol=1e-6, abs_tol=1e-7):
            self.fail(f"scalar {tag!r} step {step}: {event.value} != {value}")

    def histogram(self, tag, step):
        event = self.event_at(ea.HISTOGRAMS, self.acc.Histograms, tag, step)
        if not event:
            return None
        h = event.histogram_value
        if len(h.bucket) != len(h.bucket_limit) or not h.bucket:
            self.fail(f"histogram {tag!r}: {len(h.bucket)} buckets, "
                      f"{len(h.bucket_limit)} limits")
        if sum(h.bucket) != h.num:
            self.fail(f"histogram {tag!r}: bucket counts add to "
                      f"{sum(h.bucket)}, num is {h.num}")
        if list(h.bucket_limit) != sorted(h.bucket_limit) or h.min > h.max:
            self.fail(f"histogram {tag!r}: limits unsorted or min > max")
        return h

    def image(self, tag, step):
        event = self.event_at(ea.IMAGES, self.acc.Images, tag, step)
        if not event:
            return None
        if not event.encoded_image_string.startswith(PNG_SIGNATURE):
            self.fail(f"image {tag!r}: not a PNG")
            return None
        return event

    def text(self, tag, step, text=None):
        full_tag = tag + "/text_summary"
        event = self.event_at(ea.TENSORS, self.acc.Tensors, full_tag, step)
        if not event:
            return
        plugin = self.acc.SummaryMetadata(full_tag).plugin_data.plugin_name
        if plugin != "text":
            self.fail(f"text {tag!r}: plugin {plugin!r}, expected 'text'")
        strings = event.tensor_proto.string_val
        if len(strings) != 1:
            self.fail(f"text {tag!r}: {len(strings)} strings, expected 1")
        elif text is not None and strings[0].decode("utf-8") != text:
            self.fail(f"text {tag!r}: {strings[0].decode('utf-8')!r} "
                      f"!= {text!r}")

    def hparams(self, names, metrics=()):
        """Checks the three hparams summaries; returns the session's hparams
        as {name: (kind, value)}."""
        data = hparams_data(self.acc)
        for field in HPARAMS_TAGS:
            if field not in data:
                self.fail(f"hparams: no {HPARAMS_TAGS[field]!r} summary")
            elif data[field][0] != 0:
                self.fail(f"hparams: {field} has plugin data version "
                          f"{data[field][0]}, expected 0")
        if len(data) != len(HPARAMS_TAGS):
            return {}
        experiment = data["experiment"][1]
        info_names = {info.name for info in experiment.hparam_infos}
        metric_names = {info.name.tag for info in experiment.metric_infos}
        values = {k: value_text(v)
                  for k, v in data["session_start_info"][1].hparams.items()}
        for name in names:
            if name not in info_names or name not in values:
                self.fail(f"hparams: {name!r} missing (experiment has "
                          f"{sorted(info_names)}, session {sorted(values)})")
        for name in metrics:
            if name not in metric_names:
                self.fail(f"hparams: metric {name!r} missing (have "
                          f"{sorted(metric_names)})")
        status = data["session_end_info"][1].status
        if status != api_pb2.STATUS_SUCCESS:
            self.fail(f"hparams: session end status {status}, expected "
                      "STATUS_SUCCESS")
        return values


def torch_histogram(values):
    """PyTorch's add_histogram buckets for `values`, or None when torch's
    make_histogram is unavailable or fails (torch 1.13 with numpy >= 1.24)."""
    try:
        import numpy as np
        from torch.utils.tensorboard.summary import make_histogram
        v, bins, neg = 1e-12, [], []
        while v < 1e20:  # SummaryWriter.default_bins
            bins.append(v)
            neg.append(-v)
            v *= 1.1
        proto = make_histogram(np.array(values, dtype=float),
                               neg[::-1] + [0] + bins)
        return list(proto.bucket_limit), list(proto.bucket)
    except Exception as error:  # noqa: BLE001 - any failure means "skip"
        print(f"  (torch make_histogram parity skipped: {error})")
        return None


def self_check(checker):
    """What tests/log/tensorboard_test.cpp write_self_check_run writes."""
    for step in range(5):
        checker.scalar("train/loss", step, 2.0 ** -step)

    weights = [-1.5, -0.25, 0.0, 0.0, 0.30000001192092896, 1.0, 1.0, 2.5, 7.0]
    h = checker.histogram("weights", 1)
    if h:
        expected = dict(num=9, min=-1.5, max=7.0, sum=sum(weights),
                        sum_squares=sum(x * x for x in weights))
        for field, want in expected.items():
            if not math.isclose(getattr(h, field), want, rel_tol=1e-12):
                checker.fail(f"histogram 'weights' {field}: "
                             f"{getattr(h, field)} != {want}")
        if len(h.bucket) != 609:
            checker.fail(f"histogram 'weights': {len(h.bucket)} buckets, "
                         "PyTorch writes 609")
        reference = torch_histogram(weights)
        if reference and reference != (list(h.bucket_limit), list(h.bucket)):
            checker.fail("histogram 'weights': buckets differ from torch's "
                         "make_histogram")

    image = checker.image("samples", 2)
    if image:
        if (image.width, image.height) != (5, 4):
            checker.fail(f"image 'samples': {image.width}x{image.height}, "
                         "expected 5x4")
        try:
            import io
            from PIL import Image
        except ImportError:
            print("  (PNG pixel check skipped: PIL not installed)")
        else:
            png = Image.open(io.BytesIO(image.encoded_image_string))
            want = [(10 * y + x, 40 + 10 * y + x, 80 + 10 * y + x)
                    for y in range(4) for x in range(5)]
            if png.mode != "RGB" or list(png.getdata()) != want:
                checker.fail("image 'samples': pixels differ from "
                             "(10y + x, 40 + 10y + x, 80 + 10y + x)")

    checker.text("notes", 3, "hello **TensorBoard** \u2713")

    values = checker.hparams(["lr", "batch_size", "amp", "optimizer"],
                             ["hparam/accuracy"])
    expected = {
        "lr": ("number_value", 0.01),
        "batch_size": ("number_value", 64.0),
        "amp": ("bool_value", True),
        "optimizer": ("string_value", "adam"),
    }
    if values and values != expected:
        checker.fail(f"hparams: session values {values} != {expected}")
    checker.scalar("hparam/accuracy", 0, 0.75)


def list_run(acc):
    tags = acc.Tags()
    for tag in sorted(tags[ea.SCALARS]):
        points = [(e.step, e.value) for e in acc.Scalars(tag)]
        print(f"scalar {tag}: {points}")
    for tag in sorted(tags[ea.HISTOGRAMS]):
        for e in acc.Histograms(tag):
            h = e.histogram_value
            print(f"histogram {tag} step {e.step}: num {h.num:g} min {h.min:g} "
                  f"max {h.max:g} sum {h.sum:g} {len(h.bucket)} buckets")
    for tag in sorted(tags[ea.IMAGES]):
        for e in acc.Images(tag):
            print(f"image {tag} step {e.step}: {e.width}x{e.height}, "
                  f"{len(e.encoded_image_string)} bytes")
    for tag in sorted(tags[ea.TENSORS]):
        for e in acc.Tensors(tag):
            strings = [s.decode("utf-8", "replace")
                       for s in e.tensor_proto.string_val]
            print(f"tensor {tag} step {e.step}: {strings}")
    data = hparams_data(acc)
    if "experiment" in data:
        experiment = data["experiment"][1]
        print("hparams experiment: hparams "
              f"{[(i.name, api_pb2.DataType.Name(i.type)) for i in experiment.hparam_infos]}"
              f", metrics {[i.name.tag for i in experiment.metric_infos]}")
    if "session_start_info" in data:
        values = {k: value_text(v)[1]
                  for k, v in data["session_start_info"][1].hparams.items()}
        print(f"hparams session: {values}")
    if "session_end_info" in data:
        status = data["session_end_info"][1].status
        print(f"hparams status: {api_pb2.Status.Name(status)}")


def split_spec(parser, spec, option, max_parts):
    """'tag:step[:rest]' -> (tag, int(step), rest or None); the tag may not
    hold ':'. Bad specs exit with status 2 through `parser`."""
    parts = spec.split(":", max_parts - 1)
    if len(parts) < 2:
        parser.error(f"{option} {spec!r}: expected TAG:STEP")
    try:
        step = int(parts[1])
    except ValueError:
        parser.error(f"{option} {spec!r}: step {parts[1]!r} is not an integer")
    return parts[0], step, parts[2] if len(parts) > 2 else None


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logdir")
    parser.add_argument("--self-check", action="store_true")
    parser.add_argument("--expect-scalar", action="append", default=[],
                        metavar="TAG:STEP[:VALUE]")
    parser.add_argument("--expect-histogram", action="append", default=[],
                        metavar="TAG:STEP")
    parser.add_argument("--expect-image", action="append", default=[],
                        metavar="TAG:STEP")
    parser.add_argument("--expect-text", action="append", default=[],
                        metavar="TAG:STEP[:TEXT]")
    parser.add_argument("--expect-hparams", action="append", default=[],
                        metavar="NAME,NAME,...")
    args = parser.parse_args(argv)

    if not os.path.isdir(args.logdir):
        print(f"{args.logdir}: no such folder", file=sys.stderr)
        return 1
    if not any("tfevents" in name for name in os.listdir(args.logdir)):
        print(f"{args.logdir}: no event file (*tfevents*)", file=sys.stderr)
        return 1
    acc = load(args.logdir)
    checker = Checker(acc)
    if args.self_check:
        self_check(checker)
    for spec in args.expect_scalar:
        tag, step, value = split_spec(parser, spec, "--expect-scalar", 3)
        checker.scalar(tag, step, None if value is None else float(value))
    for spec in args.expect_histogram:
        checker.histogram(*split_spec(parser, spec, "--expect-histogram", 2)[:2])
    for spec in args.expect_image:
        checker.image(*split_spec(parser, spec, "--expect-image", 2)[:2])
    for spec in args.expect_text:
        checker.text(*split_spec(parser, spec, "--expect-text", 3))
    for spec in args.expect_hparams:
        checker.hparams([name for name in spec.split(",") if name])

    checks = args.self_check or any(
        (args.expect_scalar, args.expect_histogram, args.expect_image,
         args.expect_text, args.expect_hparams))
    if not checks:
        list_run(acc)
        return 0
    for failure in checker.failures:
        print(f"FAIL {failure}", file=sys.stderr)
    if checker.failures:
        print(f"{len(checker.failures)} check(s) failed in {args.logdir}",
              file=sys.stderr)
        return 1
    print(f"all checks passed in {args.logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
