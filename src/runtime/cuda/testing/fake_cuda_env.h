// For tests that run tessel's CUDA backend over the fake driver (fake_cuda_driver.h): points
// TESSEL_CUDA_LIBRARY at it before anything loads a driver (the build passes the library's path
// as TESSEL_FAKE_CUDA) and returns its log. Call it first in every test, and keep such tests in a
// binary of their own: the driver is chosen once per process.
//
//   tessel::fake_cuda::Log* log = tessel::fake_cuda::use_fake_driver(/*devices=*/2, "8.6");
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/cuda/testing/fake_cuda_driver.h"

namespace tessel::fake_cuda {

// `devices` fake GPUs of compute capability `cc`; read by the fake when it is first used, so the
// first call in a process decides.
inline Log* use_fake_driver(int devices, const char* cc) {
  setenv("TESSEL_CUDA_LIBRARY", TESSEL_FAKE_CUDA, 1);
  setenv("TESSEL_FAKE_CUDA_DEVICES", std::to_string(devices).c_str(), 0);
  setenv("TESSEL_FAKE_CUDA_CC", cc, 0);
  void* library = dlopen(TESSEL_FAKE_CUDA, RTLD_NOW | RTLD_GLOBAL);
  if (!library) return nullptr;
  auto log = reinterpret_cast<FakeCudaLogFn>(dlsym(library, "tessel_fake_cuda_log"));
  auto reset = reinterpret_cast<FakeCudaResetFn>(dlsym(library, "tessel_fake_cuda_reset"));
  if (!log || !reset) return nullptr;
  reset();
  return log();
}

}  // namespace tessel::fake_cuda
