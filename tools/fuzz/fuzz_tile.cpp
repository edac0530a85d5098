// libFuzzer target: .tile source through the parser, every pass of the pipeline and the three
// code generators. Any input must end in a kernel or a located user error (never an internal
// error, a crash, a sanitizer report or a stack overflow).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tile/codegen/cpu/cpu_renderer.h"
#include "tile/codegen/cuda/cuda_renderer.h"
#include "tile/codegen/opencl/opencl_renderer.h"
#include "tile/parse/parser.h"
#include "tile/pipeline.h"

using namespace tessel;
using namespace tessel::tile;

namespace {
void require_located(const Status& s) {
  if (s.code() == Code::kInternal || s.message().rfind("f.tile:", 0) != 0) {
    fprintf(stderr, "unlocated or internal error: %s\n", s.to_string().c_str());
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  auto kernels = parse_tile(source, "f.tile");
  if (!kernels.ok()) {
    require_located(kernels.status());
    return 0;
  }
  for (const Kernel& k : *kernels)
    for (const Target& t : {Target::cpu(), Target::opencl(), Target::cuda()}) {
      CompileOptions o;
      o.target = t;
      auto ir = compile_ir(k, o);
      if (!ir.ok()) {
        require_located(ir.status());
        continue;
      }
      std::string code = t.kind == TargetKind::kCpu      ? render_cpu(*ir)
                          : t.kind == TargetKind::kOpenCL ? render_opencl(*ir, t)
                                                          : render_cuda(*ir, t);
      if (code.empty()) std::abort();
    }
  return 0;
}
