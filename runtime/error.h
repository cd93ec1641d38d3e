#pragma once
// The runtime's errors are ggml-ext's: one exception type for every layer.
#include "ggml-ext/error.h"
