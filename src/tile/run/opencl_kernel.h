// Tile kernels on an OpenCL device, through hw/'s run-time loaded OpenCL API: compile (pass
// pipeline for the device's work-group and local-memory sizes, the OpenCL renderer, the
// driver's build) and launch (blocks are work-groups). Tensor arguments hold cl_mem handles in
// TensorArg::data. The context may come from elsewhere (the runtime's OpenCL device) or from
// open_opencl_device() here.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hw/opencl_api.h"
#include "support/status.h"
#include "tile/ir/ir.h"
#include "tile/run/bind.h"
#include "tile/target.h"

namespace tessel::tile {

// A context and in-order queue on one device. Releases what it created.
struct OpenClDevice {
  const OpenClApi* api = nullptr;
  cl_context context = nullptr;
  cl_device_id device = nullptr;
  cl_command_queue queue = nullptr;
  std::string name;
  bool owned = false;
  ~OpenClDevice();
};

// The index-th device over all platforms, in platform order. unavailable without OpenCL.
Expected<std::shared_ptr<OpenClDevice>> open_opencl_device(int index = 0);

// The target description of a device: local memory, work-group size (at most `threads`).
Target opencl_target(const OpenClDevice& device, int threads = 128);

class OpenClKernel {
 public:
  static Expected<OpenClKernel> compile(const Kernel& parsed, std::shared_ptr<OpenClDevice> device,
                                        const std::map<std::string, std::string>& params = {});
  // Enqueues the grid and waits for it.
  Status launch(const std::vector<LaunchArg>& args) const;

  const Kernel& ir() const { return ir_; }
  const std::string& source() const { return source_; }

 private:
  std::shared_ptr<OpenClDevice> device_;
  std::shared_ptr<std::remove_pointer_t<cl_program>> program_;
  std::shared_ptr<std::remove_pointer_t<cl_kernel>> kernel_;
  Kernel ir_;
  std::vector<bool> used_;
  std::string source_;
  int threads_ = 1;
};

}  // namespace tessel::tile
