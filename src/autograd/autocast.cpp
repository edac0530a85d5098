// The thread-local autocast policy (see autocast.h).
#include "autograd/autocast.h"

namespace tessel::autograd {
namespace {
thread_local DType g_compute = DType::kF32;
}  // namespace

Autocast::Autocast(DType compute) : previous_(g_compute) {
  g_compute = compute;
}
Autocast::~Autocast() {
  g_compute = previous_;
}

DType autocast_dtype() {
  return g_compute;
}

}  // namespace tessel::autograd
