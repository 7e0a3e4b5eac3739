#pragma once

// Everything hotloop offers, in the order a batch flows through it.

#include "hotloop/version.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/core/memory.h"
#include "hotloop/core/threads.h"

#include "hotloop/data/batch.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/dataset.h"
#include "hotloop/data/fashion_mnist.h"
#include "hotloop/data/idx.h"
#include "hotloop/data/image_dataset.h"
#include "hotloop/data/transforms.h"

#include "hotloop/models/fashion_cnn.h"

#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/optim/optimizer_factory.h"

#include "hotloop/train/checkpoint.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/metrics.h"
#include "hotloop/train/module.h"
#include "hotloop/train/run_dir.h"
#include "hotloop/train/trainer.h"
