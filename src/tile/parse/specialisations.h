// Lists of kernel specialisations: a kernel name and its compile-time parameters, one per line,
// as the op library asks for them ("gemm T=bf16 BM=32"; '#' starts a comment). kernels/aot.txt
// lists the CPU kernels built ahead of time, kernels/gpu.txt every specialisation the op library
// launches on a GPU (checked with ptxas in the tests).
//
//   TESSEL_ASSIGN_OR_RETURN(auto list, read_specialisations("kernels/gpu.txt"));
//   TESSEL_ASSIGN_OR_RETURN(auto kernels, parse_kernel_folder("kernels"));
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

struct Specialisation {
  std::string kernel;
  std::map<std::string, std::string> params;
  int line = 0;  // in the list, for messages
};

// Errors name `path`:line (a word that is not NAME=VALUE).
Expected<std::vector<Specialisation>> parse_specialisations(std::string_view text,
                                                            const std::string& path);
Expected<std::vector<Specialisation>> read_specialisations(const std::string& path);

// "gemm BM=32 T=f32": the kernel, then the parameters in name order (a list's line, normalised).
std::string specialisation_string(const std::string& kernel,
                                  const std::map<std::string, std::string>& params);

// Every kernel of the *.tile files in `dir`, by kernel name. Their locations (file:line:col) name
// the files `dir`/<file>, or `name_as`/<file> when that is given.
Expected<std::map<std::string, Kernel>> parse_kernel_folder(const std::string& dir,
                                                            const std::string& name_as = "");

}  // namespace tessel::tile
