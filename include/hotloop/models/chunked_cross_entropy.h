#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace hotloop::models {

/// The mean next-token cross-entropy of a language model's output layer,
/// computed `chunk_rows` positions at a time so that the float32 logits of
/// the whole batch never exist (for GPT-2's micro-batch of 16 x 1024
/// tokens and 50,304 words they would take 3.3 GB, and as much again for
/// their gradient): equal to gpt_loss(at::linear(hidden, weight), targets)
/// in value and in the gradients of `hidden` and `weight`, up to rounding.
///
/// hidden: [..., C] (the final LayerNorm's output), weight: [V, C] (the
/// output layer's, GPT's tied token embedding), targets: [...] int64 with
/// hidden's leading shape; targets of -1 are ignored, and the mean is over
/// the others (PyTorch's ignore_index). Under autocast the products run in
/// its dtype (bfloat16 on a GPU), as the plain path's linear does, and so
/// does each chunk's log-softmax and its backward, one kernel each with
/// their sums in float32, as PyTorch's cross_entropy of such logits; the
/// loss is summed in float32 (double for double inputs).
///
/// When a gradient is wanted, each chunk's gradient (softmax minus the
/// target's one-hot, log-softmax's backward) is multiplied out at once into
/// the gradients of hidden ([N, C]) and weight ([V, C], summed in float32
/// or double), which backward scales by the loss's gradient over the count
/// of counted targets: no logits are kept and none are computed twice. The
/// forward pass therefore does the output layer's backward work too. Reads
/// nothing back to the host (a CUDA graph can hold it). No double backward
/// (a backward with create_graph is an error naming model.loss_chunk_size).
/// `chunk_rows` > 0.
///
/// `fused` (GptOptions::fused_cross_entropy): where
/// chunked_cross_entropy_is_fused, each chunk's log-softmax, loss and
/// gradient are one CUDA kernel of hotloop's that reads the logits once and
/// writes the gradient over them (the ATen ops pass over them five times);
/// its softmax comes from the logits in float32, not from a log-softmax
/// rounded to the products' dtype, so it differs from the ATen path by
/// that rounding. Elsewhere `fused` changes nothing.
at::Tensor chunked_cross_entropy(
    const at::Tensor& hidden,
    const at::Tensor& weight,
    const at::Tensor& targets,
    int64_t chunk_rows,
    bool fused = false);

/// Whether chunked_cross_entropy(..., fused=true) runs the fused kernel for
/// these operands, the products in `compute`: a build with hotloop's CUDA
/// kernels, CUDA tensors, int64 targets, float32, bfloat16 or float16
/// products.
bool chunked_cross_entropy_is_fused(
    const at::Tensor& hidden,
    const at::Tensor& targets,
    at::ScalarType compute);

} // namespace hotloop::models
