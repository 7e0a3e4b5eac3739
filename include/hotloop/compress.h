#pragma once

// Every public header of hotloop::compress: pruning (torch.nn.utils.prune's
// semantics), the ModelPruning callback, structural shrinking, and int8
// quantization (torch.ao's observers, LibTorch's quantized kernels).

#include "hotloop/compress/dynamic_linear.h"
#include "hotloop/compress/fake_quantize.h"
#include "hotloop/compress/forward_tensor.h"
#include "hotloop/compress/model_pruning.h"
#include "hotloop/compress/observer.h"
#include "hotloop/compress/parametrization.h"
#include "hotloop/compress/prune.h"
#include "hotloop/compress/pruning_amount.h"
#include "hotloop/compress/pruning_method.h"
#include "hotloop/compress/qat.h"
#include "hotloop/compress/quantization_aware_training.h"
#include "hotloop/compress/quantize.h"
#include "hotloop/compress/quantized_engine.h"
#include "hotloop/compress/quantized_gpt.h"
#include "hotloop/compress/quantized_net.h"
#include "hotloop/compress/shrink.h"
