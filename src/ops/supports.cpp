// Which ops a device runs (see supports.h).
#include "ops/supports.h"

#include "ops/kernel_cache.h"

namespace tessel::ops {

Status supports(const OpDef& op, const std::vector<DType>& input_dtypes, const Device& device) {
  if (op.is_view) return ok_status();
  if (!launches_on(device.kind()))
    return unimplemented("{}: the op library does not launch kernels on {} devices yet", op.name,
                         device_kind_name(device.kind()));
  for (DType dtype : input_dtypes) {
    if (dtype == DType::kF64 && !device.limits().f64)
      return unimplemented("{}: {} has no double precision", op.name, device.id());
  }
  return ok_status();
}

}  // namespace tessel::ops
