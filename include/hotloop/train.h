#pragma once

// Every public header of hotloop::train.

#include "hotloop/train/checkpoint.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/grad_scaler.h"
#include "hotloop/train/metrics.h"
#include "hotloop/train/module.h"
#include "hotloop/train/precision.h"
#include "hotloop/train/run_dir.h"
#include "hotloop/train/trainer.h"
