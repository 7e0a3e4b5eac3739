#pragma once

// Every public header of hotloop::compress: pruning (torch.nn.utils.prune's
// semantics), the ModelPruning callback and structural shrinking.

#include "hotloop/compress/forward_tensor.h"
#include "hotloop/compress/model_pruning.h"
#include "hotloop/compress/parametrization.h"
#include "hotloop/compress/prune.h"
#include "hotloop/compress/pruning_amount.h"
#include "hotloop/compress/pruning_method.h"
#include "hotloop/compress/shrink.h"
