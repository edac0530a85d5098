// The static memory plan: recording a step's allocations, scaling them to the configured batch,
// and liveness over the replayed trace (memory_plan.h).
#include "plan/memory_plan.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "nn/module.h"
#include "nn/module_scope.h"
#include "ops/op_scope.h"
#include "runtime/allocation_observer.h"
#include "runtime/caching_allocator.h"
#include "runtime/cpu/cpu_device.h"

namespace tessel::plan {
namespace {

constexpr int kKinds = 6;

const char* phase_name(MemoryPhase p) {
  switch (p) {
    case MemoryPhase::kData:
      return "data";
    case MemoryPhase::kModel:
      return "model";
    case MemoryPhase::kOptimizer:
      return "optimizer";
    case MemoryPhase::kForward:
      return "forward";
    case MemoryPhase::kBackward:
      return "backward";
    case MemoryPhase::kUpdate:
      return "update";
    case MemoryPhase::kEval:
      return "evaluation";
  }
  return "?";
}

// One allocation of a recorded trace.
struct Allocation {
  int64_t requested = 0;
  MemoryPhase phase = MemoryPhase::kData;
  int step = 0;  // 0: while building; 1, 2, ...: the step
  std::string layer;
  std::string op;
  int64_t allocated_at = 0;  // event index
  int64_t freed_at = -1;     // event index; -1: alive when the recording ended
  MemoryKind kind = MemoryKind::kWorkspace;
};

// An allocate or a release of allocation `id`.
struct Event {
  bool allocate;
  int64_t id;
};

struct Trace {
  std::vector<Allocation> allocations;
  std::vector<Event> events;
  std::vector<int64_t> forward_end;  // per step, the event index where forward ended
};

// Collects the events of one allocator while installed (allocation_observer.h).
class Recorder {
 public:
  explicit Recorder(const CachingAllocator* allocator) : allocator_(allocator) {
    set_allocation_observer(&Recorder::observe, this);
  }
  ~Recorder() { stop(); }
  void stop() {
    if (!stopped_) set_allocation_observer(nullptr, nullptr);
    stopped_ = true;
  }

  void set_phase(MemoryPhase phase, int step) {
    std::lock_guard<std::mutex> lock(mutex_);
    phase_ = phase;
    step_ = step;
  }
  void end_forward() {
    std::lock_guard<std::mutex> lock(mutex_);
    trace_.forward_end.push_back(int64_t(trace_.events.size()));
  }
  // The allocation that holds `t`'s storage now, or -1.
  int64_t allocation_of(const Tensor& t) {
    if (!t.defined()) return -1;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(t.storage()->buffer().handle);
    return it == live_.end() ? -1 : it->second;
  }
  Trace& trace() { return trace_; }

