// Offence: the contract includes the core.
#pragma once
#include "core/policy.h"
