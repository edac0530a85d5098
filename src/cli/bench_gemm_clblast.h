// CLBlast (Debian libclblast-dev), the tuned OpenCL BLAS, as `tessel bench gemm`'s OpenCL peer:
// its SGEMM on the same OpenCL device, context and queue as tessel-opencl (PoCL here), on the
// same cl_mem buffers, with the parameters CLBlast ships for that device (its database entry for
// the device, else its defaults). The benchmark links it; libtessel does not.
//
//   TESSEL_ASSIGN_OR_RETURN(ClBlastGemm peer, ClBlastGemm::create(opencl_device));
//   TESSEL_TRY(peer.sgemm(m, n, k, a.buffer, b.buffer, c.buffer));  // queued; synchronize after
#pragma once

#include <cstdint>
#include <string>

#include "runtime/device.h"
#include "support/status.h"

namespace tessel::cli {

class ClBlastGemm {
 public:
  // Fails unless `device` is an OpenCL device.
  static Expected<ClBlastGemm> create(Device* device);

  // "CLBlast 1.5.3 on <device>, Xgemm MWG=.. NWG=.. ..." (the parameters it picked).
  std::string describe() const;
  // C[m x n] = A[m x k] * B[k x n], row-major, contiguous f32, queued on the device's queue.
  Status sgemm(int64_t m, int64_t n, int64_t k, DeviceBuffer a, DeviceBuffer b,
               DeviceBuffer c) const;

 private:
  Device* device_ = nullptr;
};

}  // namespace tessel::cli
