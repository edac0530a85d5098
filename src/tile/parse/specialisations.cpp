// Reading lists of kernel specialisations (see specialisations.h).
#include "tile/parse/specialisations.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tile/parse/parser.h"

namespace tessel::tile {

Expected<std::vector<Specialisation>> parse_specialisations(std::string_view text,
                                                            const std::string& path) {
  std::vector<Specialisation> list;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int line_no = 1; std::getline(lines, line); ++line_no) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    Specialisation s;
    if (!(words >> s.kernel)) continue;
    s.line = line_no;
    for (std::string word; words >> word;) {
      size_t eq = word.find('=');
      if (eq == std::string::npos || eq == 0)
        return invalid_argument("{}:{}: '{}' is not NAME=VALUE", path, line_no, word);
      s.params[word.substr(0, eq)] = word.substr(eq + 1);
    }
    list.push_back(std::move(s));
  }
  return list;
}

Expected<std::vector<Specialisation>> read_specialisations(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read {}", path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_specialisations(text.str(), path);
}

std::string specialisation_string(const std::string& kernel,
                                  const std::map<std::string, std::string>& params) {
  std::string s = kernel;
  for (const auto& [name, value] : params)
    s += " " + name + "=" + value;
  return s;
}

Expected<std::map<std::string, Kernel>> parse_kernel_folder(const std::string& dir,
                                                            const std::string& name_as) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return not_found("cannot list kernel folder {}: {}", dir, ec.message());
  std::map<std::string, Kernel> kernels;
  for (const auto& entry : it) {
    if (entry.path().extension() != ".tile") continue;
    std::vector<Kernel> parsed;
    if (name_as.empty()) {
      TESSEL_ASSIGN_OR_RETURN(parsed, parse_tile_file(entry.path().string()));
    } else {
      std::ifstream in(entry.path(), std::ios::binary);
      if (!in) return errno_error("open " + entry.path().string());
      std::stringstream text;
      text << in.rdbuf();
      const std::string name = name_as + "/" + entry.path().filename().string();
      TESSEL_ASSIGN_OR_RETURN(parsed, parse_tile(text.str(), name));
    }
    for (Kernel& k : parsed) {
      std::string name = k.name;
      kernels.emplace(std::move(name), std::move(k));
    }
  }
  return kernels;
}

}  // namespace tessel::tile
