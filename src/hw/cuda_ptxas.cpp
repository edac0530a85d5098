// Finding and running ptxas, and reading its -v report (see cuda_ptxas.h).
#include "hw/cuda_ptxas.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/subprocess.h"

namespace tessel {
namespace {

// The number before `unit` in `line` ("40 registers" -> 40), or 0 when the line does not say.
int64_t number_before(const std::string& line, const char* unit) {
  std::smatch m;
  std::regex pattern(std::string("(\\d+) ") + unit);
  if (!std::regex_search(line, m, pattern)) return 0;
  return std::stoll(m[1].str());
}

// A file of our own for ptxas to read, removed when it goes out of scope.
class TempPtxFile {
 public:
  Status write(const std::string& text) {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessel-ptxas-XXXXXX").string();
    int fd = ::mkstemp(pattern.data());
    if (fd < 0) return io_error("creating a temporary file for ptxas in {}", pattern);
    ::close(fd);
    path_ = pattern;
    std::ofstream out(path_, std::ios::binary);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) return io_error("writing PTX to {}", path_);
    return ok_status();
  }
  const std::string& path() const { return path_; }
  ~TempPtxFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }

 private:
  std::string path_;
};

}  // namespace

Expected<std::string> find_ptxas() {
  std::vector<std::string> candidates;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(var); root && *root)
      candidates.push_back(std::string(root) + "/bin/ptxas");
  candidates.push_back("ptxas");
  candidates.push_back("/usr/local/cuda/bin/ptxas");
  std::string found = find_program_in_path(candidates);
  if (found.empty())
    return not_found(
        "ptxas (the CUDA toolkit's PTX assembler) is not in $CUDA_HOME/bin, $CUDA_PATH/bin, "
        "$PATH or /usr/local/cuda/bin");
  return found;
}

std::vector<KernelResources> parse_ptxas_verbose(std::string_view log) {
  static const std::regex entry("Compiling entry function '([^']+)' for '([^']+)'");
  std::vector<KernelResources> kernels;
  std::istringstream lines{std::string(log)};
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) {
      kernels.push_back({});
      kernels.back().kernel = m[1].str();
      kernels.back().arch = m[2].str();
      continue;
    }
    if (kernels.empty()) continue;
    KernelResources& k = kernels.back();
    if (line.find("stack frame") != std::string::npos) {
      k.stack_frame_bytes = number_before(line, "bytes stack frame");
      k.spill_store_bytes = number_before(line, "bytes spill stores");
      k.spill_load_bytes = number_before(line, "bytes spill loads");
    } else if (line.find("Used ") != std::string::npos) {
      k.registers = static_cast<int>(number_before(line, "registers"));
      k.barriers = static_cast<int>(number_before(line, "barriers"));
      k.shared_bytes = number_before(line, "bytes smem");
      k.constant_bytes = number_before(line, "bytes cmem\\[0\\]");
    }
  }
  return kernels;
}

Expected<std::vector<KernelResources>> assemble_ptx(const std::string& ptxas,
                                                    const std::string& ptx, const std::string& arch,
                                                    const std::string& name) {
  TempPtxFile file;
  TESSEL_TRY(file.write(ptx));
  ProgramRun run = run_program({ptxas, "-arch=" + arch, "-v", "-o", "/dev/null", file.path()});
  if (run.exit_code != 0)
    return invalid_argument("{}: ptxas -arch={} failed (exit {}):\n{}", name, arch, run.exit_code,
                            run.output);
  std::vector<KernelResources> kernels = parse_ptxas_verbose(run.output);
  if (kernels.empty())
    return internal_error("{}: ptxas -arch={} reported no kernel:\n{}", name, arch, run.output);
  return kernels;
}

}  // namespace tessel
