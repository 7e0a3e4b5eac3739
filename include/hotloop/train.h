#pragma once

// Every public header of hotloop::train.

#include "hotloop/train/callback.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/device.h"
#include "hotloop/train/early_stopping.h"
#include "hotloop/train/fit_result.h"
#include "hotloop/train/grad_scaler.h"
#include "hotloop/train/language_model.h"
#include "hotloop/train/lr_monitor.h"
#include "hotloop/train/metrics.h"
#include "hotloop/train/model_checkpoint.h"
#include "hotloop/train/module.h"
#include "hotloop/train/network_module.h"
#include "hotloop/train/precision.h"
#include "hotloop/train/run_dir.h"
#include "hotloop/train/step_profile.h"
#include "hotloop/train/strategy.h"
#include "hotloop/train/timer.h"
#include "hotloop/train/trainer.h"
#include "hotloop/train/trainer_options.h"
