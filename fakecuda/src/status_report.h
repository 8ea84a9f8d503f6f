// JSON view of the shared simulated device, printed by `fakecuda-ctl status` and read
// by tests. Reading the status first reclaims the memory of dead processes, exactly
// like the library does when an allocation would otherwise fail.
#pragma once

#include <string>

#include "shared_segment.h"

namespace fakecuda {

std::string status_json(SegmentLayout* layout, const std::string& segment_name);

// Sets every device's peak-used mark to its current use.
void reset_peaks(SegmentLayout* layout);

}  // namespace fakecuda
