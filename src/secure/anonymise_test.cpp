// The anonymiser against a labelled corpus that this test generates: lines of ordinary text with
// planted personal data (every kind, in the formats people write) and look-alikes that are not
// personal data (dates without a birth cue, numbers failing Luhn or mod 97, versions, times,
// prices, handles). Recall (planted spans found exactly) must be >= 99% and false positives
// (findings that were not planted) <= 1%. Pseudonyms: one key gives the same token for a value
// (however it is spaced), another key a different one. Luhn and mod-97 against their published
// examples.
#include "secure/anonymise.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "support/random.h"

namespace tessel::secure {
namespace {

const std::vector<std::string> kFirst = {"Ada",    "Grace", "Alan",  "Edsger",   "Barbara",
                                         "Donald", "Hedy",  "Linus", "Margaret", "Dennis"};
const std::vector<std::string> kLast = {"Lovelace", "Hopper", "Turing",   "Dijkstra", "Liskov",
                                        "Knuth",    "Lamarr", "Torvalds", "Hamilton", "Ritchie"};

class Corpus {
 public:
  explicit Corpus(uint64_t seed) : rng_(seed, 9) {}

  std::string line;
  std::vector<PiiSpan> planted;

  void text(const std::string& s) { line += s; }
  void plant(PiiKind kind, const std::string& s) {
    planted.push_back({kind, line.size(), line.size() + s.size()});
    line += s;
  }
  uint32_t below(uint32_t n) { return rng_.below(n); }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[below(uint32_t(v.size()))];
  }
  std::string digits(int n) {
    std::string s;
    for (int i = 0; i < n; ++i)
      s += char('0' + below(10));
    return s;
  }

  std::string email() {
    std::string local = lower(pick(kFirst)) + pick(std::vector<std::string>{".", "_", "", "+"}) +
                        lower(pick(kLast));
    if (below(3) == 0) local += digits(2);
    return local + "@" +
           pick(std::vector<std::string>{"example.org", "mail.example.com", "uni-x.ac.uk",
                                         "corp.io"});
  }
  std::string phone() {
    switch (below(6)) {
      case 0:
        return fmt::format("+44 20 {} {}", digits(4), digits(4));
      case 1:
        return fmt::format("({}) {}-{}", digits(3), digits(3), digits(4));
      case 2:
        return fmt::format("{}-{}-{}", digits(3), digits(3), digits(4));
      case 3:
        return fmt::format("020 {} {}", digits(4), digits(4));
      case 4:
        return fmt::format("+1-202-555-{}", digits(4));
      default:
        return fmt::format("+33 1 {} {} {} {}", digits(2), digits(2), digits(2), digits(2));
    }
  }
  std::string ipv4() {
    return fmt::format("{}.{}.{}.{}", 1 + below(254), below(256), below(256), 1 + below(254));
  }
  std::string ipv6() {
    std::vector<std::string> g;
    for (int i = 0; i < 8; ++i)
      g.push_back(fmt::format("{:x}", below(65536)));
    if (below(2) == 0) return fmt::format("2001:db8::{}:{}", g[0], g[1]);
    std::string s;
    for (int i = 0; i < 8; ++i)
      s += std::string(i ? ":" : "") + g[size_t(i)];
    return s;
  }
  std::string card_digits(bool valid) {
    std::string d = pick(std::vector<std::string>{"4", "51", "37", "6011"});
    const size_t length = d == "37" ? 15 : 16;
    d += digits(int(length - 1 - d.size()));
    for (char check = '0'; check <= '9'; ++check)
      if (luhn_valid(d + check) == valid) return d + check;
    return d;
  }
  std::string card(bool valid = true) {
    const std::string d = card_digits(valid);
    const std::string sep = pick(std::vector<std::string>{" ", "-", ""});
    if (d.size() == 15) return d.substr(0, 4) + sep + d.substr(4, 6) + sep + d.substr(10);
    return d.substr(0, 4) + sep + d.substr(4, 4) + sep + d.substr(8, 4) + sep + d.substr(12);
  }
  std::string iban(bool valid = true) {
    static const std::vector<std::pair<std::string, int>> kCountries = {
        {"DE", 18}, {"FR", 23}, {"NL", 14}, {"ES", 20}, {"IT", 23}, {"GB", 18}};
    const auto& [country, length] = pick(kCountries);
    std::string bban = country == "GB"   ? fmt::format("WEST{}", digits(length - 4))
                       : country == "NL" ? fmt::format("ABNA{}", digits(length - 4))
                                         : digits(length);
    std::string s;
    for (int check = 2; check <= 98; ++check) {
      s = fmt::format("{}{:02}{}", country, check, bban);
      if (iban_valid(s) == valid) break;
    }
    if (below(2) == 0) return s;
    std::string spaced;
    for (size_t i = 0; i < s.size(); i += 4)
      spaced += std::string(i ? " " : "") + s.substr(i, 4);
    return spaced;
  }
  std::string date() {
    static const std::vector<std::string> kMonth = {"January", "March", "May",  "July",
                                                    "October", "Dec.",  "Sept", "February"};
    const int year = 1940 + int(below(70)), month = 1 + int(below(12)), day = 1 + int(below(28));
    switch (below(5)) {
      case 0:
        return fmt::format("{}-{:02}-{:02}", year, month, day);
      case 1:
        return fmt::format("{:02}/{:02}/{}", day, month, year);
      case 2:
        return fmt::format("{}.{}.{}", day, month, year);
      case 3:
        return fmt::format("{} {} {}", day, pick(kMonth), year);
      default:
        return fmt::format("{} {}, {}", pick(kMonth), day, year);
    }
  }
  std::string name() {
    return below(3) == 0 ? pick(kFirst) : fmt::format("{} {}", pick(kFirst), pick(kLast));
  }

