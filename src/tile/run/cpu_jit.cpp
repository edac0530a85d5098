// The CPU JIT and its on-disk cache (see cpu_jit.h).
#include "tile/run/cpu_jit.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "hw/cpu_info.h"
#include "support/atomic_file.h"
#include "support/hash.h"
#include "support/log.h"
#include "support/subprocess.h"
#include "tile/run/embedded_headers.h"

namespace tessel::tile {

namespace fs = std::filesystem;

namespace {

// A 128-bit cache key from two XXH64 streams with different seeds.
class KeyHasher {
 public:
  KeyHasher& add(std::string_view part) {
    a_.add_field(part);
    b_.add_field(part);
    return *this;
  }
  std::string hex() const { return a_.hex_digest() + b_.hex_digest(); }

 private:
  Hasher a_{0}, b_{0x9e3779b97f4a7c15ULL};
};

// A name no other process or thread uses: for temporaries that are renamed into place.
std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("tmp.{}.{}", ::getpid(), counter++);
}

Status write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return errno_error("create " + path.string());
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return errno_error("write " + path.string());
  return ok_status();
}

Status make_dirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("create directory {}: {}", dir.string(), ec.message());
  return ok_status();
}

std::string compiler_name(const CpuJitOptions& o) {
  if (!o.compiler.empty()) return o.compiler;
  const char* env = std::getenv("TESSEL_CXX");
  return env && *env ? env : "c++";
}

// "c++ (Debian 12.2.0-14) 12.2.0": part of the cache key, found once per compiler per process.
Expected<std::string> compiler_identity(const std::string& compiler) {
  static std::mutex mu;
  static std::map<std::string, std::string> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(compiler);
  if (it != known.end()) return it->second;
  ProgramRun version = run_program({compiler, "--version"});
  const int rc = version.exit_code;
  const std::string& out = version.output;
  if (rc != 0)
    return unavailable("the C++ compiler '{}' does not run (set TESSEL_CXX to one that does): {}",
                       compiler, out);
  std::string first = out.substr(0, out.find('\n'));
  known[compiler] = first;
  return first;
}

// Writes the embedded headers under <cache>/include/<hash>/ once; returns that directory.
Expected<fs::path> header_dir(const fs::path& cache) {
  KeyHasher h;
  for (size_t i = 0; i < kEmbeddedCpuHeaderCount; ++i) {
    h.add(kEmbeddedCpuHeaders[i].path);
    h.add(kEmbeddedCpuHeaders[i].text);
  }
  fs::path dir = cache / "include" / h.hex();
  if (fs::exists(dir / ".complete")) return dir;
  fs::path tmp = cache / "include" / unique_suffix();
  for (size_t i = 0; i < kEmbeddedCpuHeaderCount; ++i) {
    fs::path file = tmp / kEmbeddedCpuHeaders[i].path;
    TESSEL_TRY(make_dirs(file.parent_path()));
    TESSEL_TRY(write_file(file, kEmbeddedCpuHeaders[i].text));
  }
  TESSEL_TRY(write_file(tmp / ".complete", ""));
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    // Another process put the same headers there first; theirs are as good as ours.
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (!fs::exists(dir / ".complete")) return errno_error("rename to " + dir.string());
  }
  return dir;
}

Status load(const fs::path& library, const std::string& entry, CpuModule* m) {
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return internal_error("dlopen {}: {}", library.string(), ::dlerror());
  void* sym = ::dlsym(handle, entry.c_str());
  if (!sym) return internal_error("{} has no symbol {}", library.string(), entry);
  m->handle = handle;
  m->entry = reinterpret_cast<tessel_cpu::KernelEntry>(sym);
  return ok_status();
}

// The variants, best first, with the flags that select each.
const CpuIsa kCpuIsas[] = {{"avx512bf16", {"-march=x86-64-v4", "-mavx512bf16"}},
                           {"avx512", {"-march=x86-64-v4"}},
                           {"avx2", {"-march=x86-64-v3"}},
                           {"portable", {}}};

