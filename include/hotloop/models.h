#pragma once

// Every public header of hotloop::models.

#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/gpt.h"
#include "hotloop/models/gpt_generate.h"
#include "hotloop/models/init.h"
#include "hotloop/models/mlp.h"
#include "hotloop/models/resnet.h"