 private:
  static void observe(const AllocationEvent& e, void* context) {
    static_cast<Recorder*>(context)->add(e);
  }
  void add(const AllocationEvent& e) {
    if (e.allocator != allocator_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t index = int64_t(trace_.events.size());
    if (e.allocate) {
      Allocation a;
      a.requested = int64_t(e.requested);
      a.phase = phase_;
      a.step = step_;
      if (const nn::Module* m = nn::current_module()) {
        a.layer = m->path();
        if (a.layer.empty()) a.layer = m->type_name();
      }
      if (const char* op = ops::current_op()) a.op = op;
      a.allocated_at = index;
      const int64_t id = int64_t(trace_.allocations.size());
      trace_.allocations.push_back(std::move(a));
      live_[e.handle] = id;
      trace_.events.push_back({true, id});
    } else {
      auto it = live_.find(e.handle);
      if (it == live_.end()) return;  // made before the recording
      trace_.allocations[size_t(it->second)].freed_at = index;
      trace_.events.push_back({false, it->second});
      live_.erase(it);
    }
  }

  const CachingAllocator* allocator_;
  bool stopped_ = false;
  std::mutex mutex_;
  MemoryPhase phase_ = MemoryPhase::kData;
  int step_ = 0;
  std::unordered_map<const void*, int64_t> live_;
  Trace trace_;
};

// What each allocation is (memory_plan.h): identity first, then the phase that made it and
// whether it outlived its phase.
void classify(Trace& t, const std::vector<int64_t>& parameters, const std::vector<int64_t>& grads,
              const std::vector<int64_t>& batch) {
  for (Allocation& a : t.allocations) {
    const bool kept = a.freed_at < 0;
    switch (a.phase) {
      case MemoryPhase::kData:
        a.kind = MemoryKind::kData;
        break;
      case MemoryPhase::kModel:
        a.kind = MemoryKind::kParameters;
        break;
      case MemoryPhase::kOptimizer:
        a.kind = MemoryKind::kOptimizerState;
        break;
      case MemoryPhase::kForward: {
        const int64_t end = t.forward_end.at(size_t(a.step - 1));
        a.kind = kept || a.freed_at > end ? MemoryKind::kActivations : MemoryKind::kWorkspace;
        break;
      }
      case MemoryPhase::kBackward:
        a.kind = kept ? MemoryKind::kGradients : MemoryKind::kWorkspace;
        break;
      case MemoryPhase::kUpdate:
        a.kind = kept ? MemoryKind::kOptimizerState : MemoryKind::kWorkspace;
        break;
      case MemoryPhase::kEval:
        a.kind = MemoryKind::kWorkspace;
        break;
    }
  }
  for (int64_t id : parameters)
    if (id >= 0) t.allocations[size_t(id)].kind = MemoryKind::kParameters;
  for (int64_t id : grads)
    if (id >= 0) t.allocations[size_t(id)].kind = MemoryKind::kGradients;
  for (int64_t id : batch)
    if (id >= 0) t.allocations[size_t(id)].kind = MemoryKind::kData;
}

// One recorded build and `steps` steps of `target` at `batch` rows. The ids of the batch's
// allocations come back in `batch_ids`.
Expected<Trace> record(MemoryPlanTarget& target, int64_t batch, int steps,
                       std::vector<int64_t>* batch_ids, int* queued) {
  Recorder recorder(&target.device()->allocator());
  auto set_phase = [&](MemoryPhase p) { recorder.set_phase(p, 0); };
  set_phase(MemoryPhase::kData);
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<PlannedStep> step, target.build(batch, set_phase));
  std::vector<int64_t> parameters, grads;
  for (const Tensor& t : step->parameter_tensors())
    parameters.push_back(recorder.allocation_of(t));
  for (const Tensor& t : step->gradient_tensors())
    grads.push_back(recorder.allocation_of(t));
  batch_ids->clear();
  for (const Tensor& t : step->batch_tensors())
    batch_ids->push_back(recorder.allocation_of(t));
  *queued = step->queued_batches();
  for (int s = 1; s <= steps; ++s) {
    recorder.set_phase(MemoryPhase::kForward, s);
    {
      TESSEL_ASSIGN_OR_RETURN(autograd::Variable loss, step->loss());
      recorder.end_forward();
      recorder.set_phase(MemoryPhase::kBackward, s);
      TESSEL_TRY(loss.backward());
    }
    recorder.set_phase(MemoryPhase::kUpdate, s);
    TESSEL_TRY(step->update());
  }
  if (target.eval_batch() > 0) {
    recorder.set_phase(MemoryPhase::kEval, steps);
    TESSEL_TRY(step->eval_loss().status());
  }
  TESSEL_TRY(target.device()->synchronize());
  recorder.stop();  // before `step` goes: its teardown is not part of the step
  Trace trace = std::move(recorder.trace());
  classify(trace, parameters, grads, *batch_ids);
  return trace;
}

// Whether two traces make the same allocations and releases in the same order; else where not.
Status same_program(const Trace& a, int64_t batch_a, const Trace& b, int64_t batch_b) {
  const size_t n = std::min(a.events.size(), b.events.size());
  size_t i = 0;
  while (i < n && a.events[i].allocate == b.events[i].allocate && a.events[i].id == b.events[i].id)
    ++i;
  if (i == a.events.size() && i == b.events.size()) return ok_status();
  auto where = [](const Trace& t, size_t i) -> std::string {
    if (i >= t.events.size()) return "the end of the step";
    const Allocation& x = t.allocations[size_t(t.events[i].id)];
    return fmt::format("{} of a block in step {} {} ({}{}{})",
                       t.events[i].allocate ? "allocation" : "release", x.step, phase_name(x.phase),
                       x.layer.empty() ? "-" : x.layer, x.op.empty() ? "" : ", ", x.op);
  };
  return failed_precondition(
      "the step allocates differently at batch {} and {} (event {}: {} against {}), so the plan "
      "cannot scale it to the configured batch; plan with a batch that is recorded as is",
      batch_a, batch_b, i, where(a, i), where(b, i));
}

struct Replay {
  int64_t peak = 0, reserved = 0;
  int64_t peak_event = -1;
  int64_t touched = 0;            // bytes of the held blocks ever written: resident
  std::vector<int64_t> block_of;  // per allocation, the size of the block it was handed
};

// Whether this machine backs memory with transparent huge pages when asked (THP "always" or
// "madvise", not "never"; unknown counts as no).
bool huge_pages_on() {
  static const bool on = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    return std::getline(f, line) && line.find("[never]") == std::string::npos;
  }();
  return on;
}

// The part of a block that a request of `requested` bytes writes, as resident memory: whole
// pages of a large block (the kernels write the tensor's bytes, never the size class's tail, so
// those pages stay untouched; the CPU device's blocks of 4 MiB and more sit on 2 MiB pages where
// THP is on, runtime/cpu/cpu_device.h); all of a small one (it shares its pages in the host heap).
int64_t touched_bytes(int64_t requested, int64_t block) {
  constexpr int64_t kLarge = 64 << 10;
  if (block < kLarge) return block;
  const int64_t page = block >= int64_t(CpuDevice::kHugeBlockBytes) && huge_pages_on()
                           ? int64_t(CpuDevice::kHugePageBytes)
                           : 4096;
  return std::min(block, (requested + page - 1) / page * page);
}

// Liveness over the trace with these block sizes, through the caching allocator's rules
// (runtime/caching_allocator.h): a released block is cached and handed out again, the last
// released first, for its own size class or else the smallest larger class up to
// CachingAllocator::kMaxReuseFactor times the request's.
Replay replay(const Trace& t, const std::vector<int64_t>& blocks) {
  Replay r;
  int64_t live = 0;
  std::vector<int64_t> touched;                       // per block held
  std::vector<int64_t> size_of;                       // per block held
  std::map<int64_t, std::vector<size_t>> cached;      // block size -> blocks held, free
  std::vector<size_t> held_by(t.allocations.size());  // allocation -> block held
  const int64_t reuse = int64_t(CachingAllocator::kMaxReuseFactor);
  r.block_of.assign(t.allocations.size(), 0);
  for (size_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.allocate) {
      const int64_t block = blocks[size_t(e.id)];
      auto free = cached.lower_bound(block);
      while (free != cached.end() && free->first <= reuse * block && free->second.empty())
        ++free;
      size_t held;
      if (free != cached.end() && free->first <= reuse * block) {
        held = free->second.back();
        free->second.pop_back();
      } else {
        held = touched.size();
        touched.push_back(0);
        size_of.push_back(block);
        r.reserved += block;
      }
      held_by[size_t(e.id)] = held;
      const int64_t size = size_of[held];
      r.block_of[size_t(e.id)] = size;
      const int64_t written = touched_bytes(t.allocations[size_t(e.id)].requested, size);
      if (written > touched[held]) {
        r.touched += written - touched[held];
        touched[held] = written;
      }
      live += size;
      if (live > r.peak) {
        r.peak = live;
        r.peak_event = int64_t(i);
      }
    } else {
      const size_t held = held_by[size_t(e.id)];
      live -= size_of[held];
      cached[size_of[held]].push_back(held);
    }
  }
  return r;
}

