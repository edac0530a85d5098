// Which module's forward is running on this thread: the memory plan (plan/memory_plan.h) names
// the layer that made each allocation from it. Kept out of module.h so that adding it rebuilt
// only module.cpp.
#pragma once

namespace tessel::nn {

class Module;

// The innermost module called through Module::operator() on this thread and not yet returned;
// nullptr outside every module call (a loss, the optimizer, backward).
const Module* current_module();

}  // namespace tessel::nn
