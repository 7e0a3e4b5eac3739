#pragma once

// Every public header of hotloop::log.

#include "hotloop/log/progress.h"