  // One line: a few clauses, each with planted data or a look-alike.
  void make_line() {
    line.clear();
    planted.clear();
    const int clauses = 2 + int(below(3));
    for (int c = 0; c < clauses; ++c) {
      if (c) text(pick(std::vector<std::string>{"; ", ". ", ", and ", " - "}));
      switch (below(16)) {
        case 0:
          text("Please write to ");
          plant(PiiKind::kEmail, email());
          break;
        case 1:
          text("call me on ");
          plant(PiiKind::kPhone, phone());
          text(" after six");
          break;
        case 2:
          text("the login came from ");
          plant(PiiKind::kIpv4, ipv4());
          break;
        case 3:
          text("host ");
          plant(PiiKind::kIpv6, ipv6());
          text(" was up");
          break;
        case 4:
          text("card ");
          plant(PiiKind::kCard, card());
          text(" expires soon");
          break;
        case 5:
          text("pay into ");
          plant(PiiKind::kIban, iban());
          break;
        case 6:
          text(pick(std::vector<std::string>{"born on ", "date of birth: ", "DOB ",
                                             "whose birthday is "}));
          plant(PiiKind::kBirthDate, date());
          break;
        case 7:
          plant(PiiKind::kName, name());
          text(" signed the form");
          break;
        // Look-alikes: none of these is personal data.
        case 8:
          text(fmt::format("the meeting moved to {} at 10:30:15", date()));
          break;
        case 9:
          text(fmt::format("reference {} was rejected", card(false)));
          break;
        case 10:
          text(fmt::format("the code {} is not an account", iban(false)));
          break;
        case 11:
          text(fmt::format("version {}.{}.{} costs ${},{:03}.{:02}", below(9), below(20), below(50),
                           1 + below(9), below(1000), below(100)));
          break;
        case 12:
          text(fmt::format("order #{} shipped {} units in {}", digits(8), below(9000),
                           1990 + below(30)));
          break;
        case 13:
          text("follow @tessel_dev or see std::vector and a::b in the docs");
          break;
        case 14:
          text(fmt::format("Dr. Smith measured {}.{} % at 12:30 on day {}", below(100), below(10),
                           below(365)));
          break;
        default:
          text("nothing personal here, just the weather");
          break;
      }
    }
  }

