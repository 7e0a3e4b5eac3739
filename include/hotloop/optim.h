#pragma once

// Every public header of hotloop::optim.

#include "hotloop/optim/clip_grad.h"
#include "hotloop/optim/composed_lr.h"
#include "hotloop/optim/foreach.h"
#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/optim/optimizer_factory.h"
