// TOML configuration files with typed getters whose errors say which file, which key (its full
// path, "optimizer.lr") and what was expected, so that a user can fix a config without reading
// tessel's code. A thin layer over toml++.
//
//   TESSEL_ASSIGN_OR_RETURN(Config cfg, Config::load("examples/mnist.toml"));
//   TESSEL_ASSIGN_OR_RETURN(double lr, cfg.get<double>("optimizer.lr"));
//   TESSEL_ASSIGN_OR_RETURN(int64_t epochs, cfg.get_or<int64_t>("train.epochs", 10));
//   TESSEL_ASSIGN_OR_RETURN(Config opt, cfg.table("optimizer"));  // keys below are relative,
//   TESSEL_TRY(opt.check_keys({"lr", "momentum", "weight_decay"}));  // messages stay absolute
//
// Types: bool, int64_t, double (an integer is accepted where a double is expected), std::string,
// and std::vector of int64_t, double or std::string. Errors:
//   examples/mnist.toml:7:6: key 'optimizer.lr': expected a number, got a string ("fast")
//   examples/mnist.toml: missing key 'optimizer.lr'
//   examples/mnist.toml:9:1: unknown key 'optimizer.lrr' (did you mean 'lr'?); allowed in
//     [optimizer]: lr, momentum, weight_decay
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace tessel {

class Config {
 public:
  // Reads and parses a file; a syntax error comes back as invalid_argument with file:line:col.
  static Expected<Config> load(const std::string& path);
  // Parses text; `source` names it in messages.
  static Expected<Config> parse(std::string_view text, std::string source = "<string>");

  // Keys are dotted paths relative to this table ("optimizer.lr").
  bool has(std::string_view key) const;
  // not_found when the key is missing, invalid_argument when it has another type.
  template <typename T>
  Expected<T> get(std::string_view key) const;
  // `fallback` when the key is missing; still an error when it has another type.
  template <typename T>
  Expected<T> get_or(std::string_view key, T fallback) const;

  // The table at `key`, as a Config whose keys are relative to it.
  Expected<Config> table(std::string_view key) const;
  // Keys directly in this table, sorted.
  std::vector<std::string> keys() const;
  // Fails (invalid_argument) on the first key of this table that is not in `allowed`.
  Status check_keys(const std::vector<std::string>& allowed) const;

  // The file (or source name) this came from, and this table's path in it ("" at the top).
  const std::string& source() const;
  const std::string& path() const { return path_; }

  // The parsed file, shared by a Config and the tables taken from it (defined in config.cpp).
  struct Document;

 private:
  Config(std::shared_ptr<const Document> doc, std::string path)
      : doc_(std::move(doc)), path_(std::move(path)) {}
  std::string full_key(std::string_view key) const;

  std::shared_ptr<const Document> doc_;
  std::string path_;
};

}  // namespace tessel
