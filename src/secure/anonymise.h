// Finding personal data in text and replacing it with keyed pseudonyms, so a corpus can be used
// for training without the raw identifiers in it.
//
//   Anonymiser anon(key, {.names = {"Ada Lovelace", "Grace"}});
//   std::string clean = anon.anonymise("mail ada@example.org or call +44 20 7946 0958");
//   // "mail [EMAIL_5c0f3e9a41d2] or call [PHONE_07ab22c9e013]"
//   anon.report().found[PiiKind::kEmail]   // 1
//
// What is found (find_personal_data):
//   email      local@domain.tld (RFC 5322's common subset: letters, digits, . _ % + - on the left)
//   phone      7-15 digits with separators (space - . ( )), written with a leading + or a
//              national grouping such as (555) 123-4567, 555-123-4567, 020 7946 0958
//   ipv4       four decimal octets 0-255;  ipv6  eight groups of 1-4 hex digits, or fewer with ::
//   card       13-19 digits, in groups separated by single spaces or hyphens, passing Luhn's check
//   iban       a country code, two check digits and 11-30 letters or digits (groups of four may be
//              spaced), passing ISO 13616's mod-97 check
//   birth_date a date (2024-03-01, 01/03/2024, 01.03.2024, 1 March 2024, March 1, 2024) that a cue
//              ("born", "birth", "DOB", "birthday") precedes within 40 characters: other dates
//              are not personal data by themselves and are kept
//   name       a name from the user's list, as a whole word (longest first)
// Spans that overlap are resolved in that order of precedence.
//
// A pseudonym is "[KIND_" + the first 6 bytes of HMAC-SHA-256(key, kind, normalised value) in hex
// + "]": the same value (also written differently: "+44 20 7946 0958" and "+442079460958") maps
// to the same token under one key, a different key gives unrelated tokens, and only the key's
// holder can check which value a token stands for.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "secure/secret_key.h"

namespace tessel::secure {

enum class PiiKind { kEmail, kPhone, kIpv4, kIpv6, kCard, kIban, kBirthDate, kName };
inline constexpr int kPiiKinds = 8;
const char* pii_kind_name(PiiKind kind);  // "email", "phone", ... (the report's keys)

struct PiiSpan {
  PiiKind kind;
  size_t begin, end;  // byte offsets into the text
  bool operator==(const PiiSpan&) const = default;
};

// Every piece of personal data in `text`, in order, not overlapping.
std::vector<PiiSpan> find_personal_data(std::string_view text,
                                        const std::vector<std::string>& names = {});

// The checks the finders use, exposed for tests.
bool luhn_valid(std::string_view digits);
bool iban_valid(std::string_view compact);  // upper case, no spaces

struct AnonymiseOptions {
  std::vector<std::string> names;
};

struct AnonymiseReport {
  std::array<int64_t, kPiiKinds> found{};  // by PiiKind
  int64_t total() const;
  std::string to_string() const;  // "email 3, phone 1, ..." (kinds found only)
};

class Anonymiser {
 public:
  Anonymiser(const SecretKey& key, AnonymiseOptions options = {});
  // The text with every finding replaced by its pseudonym; the counts go into report().
  std::string anonymise(std::string_view text);
  std::string pseudonym(PiiKind kind, std::string_view value) const;
  const AnonymiseReport& report() const { return report_; }

 private:
  const SecretKey& key_;
  AnonymiseOptions options_;
  AnonymiseReport report_;
};

// A whole file, a line at a time (personal data does not span lines here); `out` is written
// atomically.
Expected<AnonymiseReport> anonymise_file(const std::string& in, const std::string& out,
                                         const SecretKey& key, const AnonymiseOptions& options);
// One name per line (blank lines and lines starting with # are skipped).
Expected<std::vector<std::string>> read_name_list(const std::string& path);

}  // namespace tessel::secure
