// Allowed: the preload layer includes the core, the contract and the tables.
#pragma once
#include "core/policy.h"
#include "fracgpu/contract.h"
#include "tables/rows.def"