// The recordings this process made, one after the other, each ending with its teardown (every
// allocation still alive released): the resident bytes of the blocks the allocator now holds
// because of them.
int64_t resident_after(const std::vector<Trace>& recordings) {
  Trace all;
  for (const Trace& t : recordings) {
    const int64_t offset = int64_t(all.allocations.size());
    for (const Allocation& a : t.allocations)
      all.allocations.push_back(a);
    for (const Event& e : t.events)
      all.events.push_back({e.allocate, e.id + offset});
    for (size_t id = 0; id < t.allocations.size(); ++id)
      if (t.allocations[id].freed_at < 0) all.events.push_back({false, int64_t(id) + offset});
  }
  std::vector<int64_t> blocks;
  for (const Allocation& a : all.allocations)
    blocks.push_back(int64_t(CachingAllocator::round_size(size_t(a.requested))));
  return replay(all, blocks).touched;
}

// A module path up to and including its first index ("layer1.0.conv1" -> "layer1.0",
// "transformer.h.3.attn" -> "transformer.h.3"), so activations group by block.
std::string layer_group(const std::string& path) {
  if (path.empty()) return "(outside modules)";
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit))
      return path.substr(0, dot);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return path;
}

}  // namespace

std::string describe_bytes(int64_t bytes) {
  if (bytes < (1 << 20)) return fmt::format("{:.1f} KiB", double(bytes) / 1024);
  return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
}

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kParameters:
      return "parameters";
    case MemoryKind::kGradients:
      return "gradients";
    case MemoryKind::kOptimizerState:
      return "optimizer_state";
    case MemoryKind::kData:
      return "data";
    case MemoryKind::kActivations:
      return "activations";
    case MemoryKind::kWorkspace:
      return "workspace";
  }
  return "?";
}

