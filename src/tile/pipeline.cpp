// The pass pipeline (see pipeline.h). Read it top to bottom: that is the order of compilation.
#include "tile/pipeline.h"

#include "tile/ir/verifier.h"
#include "tile/passes/check_fast_memory.h"
#include "tile/passes/check_integers.h"
#include "tile/passes/check_shapes.h"
#include "tile/passes/infer_bounds.h"
#include "tile/passes/insert_barriers.h"
#include "tile/passes/lower_tile_ops.h"
#include "tile/passes/pack_gemm_operands.h"
#include "tile/passes/pipeline_gpu_loops.h"
#include "tile/passes/place_fragments.h"
#include "tile/passes/schedule_cpu_gemm.h"
#include "tile/passes/specialize.h"

namespace tessel::tile {

namespace {
// Verifies the IR a pass produced and shows it to the dump hook.
Status after(const char* pass, const Kernel& k, const CompileOptions& o) {
  Status s = verify(k);
  if (!s.ok()) return s.with_context("after pass {}", pass);
  if (o.dump) o.dump(pass, k);
  return ok_status();
}
}  // namespace

Expected<Kernel> compile_ir(const Kernel& parsed, const CompileOptions& o) {
  const Target& target = o.target;
  Kernel k = parsed;
  TESSEL_TRY(after("parse", k, o));

  TESSEL_ASSIGN_OR_RETURN(k, specialize(k, o.params, target.name()));
  TESSEL_TRY(after("specialize", k, o));
  TESSEL_TRY(check_integers(k));

  TESSEL_TRY(check_shapes(k));

  if (!target.is_gpu()) {
    k = pack_gemm_operands(k);
    TESSEL_TRY(after("pack_gemm_operands", k, o));
  }

  if (target.is_gpu()) {
    k = pipeline_gpu_loops(k, target);
    TESSEL_TRY(after("pipeline_gpu_loops", k, o));
  }

  k = lower_tile_ops(k, target);
  TESSEL_TRY(after("lower_tile_ops", k, o));

  TESSEL_ASSIGN_OR_RETURN(k, infer_bounds(k));
  TESSEL_TRY(after("infer_bounds", k, o));

  if (target.is_gpu()) {
    k = place_fragments(k, target);
    TESSEL_TRY(after("place_fragments", k, o));
  }

  if (!target.is_gpu()) {
    k = schedule_cpu_gemm(k);
    TESSEL_TRY(after("schedule_cpu_gemm", k, o));
  }

  TESSEL_TRY(check_fast_memory(k, target));

  if (target.is_gpu()) {
    k = insert_barriers(k, target);
    TESSEL_TRY(after("insert_barriers", k, o));
  }
  return k;
}

}  // namespace tessel::tile

namespace tessel::tile {

Expected<Kernel> lower_for_cpu(const Kernel& parsed,
                               const std::map<std::string, std::string>& params) {
  CompileOptions o;
  TESSEL_ASSIGN_OR_RETURN(o.target, target_from_name("cpu"));
  o.params = params;
  return compile_ir(parsed, o);
}

}  // namespace tessel::tile
