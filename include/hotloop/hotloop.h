#pragma once

// Everything hotloop offers, area by area in the order a batch flows
// through them.

#include "hotloop/version.h"

#include "hotloop/core.h"
#include "hotloop/data.h"
#include "hotloop/models.h"
#include "hotloop/optim.h"
#include "hotloop/train.h"
#include "hotloop/dist.h"
#include "hotloop/log.h"
#include "hotloop/compress.h"
#include "hotloop/interop.h"
