#pragma once

// Every public header of hotloop::core.

#include "hotloop/core/blas.h"
#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/core/memory.h"
#include "hotloop/core/process_clock.h"
#include "hotloop/core/signals.h"
#include "hotloop/core/threads.h"
