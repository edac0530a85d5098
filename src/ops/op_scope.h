// Which op is running on this thread: the memory plan (plan/memory_plan.h) names the op that made
// each allocation from it. Kept out of ops.h so that adding it rebuilt only op.cpp.
#pragma once

namespace tessel::ops {

// The name of the innermost ops::run on this thread that has not returned (an op's forward or a
// backward rule's ops), or nullptr outside every op.
const char* current_op();

}  // namespace tessel::ops
