#pragma once

// Every public header of hotloop::data.

#include "hotloop/data/batch.h"
#include "hotloop/data/concat_dataset.h"
#include "hotloop/data/csv_dataset.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/dataset.h"
#include "hotloop/data/fashion_mnist.h"
#include "hotloop/data/idx.h"
#include "hotloop/data/image_dataset.h"
#include "hotloop/data/image_folder.h"
#include "hotloop/data/iterable_dataset.h"
#include "hotloop/data/random.h"
#include "hotloop/data/sampler.h"
#include "hotloop/data/subset.h"
#include "hotloop/data/tensor_dataset.h"
#include "hotloop/data/token_dataset.h"
#include "hotloop/data/transforms.h"
