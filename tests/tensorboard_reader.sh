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
mkdir "$DIR/writer" "$DIR/fit"
HOTLOOP_TENSORBOARD_SELF_CHECK_DIR=$DIR/writer \
HOTLOOP_TENSORBOARD_FIT_DIR=$DIR/fit "$TESTS" \
  --gtest_filter='*SelfCheck*' > /dev/null
# Every kind of record the writer makes.
"$PYTHON" "$SCRIPT" "$DIR/writer" --self-check
# What a fit writes through TensorBoardLogger: 4 steps per epoch, logged
# every 2, validated and histogrammed at each epoch end.
"$PYTHON" "$SCRIPT" "$DIR/fit" \
  --expect-scalar train_loss_step:2 --expect-scalar train_loss_step:8 \
  --expect-scalar val_acc:4 --expect-scalar val_acc:8 \
  --expect-histogram weights/network.features.0.weight:8 \
  --expect-histogram gradients/network.features.0.weight:4 \
  --expect-image train/input_samples:0 \
  --expect-hparams optimizer.lr,model.name