int64_t current_rss_bytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return int64_t(resident) * int64_t(::sysconf(_SC_PAGESIZE));
}

int64_t cgroup_memory_limit() {
  // cgroup v2: "0::/path" in /proc/self/cgroup, the limit in memory.max ("max": none); v1: the
  // memory controller's line, memory.limit_in_bytes (a huge number: none). Inside a container the
  // path may not exist where the hierarchy is mounted (the container's own group is the mount's
  // root), so the root's files are read too.
  std::vector<std::string> files;
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) files.push_back("/sys/fs/cgroup" + path + "/memory.max");
    if (controllers == "memory")
      files.push_back("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
  }
  files.push_back("/sys/fs/cgroup/memory.max");
  files.push_back("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  for (const std::string& file : files) {
    std::ifstream in(file);
    std::string value;
    if (!(in >> value)) continue;
    if (value == "max") return 0;
    char* end = nullptr;
    const unsigned long long bytes = std::strtoull(value.c_str(), &end, 10);
    if (end && *end == '\0' && bytes > 0) return bytes < (1ull << 60) ? int64_t(bytes) : 0;
  }
  return 0;
}

Expected<MemoryPlan> plan_memory(MemoryPlanTarget& target, const MemoryPlanOptions& o) {
  if (o.batch_low < 1 || o.batch_high <= o.batch_low || o.steps < 1)
    return invalid_argument("memory plan: recording batches {} < {} and {} steps", o.batch_low,
                            o.batch_high, o.steps);
  MemoryPlan plan;
  plan.target = target.name();
  plan.device = target.device()->id();
  plan.batch = target.batch();
  plan.eval_batch = target.eval_batch();
  const int64_t B = plan.batch;
  plan.scaled =
      std::max(B, plan.eval_batch) > o.batch_high || (plan.eval_batch > 0 && plan.eval_batch != B);

  // A first, unrecorded step: what a process makes once (kernels built, caches filled) is not a
  // per-step allocation, and would make the traces differ.
  std::vector<int64_t> batch_ids;
  int queued = 0;
  std::vector<Trace> recordings;  // as recorded, for the resident memory they leave
  {
    std::vector<int64_t> ignored;
    TESSEL_ASSIGN_OR_RETURN(Trace warm_up,
                            record(target, plan.scaled ? o.batch_low : B, 1, &ignored, &queued));
    recordings.push_back(std::move(warm_up));
  }

  std::vector<int64_t> blocks;
  Trace trace;
  if (!plan.scaled) {
    TESSEL_ASSIGN_OR_RETURN(trace, record(target, B, o.steps, &batch_ids, &queued));
    recordings.push_back(trace);
    plan.recorded_batches = {B};
    for (const Allocation& a : trace.allocations)
      blocks.push_back(int64_t(CachingAllocator::round_size(size_t(a.requested))));
  } else {
    TESSEL_ASSIGN_OR_RETURN(Trace low, record(target, o.batch_low, o.steps, &batch_ids, &queued));
    TESSEL_ASSIGN_OR_RETURN(trace, record(target, o.batch_high, o.steps, &batch_ids, &queued));
    recordings.push_back(low);
    recordings.push_back(trace);
    plan.recorded_batches = {o.batch_low, o.batch_high};
    TESSEL_TRY(same_program(low, o.batch_low, trace, o.batch_high));
    const double span = double(o.batch_high - o.batch_low);
    std::vector<int64_t> high_sizes;
    for (const Allocation& a : trace.allocations)
      high_sizes.push_back(a.requested);
    auto line_at = [&](size_t id, int64_t batch) {
      const double lo = double(low.allocations[id].requested);
      const double hi = double(high_sizes[id]);
      return std::max<int64_t>(0,
                               std::llround(lo + (hi - lo) * double(batch - o.batch_low) / span));
    };
    for (size_t id = 0; id < trace.allocations.size(); ++id) {
      const bool eval = trace.allocations[id].phase == MemoryPhase::kEval;
      const int64_t bytes = line_at(id, eval ? plan.eval_batch : B);
      trace.allocations[id].requested = bytes;
      blocks.push_back(int64_t(CachingAllocator::round_size(size_t(bytes))));
    }
    if (o.batch_check > 0 && o.batch_check != o.batch_low && o.batch_check != o.batch_high) {
      std::vector<int64_t> ignored;
      int ignored_queued = 0;
      TESSEL_ASSIGN_OR_RETURN(Trace check,
                              record(target, o.batch_check, o.steps, &ignored, &ignored_queued));
      recordings.push_back(check);
      plan.recorded_batches.push_back(o.batch_check);
      plan.check_batch = o.batch_check;
      TESSEL_TRY(same_program(low, o.batch_low, check, o.batch_check));
      for (size_t id = 0; id < check.allocations.size(); ++id) {
        const int64_t off =
            std::llabs(check.allocations[id].requested - line_at(id, o.batch_check));
        if (off == 0) continue;
        if (plan.nonlinear_allocations++ == 0) {
          const Allocation& a = check.allocations[id];
          plan.nonlinear_first =
              fmt::format("step {} {} ({}{}{})", a.step, phase_name(a.phase),
                          a.layer.empty() ? "-" : a.layer, a.op.empty() ? "" : ", ", a.op);
        }
        plan.nonlinear_bytes = std::max(plan.nonlinear_bytes, off);
      }
    }
  }
  plan.events = int64_t(trace.allocations.size());

  const Replay r = replay(trace, blocks);
  plan.peak_bytes = r.peak;
  plan.reserved_peak_bytes = r.reserved;
  if (r.peak_event >= 0) {
    const Allocation& at = trace.allocations[size_t(trace.events[size_t(r.peak_event)].id)];
    plan.peak_at = fmt::format("step {}, {} ({}{}{})", at.step, phase_name(at.phase),
                               at.layer.empty() ? "-" : at.layer, at.op.empty() ? "" : ", ", at.op);
  }
  // Saved activations count at their own size class; the kinds live at the peak at the blocks
  // they were handed (a reused larger block counts whole), so that they sum to the peak.
  std::map<std::string, size_t> layer_order;
  for (size_t id = 0; id < trace.allocations.size(); ++id) {
    const Allocation& a = trace.allocations[id];
    if (a.kind == MemoryKind::kActivations && a.step == o.steps) {
      plan.saved_activation_bytes += blocks[id];
      if (a.op == "cast") plan.saved_16bit_bytes += blocks[id];
      const std::string group = layer_group(a.layer);
      auto [it, fresh] = layer_order.emplace(group, plan.activations_by_layer.size());
      if (fresh) plan.activations_by_layer.push_back({group, 0});
      plan.activations_by_layer[it->second].second += blocks[id];
    }
    if (a.allocated_at <= r.peak_event && (a.freed_at < 0 || a.freed_at > r.peak_event))
      plan.at_peak[int(a.kind)] += r.block_of[id];
  }
  // The batches a run holds beside the one in use: blocks of the batch's sizes, live at the peak.
  int64_t queued_bytes = 0, queued_touched = 0;
  for (int64_t id : batch_ids) {
    if (id < 0) continue;
    queued_bytes += blocks[size_t(id)] * queued;
    queued_touched +=
        touched_bytes(trace.allocations[size_t(id)].requested, blocks[size_t(id)]) * queued;
  }
  plan.at_peak[int(MemoryKind::kData)] += queued_bytes;
  plan.peak_bytes += queued_bytes;
  plan.reserved_peak_bytes += queued_bytes;
  plan.resident_tensor_bytes = r.touched + queued_touched;

  // This process's resident memory less what its recordings left in the allocator's blocks. The
  // host heap is trimmed first: four builds left more freed heap behind than a run's one does.
  ::malloc_trim(0);
  const int64_t rss = current_rss_bytes();
  const int64_t resident = resident_after(recordings);
  plan.overhead_bytes = rss > resident ? rss - resident : 0;
  plan.predicted_rss_bytes = plan.resident_tensor_bytes + plan.overhead_bytes;
  return plan;
}

