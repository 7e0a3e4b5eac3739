#pragma once

// Every public header of hotloop::interop: weights in and out of hotloop,
// as safetensors files and PyTorch state_dicts.

#include "hotloop/interop/export.h"
#include "hotloop/interop/gpt2_layout.h"
#include "hotloop/interop/load_weights.h"
#include "hotloop/interop/named_tensors.h"
#include "hotloop/interop/safetensors.h"
#include "hotloop/interop/torch_file.h"
