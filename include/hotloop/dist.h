#pragma once

// Every public header of hotloop::dist: data parallelism on c10d.

#include "hotloop/dist/ddp_strategy.h"
#include "hotloop/dist/distributed_data_parallel.h"
#include "hotloop/dist/environment.h"
#include "hotloop/dist/launcher.h"
#include "hotloop/dist/process_group.h"
#include "hotloop/dist/sync_batch_norm.h"