nlohmann::json memory_plan_json(const MemoryPlan& p) {
  nlohmann::json at_peak = nlohmann::json::object();
  for (int k = 0; k < kKinds; ++k)
    at_peak[memory_kind_name(MemoryKind(k))] = p.at_peak[k];
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& [name, bytes] : p.activations_by_layer)
    layers.push_back({{"layer", name}, {"bytes", bytes}});
  nlohmann::json j = {{"target", p.target},
                      {"device", p.device},
                      {"batch", p.batch},
                      {"eval_batch", p.eval_batch},
                      {"recorded_batches", p.recorded_batches},
                      {"scaled", p.scaled},
                      {"allocations_per_recording", p.events},
                      {"peak_bytes", p.peak_bytes},
                      {"reserved_peak_bytes", p.reserved_peak_bytes},
                      {"peak_at", p.peak_at},
                      {"at_peak", at_peak},
                      {"saved_activation_bytes", p.saved_activation_bytes},
                      {"saved_16bit_bytes", p.saved_16bit_bytes},
                      {"activations_by_layer", layers},
                      {"resident_tensor_bytes", p.resident_tensor_bytes},
                      {"overhead_bytes", p.overhead_bytes},
                      {"predicted_rss_bytes", p.predicted_rss_bytes}};
  if (p.check_batch > 0)
    j["scaling_check"] = {{"batch", p.check_batch},
                          {"nonlinear_allocations", p.nonlinear_allocations},
                          {"largest_difference_bytes", p.nonlinear_bytes},
                          {"first", p.nonlinear_first}};
  return j;
}

