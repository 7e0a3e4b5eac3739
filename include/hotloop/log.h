#pragma once

// Every public header of hotloop::log.

#include "hotloop/log/logger.h"
#include "hotloop/log/metrics_csv.h"
#include "hotloop/log/progress.h"
#include "hotloop/log/report.h"
#include "hotloop/log/tensorboard.h"
