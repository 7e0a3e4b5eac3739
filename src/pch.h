// Precompiled header for the library's LibTorch-heavy sources.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/serialize.h>
