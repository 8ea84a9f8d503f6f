// Offence: a same-directory spelling instead of core/policy.h.
#include "policy.h"
