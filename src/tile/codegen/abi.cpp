// Argument slots of compiled kernels (see abi.h).
#include "tile/codegen/abi.h"

namespace tessel::tile {

std::vector<ArgSlot> kernel_slots(const Kernel& k) {
  std::vector<ArgSlot> slots;
  for (int a = 0; a < static_cast<int>(k.args.size()); ++a) {
    const KernelArg& arg = k.args[a];
    if (!arg.is_tensor()) {
      slots.push_back({ArgSlot::Kind::kScalar, a, -1, arg.name, arg.scalar->type});
      continue;
    }
    slots.push_back({ArgSlot::Kind::kData, a, -1, arg.name, arg.tensor->dtype});
    slots.push_back({ArgSlot::Kind::kOffset, a, -1, arg.name + "_offset", kI64});
    for (int d = 0; d < arg.tensor->rank(); ++d)
      slots.push_back({ArgSlot::Kind::kStride, a, d, fmt::format("{}_stride{}", arg.name, d), kI64});
  }
  for (const Expr& s : k.sizes) slots.push_back({ArgSlot::Kind::kSize, -1, -1, s->as<Var>()->name, kI64});
  return slots;
}

std::string entry_name(const Kernel& k) { return "tessel_" + k.name; }

}  // namespace tessel::tile
