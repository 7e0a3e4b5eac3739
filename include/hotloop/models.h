#pragma once

// Every public header of hotloop::models.

#include "hotloop/models/fashion_cnn.h"