std::string describe(const nlohmann::json& j) {
  auto bytes = [&](const nlohmann::json& v) { return describe_bytes(v.get<int64_t>()); };
  const bool scaled = j["scaled"];
  std::string out = fmt::format(
      "memory plan of {} on {}, batch {}{} ({})\n", std::string(j["target"]),
      std::string(j["device"]), int64_t(j["batch"]),
      int64_t(j["eval_batch"]) > 0 ? fmt::format(", evaluation batch {}", int64_t(j["eval_batch"]))
                                   : std::string(),
      scaled ? fmt::format("scaled from recorded batches {}",
                           fmt::join(j["recorded_batches"].get<std::vector<int64_t>>(), ", "))
             : "recorded as is");
  out += fmt::format("  peak of live tensor memory {} at {}\n", bytes(j["peak_bytes"]),
                     std::string(j["peak_at"]));
  for (int k = 0; k < kKinds; ++k) {
    const char* kind = memory_kind_name(MemoryKind(k));
    out += fmt::format("    {:<18} {:>12}\n", kind, bytes(j["at_peak"][kind]));
  }
  out += fmt::format("  activations forward keeps for backward {}{}, by layer:\n",
                     bytes(j["saved_activation_bytes"]),
                     j.value("saved_16bit_bytes", int64_t(0)) > 0
                         ? fmt::format(" (of which 16-bit copies under autocast {})",
                                       bytes(j["saved_16bit_bytes"]))
                         : std::string());
  for (const auto& layer : j["activations_by_layer"])
    out += fmt::format("    {:<30} {:>12}\n", std::string(layer["layer"]), bytes(layer["bytes"]));
  out +=
      fmt::format("  blocks held (live + cached for reuse) {}\n", bytes(j["reserved_peak_bytes"]));
  out += fmt::format(
      "  of which resident (pages written; a block's tail past its largest tensor never is) {}\n",
      bytes(j["resident_tensor_bytes"]));
  out += fmt::format(
      "  resident outside tensor memory (code, kernels, scratch, host heap; measured here) {}\n",
      bytes(j["overhead_bytes"]));
  out += fmt::format("  predicted peak resident memory {}\n", bytes(j["predicted_rss_bytes"]));
  if (j.contains("scaling_check")) {
    const auto& c = j["scaling_check"];
    if (int64_t(c["nonlinear_allocations"]) == 0)
      out +=
          fmt::format("  scaling check at batch {}: every size on its line\n", int64_t(c["batch"]));
    else
      out += fmt::format(
          "  scaling check at batch {}: {} sizes off their line (the largest by {} bytes; the "
          "first at {})\n",
          int64_t(c["batch"]), int64_t(c["nonlinear_allocations"]),
          int64_t(c["largest_difference_bytes"]), std::string(c["first"]));
  }
  return out;
}

std::string describe(const MemoryPlan& p) {
  return describe(memory_plan_json(p));
}

}  // namespace tessel::plan
