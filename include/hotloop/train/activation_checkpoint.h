#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <vector>

namespace hotloop::train {

/// A segment of a forward pass: tensors in, tensors out.
using Segment =
    std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

/// Activation checkpointing, PyTorch's `torch.utils.checkpoint` (the
/// reentrant variant) for LibTorch: runs `segment` on `inputs` without
/// keeping its activations, only the inputs, and during backward runs it
/// again, with grad, to backpropagate through it. Memory: one segment's
/// activations at a time instead of all; time: one more forward.
///
/// As PyTorch's: the re-run sees the random state the first run saw (so
/// dropout masks are the same) and the autocast state it ran under; the
/// segment's parameters get their gradients from the re-run; inputs that
/// require grad get theirs. Under no grad (evaluation), or when no input
/// requires grad, it is `segment(inputs)`. `segment` and what it captures
/// must live until backward. Gradients equal the unchecked segment's
/// (bitwise for deterministic CPU kernels).
///
/// `owner`, when given, is the module the segment runs: its buffers
/// (BatchNorm's running statistics and batch count) are put back after the
/// re-run, so they are updated once, as without checkpointing.
std::vector<at::Tensor> checkpoint(
    const Segment& segment,
    const std::vector<at::Tensor>& inputs,
    torch::nn::Module* owner = nullptr);

/// The one-tensor form.
at::Tensor checkpoint(
    const std::function<at::Tensor(const at::Tensor&)>& segment,
    const at::Tensor& input,
    torch::nn::Module* owner = nullptr);

} // namespace hotloop::train
