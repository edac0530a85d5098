// `tessel checkpoint encrypt|decrypt|verify FILE --key-file K [-o OUT]` and `tessel checkpoint
// keygen OUT`: encrypted checkpoints (secure/encrypted_file.h) for files that already exist.
// encrypt writes FILE.enc unless -o says otherwise; decrypt writes FILE without its .enc (or -o);
// verify authenticates every chunk and reads the checkpoint back; any failure exits 1.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/commands.h"
#include "io/checkpoint.h"
#include "secure/encrypted_file.h"

namespace tessel::cli {
namespace {

struct CheckpointArgs {
  std::string file, key_file, out;
};

int fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return 1;
}

int run_checkpoint(const std::string& action, const CheckpointArgs& args) {
  if (action == "keygen") {
    Status s = secure::SecretKey::generate().save(args.file);
    if (!s.ok()) return fail(s);
    fmt::print("wrote a new 256-bit key to {} (mode 0600); keep it apart from the checkpoints\n",
               args.file);
    return 0;
  }
  Expected<secure::SecretKey> key = secure::SecretKey::from_file(args.key_file);
  if (!key.ok()) return fail(key.status());
  if (action == "verify") {
    Expected<uint64_t> size = secure::verify_file(args.file, *key);
    if (!size.ok()) return fail(size.status());
    Expected<Checkpoint> ckpt = load_checkpoint(args.file, &*key);
    if (!ckpt.ok()) return fail(ckpt.status());
    fmt::print(
        "{}: authentic ({} bytes of plaintext, key id {}): {} model and {} optimizer "
        "tensors, {} metadata keys\n",
        args.file, *size, key->key_id(), ckpt->model.size(), ckpt->optimizer.size(),
        ckpt->metadata.size());
    return 0;
  }
  std::string out = args.out;
  if (out.empty() && action == "encrypt") out = args.file + ".enc";
  if (out.empty() && args.file.ends_with(".enc")) out = args.file.substr(0, args.file.size() - 4);
  if (out.empty()) {
    fmt::print(stderr, "error: {} does not end in .enc; say where the plaintext goes with -o\n",
               args.file);
    return 2;
  }
  Status s = action == "encrypt" ? secure::encrypt_file(args.file, out, *key)
                                 : secure::decrypt_file(args.file, out, *key);
  if (!s.ok()) return fail(s);
  fmt::print("{}ed {} -> {} (key id {})\n", action, args.file, out, key->key_id());
  return 0;
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("checkpoint", "encrypt, decrypt or verify checkpoint files");
  cmd->require_subcommand(1);
  for (const char* action : {"encrypt", "decrypt", "verify"}) {
    auto args = std::make_shared<CheckpointArgs>();
    CLI::App* sub = cmd->add_subcommand(
        action,
        fmt::format("{} a checkpoint with a 256-bit key (XChaCha20-Poly1305 stream)", action));
    sub->add_option("file", args->file, "the checkpoint")->required()->check(CLI::ExistingFile);
    sub->add_option("--key-file", args->key_file, "64 hex digits or 32 raw bytes")
        ->required()
        ->check(CLI::ExistingFile);
    if (std::string(action) != "verify")
      sub->add_option("-o,--output", args->out, "where the result goes");
    sub->callback([args, action] { exit_code = run_checkpoint(action, *args); });
  }
  auto args = std::make_shared<CheckpointArgs>();
  CLI::App* keygen = cmd->add_subcommand("keygen", "write a new random key (hex, mode 0600)");
  keygen->add_option("file", args->file, "the key file to create")->required();
  keygen->callback([args] { exit_code = run_checkpoint("keygen", *args); });
}

}  // namespace tessel::cli
