// Op tests on every device here, one op at a time (as llama.cpp's test-backend-ops): before a
// case runs on a device, the device is asked whether it supports the op with those input dtypes
// (ops/supports.h). An unsupported op is skipped on that device only, the reason logged once per
// (device, op), and every other op still runs there. A test file adds cases; the loop is this:
//
//   for_each_device("gelu", {DType::kF32}, [&](Device* device) {
//     Tensor x = Tensor::from_vector(values, {3, 5}, device).value();
//     ... compare gelu(x) with the reference ...
//   });
//
// or, where the loop is the caller's:
//
//   for (Device* device : op_test_devices())
//     if (should_run(device, c.op, dtypes_of(c))) check_case(c, device);
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ops/op.h"
#include "ops/supports.h"
#include "runtime/device.h"
#include "support/log.h"

namespace tessel::ops::testing {

// Every device that works here, the CPU first; when $TESSEL_TEST_DEVICES is set ("cuda:0",
// "cpu,opencl:0"), only those it names (scripts/gpu_check.sh tests the GPU alone).
inline std::vector<Device*> test_devices_here() {
  std::vector<Device*> list = available_devices();
  if (const char* only = std::getenv("TESSEL_TEST_DEVICES"); only && *only) {
    std::string wanted = ",";
    wanted.append(only).append(",");
    std::erase_if(list, [&](Device* d) {
      std::string id = ",";
      id.append(d->id()).append(",");
      return wanted.find(id) == std::string::npos;
    });
  }
  return list;
}

// test_devices_here(), found once and logged.
inline const std::vector<Device*>& op_test_devices() {
  static const std::vector<Device*> devices = [] {
    std::vector<Device*> list = test_devices_here();
    std::string ids;
    for (Device* d : list)
      ids += (ids.empty() ? "" : ", ") + d->id();
    log_info("op tests on: {}", ids);
    return list;
  }();
  return devices;
}

// Whether to run `op` with inputs of `input_dtypes` on `device`. When not, says why (once per
// device and op). An op that is not registered is a test bug and fails the test.
inline bool should_run(Device* device, const std::string& op,
                       const std::vector<DType>& input_dtypes = {DType::kF32}) {
  Expected<const OpDef*> def = find_op(op);
  if (!def) {
    ADD_FAILURE() << def.status().to_string();
    return false;
  }
  Status s = supports(**def, input_dtypes, *device);
  if (s.ok()) return true;
  static std::mutex mutex;
  static std::set<std::pair<std::string, std::string>> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.emplace(device->id(), op).second)
    log_warn("op tests: {} skipped on {}: {}", op, device->id(), s.message());
  return false;
}

// body(device) on every device that runs `op`, each under a trace naming the device.
template <typename Body>
void for_each_device(const std::string& op, const std::vector<DType>& input_dtypes, Body body) {
  for (Device* device : op_test_devices()) {
    if (!should_run(device, op, input_dtypes)) continue;
    SCOPED_TRACE(op + " on " + device->id());
    body(device);
  }
}

}  // namespace tessel::ops::testing
