// Offence: the core includes the preload layer.
#pragma once
#include "fracgpu/contract.h"
#include "runtime.h"