 private:
  static std::string lower(std::string s) {
    for (char& ch : s)
      ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  }
  Pcg32 rng_;
};

std::vector<std::string> name_list() {
  std::vector<std::string> names = kFirst;
  for (const auto& f : kFirst)
    for (const auto& l : kLast)
      names.push_back(f + " " + l);
  return names;
}

TEST(Anonymise, FindsPlantedDataWithHighRecallAndFewFalsePositives) {
  Corpus corpus(2026);
  const std::vector<std::string> names = name_list();
  std::map<PiiKind, int64_t> planted, found_right, wrong;
  int64_t found = 0, right = 0, total_planted = 0;
  std::vector<std::string> misses, false_positives;
  for (int i = 0; i < 4000; ++i) {
    corpus.make_line();
    const std::vector<PiiSpan> spans = find_personal_data(corpus.line, names);
    for (const PiiSpan& p : corpus.planted) {
      ++planted[p.kind];
      ++total_planted;
      if (std::find(spans.begin(), spans.end(), p) != spans.end()) {
        ++found_right[p.kind];
      } else if (misses.size() < 10) {
        misses.push_back(fmt::format("{}: {}", pii_kind_name(p.kind), corpus.line));
      }
    }
    for (const PiiSpan& s : spans) {
      ++found;
      if (std::find(corpus.planted.begin(), corpus.planted.end(), s) != corpus.planted.end()) {
        ++right;
        continue;
      }
      ++wrong[s.kind];
      if (false_positives.size() < 10) {
        false_positives.push_back(std::string(pii_kind_name(s.kind)) + " '" +
                                  corpus.line.substr(s.begin, s.end - s.begin) +
                                  "' in: " + corpus.line);
      }
    }
  }
  const double recall = double(right) / double(total_planted);
  const double false_positive_rate = double(found - right) / double(found);
  std::printf(
      "anonymiser on the generated corpus: %lld planted, %lld found, recall %.4f, "
      "false positives %.4f\n",
      (long long)total_planted, (long long)found, recall, false_positive_rate);
  for (const auto& [kind, n] : planted) {
    std::printf("  %-10s planted %5lld found %5lld false positives %3lld\n", pii_kind_name(kind),
                (long long)n, (long long)found_right[kind], (long long)wrong[kind]);
    EXPECT_GT(n, 100) << "the corpus plants every kind";
  }
  EXPECT_GE(recall, 0.99);
  EXPECT_LE(false_positive_rate, 0.01);
  for (const auto& m : misses)
    std::printf("missed %s\n", m.c_str());
  for (const auto& f : false_positives)
    std::printf("false positive %s\n", f.c_str());
}

TEST(Anonymise, PseudonymsAreStablePerKeyAndDifferAcrossKeys) {
  const SecretKey key = SecretKey::generate(), other = SecretKey::generate();
  const std::string text =
      "Ada Lovelace (ada@example.org, +44 20 7946 0958) and again +442079460958; card "
      "4111 1111 1111 1111, IBAN GB82 WEST 1234 5698 7654 32, born 10 December 1815, host "
      "192.168.1.20";
  Anonymiser first(key, {.names = {"Ada Lovelace"}});
  const std::string a = first.anonymise(text);
  EXPECT_EQ(a.find("ada@"), std::string::npos);
  EXPECT_EQ(a.find("7946"), std::string::npos);
  EXPECT_EQ(a.find("Lovelace"), std::string::npos);
  EXPECT_EQ(first.report().total(), 8);
  EXPECT_EQ(first.report().found[size_t(PiiKind::kPhone)], 2);
  EXPECT_EQ(first.report().to_string(),
            "email 1, phone 2, ipv4 1, card 1, iban 1, birth_date 1, name 1");
  // Both spellings of the phone number became one token.
  const std::string phone = first.pseudonym(PiiKind::kPhone, "+44 20 7946 0958");
  EXPECT_EQ(phone.substr(0, 7), "[PHONE_");
  EXPECT_EQ(phone.size(), 20u);
  size_t at = a.find(phone);
  ASSERT_NE(at, std::string::npos) << a;
  EXPECT_NE(a.find(phone, at + 1), std::string::npos) << a;
  // Another Anonymiser (a later run) with the same key writes the same text; another key does not,
  // and shares no token with it.
  Anonymiser again(key, {.names = {"Ada Lovelace"}});
  EXPECT_EQ(again.anonymise(text), a);
  Anonymiser stranger(other, {.names = {"Ada Lovelace"}});
  const std::string b = stranger.anonymise(text);
  EXPECT_NE(b, a);
  EXPECT_EQ(b.find(phone), std::string::npos);
  EXPECT_NE(first.pseudonym(PiiKind::kEmail, "ada@example.org"),
            first.pseudonym(PiiKind::kName, "ada@example.org"));  // the kind is in the MAC
  EXPECT_EQ(first.pseudonym(PiiKind::kEmail, "Ada@Example.org"),
            first.pseudonym(PiiKind::kEmail, "ada@example.org"));
}

TEST(Anonymise, ChecksAgainstPublishedExamples) {
  EXPECT_TRUE(luhn_valid("79927398713"));  // the example in ISO/IEC 7812's descriptions
  EXPECT_FALSE(luhn_valid("79927398710"));
  EXPECT_TRUE(luhn_valid("4111111111111111"));
  EXPECT_TRUE(iban_valid("GB82WEST12345698765432"));  // ISO 13616 / ECBS examples
  EXPECT_TRUE(iban_valid("DE89370400440532013000"));
  EXPECT_FALSE(iban_valid("GB83WEST12345698765432"));
  EXPECT_FALSE(iban_valid("GB82WEST1234569876543"));
}

}  // namespace
}  // namespace tessel::secure