CpuIsa detect_isa() {
  const CpuFeatureSet& f = host_cpu_info().features;
  bool avx512 = f.has(CpuFeature::kAvx512f) && f.has(CpuFeature::kAvx512bw) &&
                f.has(CpuFeature::kAvx512dq) && f.has(CpuFeature::kAvx512vl) &&
                f.has(CpuFeature::kFma) && f.has(CpuFeature::kF16c);
  if (avx512 && f.has(CpuFeature::kAvx512Bf16)) return kCpuIsas[0];
  if (avx512) return kCpuIsas[1];
  if (f.has(CpuFeature::kAvx2) && f.has(CpuFeature::kFma)) return kCpuIsas[2];
  return kCpuIsas[3];
}

}  // namespace

const CpuIsa& host_cpu_isa() {
  static const CpuIsa isa = detect_isa();
  return isa;
}

Expected<CpuIsa> cpu_isa_named(std::string_view name) {
  for (const CpuIsa& isa : kCpuIsas)
    if (isa.name == name) return isa;
  return invalid_argument("unknown CPU variant '{}': one of avx512bf16, avx512, avx2, portable",
                          name);
}

void* module_symbol(const CpuModule& module, const std::string& name) {
  return module.handle ? ::dlsym(module.handle, name.c_str()) : nullptr;
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("TESSEL_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tessel";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/tessel";
  return "/tmp/tessel-cache";
}

Expected<CpuModule> jit_compile_cpu(const std::string& source, const std::string& entry,
                                    const CpuJitOptions& options) {
  // One compile at a time per process; other processes are handled by the atomic renames.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);

  fs::path cache = options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
  std::string compiler = compiler_name(options);
  TESSEL_ASSIGN_OR_RETURN(std::string identity, compiler_identity(compiler));
  TESSEL_ASSIGN_OR_RETURN(fs::path include, header_dir(cache));

  std::vector<std::string> flags = {"-std=c++20",
                                    "-O3",
                                    "-fPIC",
                                    "-shared",
                                    "-fopenmp-simd",
                                    "-fno-math-errno",
                                    "-fno-trapping-math",
                                    "-ffp-contract=fast",
                                    "-w"};
  flags.insert(flags.end(), options.isa.flags.begin(), options.isa.flags.end());
  KeyHasher h;
  h.add(source);
  h.add(entry);
  h.add(identity);
  h.add(include.filename().string());
  for (const std::string& f : flags)
    h.add(f);
  std::string key = h.hex();

  fs::path dir = cache / "kernels";
  TESSEL_TRY(make_dirs(dir));
  fs::path library = dir / (key + ".so");
  CpuModule m;
  m.library_path = library.string();
  m.entry_name = entry;
  if (fs::exists(library)) {
    TESSEL_TRY(load(library, entry, &m));
    m.from_cache = true;
    return m;
  }

  fs::path src = dir / (key + ".cpp");
  TESSEL_TRY(write_file_atomic(src.string(), source));
  fs::path tmp = library;
  tmp += "." + unique_suffix();
  std::vector<std::string> argv = {compiler};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-I", include.string(), src.string(), "-o", tmp.string()});
  log_debug("tile jit: compiling {} ({} flags)", src.string(), options.isa.name);
  ProgramRun compiled = run_program(argv);
  const int rc = compiled.exit_code;
  std::string& output = compiled.output;
  if (rc != 0) {
    ::unlink(tmp.c_str());
    if (rc == 127 || rc < 0)
      return unavailable("could not run the C++ compiler '{}': {}", compiler, output);
    if (output.size() > 8000) output = output.substr(0, 8000) + "\n...";
    return internal_error("generated code for {} did not compile ({}):\n{}", entry, src.string(),
                          output);
  }
  if (::rename(tmp.c_str(), library.c_str()) != 0) {
    Status s = errno_error("rename to " + library.string());
    ::unlink(tmp.c_str());
    return s;
  }
  TESSEL_TRY(load(library, entry, &m));
  return m;
}

}  // namespace tessel::tile
