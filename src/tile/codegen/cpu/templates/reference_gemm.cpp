// Dispatch of the reference gemm to its ISA variants (reference_gemm_<isa>.cpp) by the features
// of the CPU, and the checks a caller's mistakes deserve.
#include "tile/codegen/cpu/templates/reference_gemm.h"

#include <vector>

#include "hw/cpu_features.h"
#include "support/thread_pool.h"
#include "tile/codegen/cpu/templates/reference_gemm_variant.h"

namespace tessel::tile {

#if defined(__x86_64__)
extern const ReferenceGemmVariant kReferenceGemmAvx512Bf16;
extern const ReferenceGemmVariant kReferenceGemmAvx512;
extern const ReferenceGemmVariant kReferenceGemmAvx2;
#endif
extern const ReferenceGemmVariant kReferenceGemmPortable;

namespace {

struct VariantEntry {
  const ReferenceGemmVariant* variant;
  std::vector<CpuFeature> needs;  // the -m flags of isa_variants.cmake, as CPU features
};

// Best first.
const std::vector<VariantEntry>& variant_table() {
  static const std::vector<VariantEntry> table = {
#if defined(__x86_64__)
    {&kReferenceGemmAvx512Bf16,
     {CpuFeature::kAvx512f, CpuFeature::kAvx512bw, CpuFeature::kAvx512dq, CpuFeature::kAvx512vl,
      CpuFeature::kAvx512Bf16, CpuFeature::kAvx2, CpuFeature::kFma, CpuFeature::kF16c}},
    {&kReferenceGemmAvx512,
     {CpuFeature::kAvx512f, CpuFeature::kAvx512bw, CpuFeature::kAvx512dq, CpuFeature::kAvx512vl,
      CpuFeature::kAvx2, CpuFeature::kFma, CpuFeature::kF16c}},
    {&kReferenceGemmAvx2, {CpuFeature::kAvx2, CpuFeature::kFma, CpuFeature::kF16c}},
#endif
    {&kReferenceGemmPortable, {}},
  };
  return table;
}

const VariantEntry* find_variant(std::string_view isa) {
  for (const VariantEntry& entry : variant_table())
    if (isa == entry.variant->isa) return &entry;
  return nullptr;
}

bool runs_here(const VariantEntry& entry) {
  static const CpuFeatureSet features = detect_cpu_features();
  for (CpuFeature f : entry.needs)
    if (!features.has(f)) return false;
  return true;
}

// The block loop's workers on libtessel's thread pool; a pool smaller than `threads` runs some of
// them one after the other, which the block loop allows.
void run_on_pool(int threads, void (*body)(void*, int), void* body_context) {
  ThreadPool::global().parallel_for(threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      body(body_context, int(t));
  });
}

Status check_operand(const char* name, const void* data, int64_t rows, int64_t cols,
                     int64_t row_stride, int64_t col_stride) {
  if (rows > 0 && cols > 0 && data == nullptr)
    return invalid_argument("gemm: {} is null for a {} x {} operand", name, rows, cols);
  if (row_stride < 0 || col_stride < 0)
    return invalid_argument("gemm: {} has a negative stride ({}, {})", name, row_stride,
                            col_stride);
  return ok_status();
}

}  // namespace

const char* gemm_input_name(GemmInput input) {
  switch (input) {
    case GemmInput::kF32:
      return "f32";
    case GemmInput::kF16:
      return "f16";
    case GemmInput::kBf16:
      return "bf16";
  }
  return "?";
}

std::vector<std::string> ReferenceGemm::compiled_isas() {
  std::vector<std::string> isas;
  for (const VariantEntry& entry : variant_table())
    isas.emplace_back(entry.variant->isa);
  return isas;
}

bool ReferenceGemm::supported_here(std::string_view isa) {
  const VariantEntry* entry = find_variant(isa);
  return entry != nullptr && runs_here(*entry);
}

Expected<ReferenceGemm> ReferenceGemm::create(std::string_view isa) {
  if (isa.empty()) {
    for (const VariantEntry& entry : variant_table())
      if (runs_here(entry)) return ReferenceGemm(entry.variant);
    return internal_error("gemm: not even the portable variant runs here");
  }
  const VariantEntry* entry = find_variant(isa);
  if (entry == nullptr)
    return not_found("gemm: no variant '{}' in this build (it has: {})", isa,
                     fmt::join(compiled_isas(), ", "));
  if (!runs_here(*entry)) return unavailable("gemm: this CPU cannot run the '{}' variant", isa);
  return ReferenceGemm(entry->variant);
}

ReferenceGemm::ReferenceGemm(const ReferenceGemmVariant* variant)
    : variant_(variant), workspaces_(variant->new_workspaces()) {}

ReferenceGemm::ReferenceGemm(ReferenceGemm&& other) noexcept
    : variant_(other.variant_), workspaces_(other.workspaces_) {
  other.workspaces_ = nullptr;
}

ReferenceGemm& ReferenceGemm::operator=(ReferenceGemm&& other) noexcept {
  if (this != &other) {
    if (workspaces_) variant_->delete_workspaces(workspaces_);
    variant_ = other.variant_;
    workspaces_ = other.workspaces_;
    other.workspaces_ = nullptr;
  }
  return *this;
}

ReferenceGemm::~ReferenceGemm() {
  if (workspaces_) variant_->delete_workspaces(workspaces_);
}

const char* ReferenceGemm::isa() const {
  return variant_->isa;
}

GemmTiles ReferenceGemm::default_tiles(bool bf16) const {
  return variant_->default_tiles(bf16);
}

Status ReferenceGemm::run(const ReferenceGemmCall& call) {
  if (call.m < 0 || call.n < 0 || call.k < 0)
    return invalid_argument("gemm: negative size m={} n={} k={}", call.m, call.n, call.k);
  if (call.m > 0 && call.n > 0 && (call.c == nullptr || call.ldc < call.n))
    return invalid_argument("gemm: C needs a pointer and ldc >= n (ldc={}, n={})", call.ldc,
                            call.n);
  TESSEL_TRY(check_operand("A", call.a, call.m, call.k, call.a_row_stride, call.a_col_stride));
  TESSEL_TRY(check_operand("B", call.b, call.k, call.n, call.b_row_stride, call.b_col_stride));
  if (call.bf16_compute && call.input == GemmInput::kBf16)
    return invalid_argument("gemm: bf16_compute is for f32 and f16 inputs; bf16 already is");
  if (call.bm < 0 || call.bn < 0 || call.bk < 0)
    return invalid_argument("gemm: negative block size {} x {} x {}", call.bm, call.bn, call.bk);
  constexpr int64_t kMaxTileSide = int64_t(1) << 16;  // tile sizes are ints in the templates
  if (call.m >= (int64_t(1) << 31) || call.n >= (int64_t(1) << 31) || call.bm > kMaxTileSide ||
      call.bn > kMaxTileSide || call.bk > kMaxTileSide)
    return unimplemented("gemm: sizes past 2^31 rows or columns, or tiles past 2^16");
  if (!variant_->run(workspaces_, call, ThreadRunner{run_on_pool}))
    return resource_exhausted("gemm: out of memory for the packing buffers of a {} x {} x {} gemm",
                              call.m, call.n, call.k);
  return ok_status();
}

}  // namespace tessel::tile
