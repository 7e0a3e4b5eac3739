#!/bin/sh
# Reads the event files hotloop writes with TensorBoard's own reader (the
# `tensorboard` Python package), where that package is installed; exit 77
# (CTest: skipped) where it is not.
set -eu
TESTS=$1
SCRIPT=$2
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import tensorboard' 2>/dev/null; then
  echo "tensorboard Python package not installed: skipped"
  exit 77
fi
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
HOTLOOP_TENSORBOARD_SELF_CHECK_DIR=$DIR "$TESTS" \
  --gtest_filter='*SelfCheck*' > /dev/null
"$PYTHON" "$SCRIPT" "$DIR" --self-check
