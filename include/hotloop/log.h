#pragma once

// Every public header of hotloop::log.

#include "hotloop/log/logger.h"
#include "hotloop/log/progress.h"
