// `tessel anonymise IN -o OUT --key-file K [--names FILE]`: replaces the personal data in a text
// file with keyed pseudonyms (secure/anonymise.h) and prints what it found, by kind.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/commands.h"
#include "secure/anonymise.h"

namespace tessel::cli {
namespace {

struct AnonymiseArgs {
  std::string in, out, key_file, names;
};

int run_anonymise(const AnonymiseArgs& args) {
  Expected<secure::SecretKey> key = secure::SecretKey::from_file(args.key_file);
  if (!key.ok()) {
    fmt::print(stderr, "error: {}\n", key.status().message());
    return 2;
  }
  secure::AnonymiseOptions options;
  if (!args.names.empty()) {
    Expected<std::vector<std::string>> names = secure::read_name_list(args.names);
    if (!names.ok()) {
      fmt::print(stderr, "error: {}\n", names.status().message());
      return 2;
    }
    options.names = std::move(*names);
  }
  Expected<secure::AnonymiseReport> report =
      secure::anonymise_file(args.in, args.out, *key, options);
  if (!report.ok()) {
    fmt::print(stderr, "error: {}\n", report.status().message());
    return 1;
  }
  fmt::print("{} -> {}: replaced {} ({} in all; key id {})\n", args.in, args.out,
             report->to_string(), report->total(), key->key_id());
  return 0;
}

}  // namespace

void add_anonymise_command(CLI::App& app) {
  auto args = std::make_shared<AnonymiseArgs>();
  CLI::App* cmd = app.add_subcommand(
      "anonymise",
      "replace e-mails, phones, IPs, cards, IBANs, birth dates, names with pseudonyms");
  cmd->add_option("input", args->in, "a text file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", args->out, "the anonymised text")->required();
  cmd->add_option("--key-file", args->key_file,
                  "the pseudonyms' HMAC key (tessel checkpoint keygen makes one)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--names", args->names, "names to replace, one per line")
      ->check(CLI::ExistingFile);
  cmd->callback([args] { exit_code = run_anonymise(*args); });
}

}  // namespace tessel::cli
