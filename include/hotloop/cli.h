#pragma once

// Every public header of hotloop::cli.

#include "hotloop/cli/app.h"
#include "hotloop/cli/config.h"
#include "hotloop/cli/fit_config.h"
#include "hotloop/cli/registry.h"
