// Personal-data finders and keyed pseudonyms (see anonymise.h). Each finder scans the text once
// with hand-written rules (std::regex is slow on corpora); the spans are then resolved by
// precedence.
#include "secure/anonymise.h"

#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include "support/atomic_file.h"

namespace tessel::secure {
namespace {

bool digit(char c) {
  return c >= '0' && c <= '9';
}
bool alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool upper(char c) {
  return c >= 'A' && c <= 'Z';
}
bool alnum(char c) {
  return digit(c) || alpha(c);
}
bool hex(char c) {
  return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
char lower(char c) {
  return char(std::tolower(static_cast<unsigned char>(c)));
}

struct Text {
  std::string_view s;
  char at(size_t i) const { return i < s.size() ? s[i] : '\0'; }
  char before(size_t i) const { return i > 0 ? s[i - 1] : '\0'; }
};

// ---- email

void find_emails(Text t, std::vector<PiiSpan>& out) {
  const auto local = [](char c) {
    return alnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
  };
  for (size_t at = t.s.find('@'); at != std::string_view::npos; at = t.s.find('@', at + 1)) {
    size_t begin = at;
    while (begin > 0 && local(t.s[begin - 1]))
      --begin;
    while (begin < at && t.s[begin] == '.')
      ++begin;
    if (begin == at || t.s[at - 1] == '.') continue;
    size_t end = at + 1;
    while (end < t.s.size() && (alnum(t.s[end]) || t.s[end] == '-' || t.s[end] == '.'))
      ++end;
    while (end > at + 1 && (t.s[end - 1] == '.' || t.s[end - 1] == '-'))
      --end;
    const std::string_view domain = t.s.substr(at + 1, end - at - 1);
    const size_t dot = domain.rfind('.');
    if (dot == std::string_view::npos || domain.find("..") != std::string_view::npos ||
        domain.front() == '.' || domain.front() == '-')
      continue;
    const std::string_view tld = domain.substr(dot + 1);
    if (tld.size() < 2 || !std::all_of(tld.begin(), tld.end(), alpha)) continue;
    out.push_back({PiiKind::kEmail, begin, end});
  }
}

// ---- IP addresses

void find_ipv4(Text t, std::vector<PiiSpan>& out) {
  for (size_t i = 0; i < t.s.size(); ++i) {
    if (!digit(t.s[i]) || alnum(t.before(i)) || t.before(i) == '.') continue;
    size_t p = i;
    bool ok = true;
    for (int octet = 0; octet < 4 && ok; ++octet) {
      if (octet > 0) {
        if (t.at(p) != '.') ok = false;
        ++p;
      }
      size_t q = p;
      int value = 0;
      while (q < t.s.size() && digit(t.s[q]) && q - p < 4)
        value = value * 10 + (t.s[q++] - '0');
      if (q == p || q - p > 3 || value > 255 || (q - p > 1 && t.s[p] == '0')) ok = false;
      p = q;
    }
    if (!ok || alnum(t.at(p)) || (t.at(p) == '.' && digit(t.at(p + 1)))) continue;
    out.push_back({PiiKind::kIpv4, i, p});
    i = p;
  }
}

bool ipv6_valid(std::string_view a) {
  const size_t gap = a.find("::");
  if (gap != std::string_view::npos && a.find("::", gap + 1) != std::string_view::npos)
    return false;
  int groups = 0;
  const auto count = [&](std::string_view part) {
    if (part.empty()) return true;
    size_t start = 0;
    while (true) {
      const size_t colon = part.find(':', start);
      const std::string_view g = part.substr(start, colon - start);
      if (g.empty() || g.size() > 4 || !std::all_of(g.begin(), g.end(), hex)) return false;
      ++groups;
      if (colon == std::string_view::npos) return true;
      start = colon + 1;
    }
  };
  if (gap == std::string_view::npos) return count(a) && groups == 8;
  // A compressed address with fewer than four hex digits ("a::b", "std::x") is far more often
  // code than an address.
  const auto digits = std::count_if(a.begin(), a.end(), hex);
  return count(a.substr(0, gap)) && count(a.substr(gap + 2)) && groups <= 7 && digits >= 4;
}

void find_ipv6(Text t, std::vector<PiiSpan>& out) {
  for (size_t i = 0; i < t.s.size(); ++i) {
    const char c = t.s[i];
    if (!(hex(c) || c == ':') || alnum(t.before(i)) || t.before(i) == ':') continue;
    size_t end = i;
    int colons = 0;
    while (end < t.s.size() && (hex(t.s[end]) || t.s[end] == ':'))
      colons += t.s[end++] == ':';
    if (colons < 2 || alnum(t.at(end))) {
      i = end;
      continue;
    }
    // A single trailing colon is punctuation ("at 2001:db8::1: it failed").
    if (t.s[end - 1] == ':' && t.s[end - 2] != ':') --end;
    if (ipv6_valid(t.s.substr(i, end - i))) out.push_back({PiiKind::kIpv6, i, end});
    i = end;
  }
}

// Whether position i continues a longer code written in spaced groups ("DE02 0138 9012 ..."): the
// character before is a space or hyphen preceded by a digit or a capital letter. Numbers inside
// such codes are not cards or phone numbers by themselves.
bool continues_code(Text t, size_t i) {
  if (i < 2 || (t.s[i - 1] != ' ' && t.s[i - 1] != '-')) return false;
  return digit(t.s[i - 2]) || upper(t.s[i - 2]);
}

// ---- digit groups: payment cards and IBANs

// Group ends (position after the group, count of characters so far) of a run of groups of
// `member` characters separated by single `separator`s.
template <typename Member, typename Separator>
std::vector<std::pair<size_t, size_t>> group_ends(Text t, size_t begin, Member member,
                                                  Separator separator, size_t max_chars) {
  std::vector<std::pair<size_t, size_t>> ends;
  size_t p = begin, chars = 0;
  while (true) {
    while (p < t.s.size() && member(t.s[p]) && chars <= max_chars) {
      ++p;
      ++chars;
    }
    if (chars > max_chars) break;
    ends.emplace_back(p, chars);
    if (!separator(t.at(p)) || !member(t.at(p + 1))) break;
    ++p;
  }
  return ends;
}

std::string compact(std::string_view s, bool (*keep)(char)) {
  std::string out;
  for (char c : s)
    if (keep(c)) out += c;
  return out;
}

void find_cards(Text t, std::vector<PiiSpan>& out) {
  for (size_t i = 0; i < t.s.size(); ++i) {
    if (!digit(t.s[i]) || alnum(t.before(i)) || continues_code(t, i)) continue;
    const auto ends = group_ends(
        t, i, digit, [](char c) { return c == ' ' || c == '-'; }, 19);
    size_t skip_to = ends.back().first;
    for (auto it = ends.rbegin(); it != ends.rend(); ++it) {
      if (it->second < 13 || it->second > 19 || alnum(t.at(it->first))) continue;
      if (luhn_valid(compact(t.s.substr(i, it->first - i), digit))) {
        out.push_back({PiiKind::kCard, i, it->first});
        skip_to = it->first;
        break;
      }
    }
    i = skip_to;
  }
}

void find_ibans(Text t, std::vector<PiiSpan>& out) {
  const auto member = [](char c) { return upper(c) || digit(c); };
  for (size_t i = 0; i + 4 <= t.s.size(); ++i) {
    if (!upper(t.s[i]) || !upper(t.s[i + 1]) || !digit(t.s[i + 2]) || !digit(t.s[i + 3]) ||
        alnum(t.before(i)))
      continue;
    const auto ends = group_ends(
        t, i, member, [](char c) { return c == ' '; }, 34);
    for (auto it = ends.rbegin(); it != ends.rend(); ++it) {
      if (it->second < 15 || it->second > 34 || alnum(t.at(it->first))) continue;
      if (iban_valid(compact(t.s.substr(i, it->first - i), [](char c) { return c != ' '; }))) {
        out.push_back({PiiKind::kIban, i, it->first});
        i = it->first;
        break;
      }
    }
  }
}

// ---- dates of birth

constexpr const char* kMonths[] = {"january",   "february", "march",    "april",
                                   "may",       "june",     "july",     "august",
                                   "september", "october",  "november", "december"};

// A month name (full, or its first three letters with an optional '.') at p: its number and end.
std::pair<int, size_t> month_at(Text t, size_t p) {
  size_t end = p;
  while (end < t.s.size() && alpha(t.s[end]))
    ++end;
  std::string word;
  for (size_t k = p; k < end; ++k)
    word += lower(t.s[k]);
  for (int m = 0; m < 12; ++m) {
    const std::string_view full = kMonths[m];
    if (word == full) return {m + 1, end};
    if (word == full.substr(0, 3) || (m == 8 && word == "sept"))
      return {m + 1, t.at(end) == '.' ? end + 1 : end};
  }
  return {0, p};
}

// Digits at p (at most `most`): value and end; end == p when none.
std::pair<int, size_t> number_at(Text t, size_t p, size_t most) {
  int value = 0;
  size_t q = p;
  while (q < t.s.size() && digit(t.s[q]) && q - p < most)
    value = value * 10 + (t.s[q++] - '0');
  if (digit(t.at(q))) return {0, p};
  return {value, q};
}

bool valid_day(int month, int day) {
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month >= 1 && month <= 12 && day >= 1 && day <= kDays[month - 1];
}
bool valid_year(int year) {
  return year >= 1800 && year <= 2100;
}

// The end of a date starting at p, or p when none does.
size_t date_at(Text t, size_t p) {
  const auto [first, a] = number_at(t, p, 4);
  if (a > p) {
    const char sep = t.at(a);
    if (a - p == 4 && (sep == '-' || sep == '/')) {  // 1990-03-01
      const auto [month, b] = number_at(t, a + 1, 2);
      if (b == a + 1 || t.at(b) != sep) return p;
      const auto [day, c] = number_at(t, b + 1, 2);
      return c > b + 1 && valid_year(first) && valid_day(month, day) ? c : p;
    }
    if (a - p <= 2 && (sep == '/' || sep == '.' || sep == '-')) {  // 01/03/1990, 03/01/1990
      const auto [second, b] = number_at(t, a + 1, 2);
      if (b == a + 1 || t.at(b) != sep) return p;
      const auto [year, c] = number_at(t, b + 1, 4);
      const bool ok =
          c == b + 5 && valid_year(year) && (valid_day(second, first) || valid_day(first, second));
      return ok ? c : p;
    }
    if (a - p <= 2 && sep == ' ') {  // 1 March 1990
      const auto [month, b] = month_at(t, a + 1);
      if (month == 0 || t.at(b) != ' ') return p;
      const auto [year, c] = number_at(t, b + 1, 4);
      return c == b + 5 && valid_year(year) && valid_day(month, first) ? c : p;
    }
    return p;
  }
  const auto [month, b] = month_at(t, p);  // March 1, 1990
  if (month == 0 || t.at(b) != ' ') return p;
  const auto [day, c] = number_at(t, b + 1, 2);
  if (c == b + 1) return p;
  size_t d = c;
  if (t.at(d) == ',') ++d;
  if (t.at(d) != ' ') return p;
  const auto [year, e] = number_at(t, d + 1, 4);
  return e == d + 5 && valid_year(year) && valid_day(month, day) ? e : p;
}

bool has_birth_cue(std::string_view window) {
  std::string w;
  for (char c : window)
    w += lower(c);
  for (const char* cue : {"born", "birth", "dob", "d.o.b"})
    if (w.find(cue) != std::string::npos) return true;
  return false;
}

void find_birth_dates(Text t, std::vector<PiiSpan>& out) {
  size_t previous_end = 0;
  for (size_t i = 0; i < t.s.size(); ++i) {
    if (!(digit(t.s[i]) || alpha(t.s[i])) || alnum(t.before(i))) continue;
    const size_t end = date_at(t, i);
    if (end == i || alnum(t.at(end))) continue;
    // The cue must come after the previous date: "born 1 May 1990, married 2 June 2015".
    const size_t from = std::max(previous_end, i >= 40 ? i - 40 : size_t(0));
    if (has_birth_cue(t.s.substr(from, i - from))) out.push_back({PiiKind::kBirthDate, i, end});
    previous_end = end;
    i = end;
  }
}

// ---- phone numbers

void find_phones(Text t, std::vector<PiiSpan>& out) {
  const auto sep = [](char c) { return c == ' ' || c == '-' || c == '.' || c == '(' || c == ')'; };
  for (size_t i = 0; i < t.s.size(); ++i) {
    const char c = t.s[i];
    const bool plus = c == '+' && digit(t.at(i + 1));
    const bool paren = c == '(' && digit(t.at(i + 1));
    if (!(plus || paren || digit(c)) || alnum(t.before(i)) || digit(t.before(i)) ||
        t.before(i) == '+' || t.before(i) == '.' || t.before(i) == '-' || continues_code(t, i))
      continue;
    size_t p = i + (plus || paren ? 1 : 0), end = p, digits = 0, separators = 0;
    bool parentheses = paren;
    while (p < t.s.size()) {
      if (digit(t.s[p])) {
        ++digits;
        end = ++p;
        continue;
      }
      size_t run = 0;
      while (p + run < t.s.size() && sep(t.s[p + run]) && run < 3)
        ++run;
      if (run == 0 || run > 2 || !(digit(t.at(p + run)) || t.at(p + run) == '(')) break;
      for (size_t k = p; k < p + run; ++k)
        parentheses |= t.s[k] == '(';
      ++separators;
      p += run;
    }
    if (paren && t.s.substr(i, end - i).find(')') == std::string_view::npos) continue;
    if (alnum(t.at(end))) continue;
    const bool international = plus && digits >= 8 && digits <= 15;
    const bool national = !plus && digits >= 10 && digits <= 11 && (separators > 0 || parentheses);
    if (international || national) {
      out.push_back({PiiKind::kPhone, i, end});
      i = end;
    }
  }
}

// ---- names

void find_names(Text t, const std::vector<std::string>& names, std::vector<PiiSpan>& out) {
  for (const std::string& name : names) {
    if (name.empty()) continue;
    for (size_t at = t.s.find(name); at != std::string_view::npos; at = t.s.find(name, at + 1)) {
      const size_t end = at + name.size();
      if (!alnum(t.before(at)) && !alnum(t.at(end))) out.push_back({PiiKind::kName, at, end});
    }
  }
}

std::string normalise(PiiKind kind, std::string_view value) {
  std::string out;
  for (char c : value) {
    switch (kind) {
      case PiiKind::kEmail:
      case PiiKind::kIpv6:
        out += lower(c);
        break;
      case PiiKind::kPhone:
        if (digit(c) || c == '+') out += c;
        break;
      case PiiKind::kCard:
        if (digit(c)) out += c;
        break;
      case PiiKind::kIban:
        if (c != ' ') out += c;
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

const char* pii_kind_name(PiiKind kind) {
  static constexpr const char* kNames[kPiiKinds] = {"email", "phone", "ipv4",       "ipv6",
                                                    "card",  "iban",  "birth_date", "name"};
  return kNames[int(kind)];
}

bool luhn_valid(std::string_view digits) {
  if (digits.empty()) return false;
  int sum = 0;
  bool twice = false;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (!digit(*it)) return false;
    int d = *it - '0';
    if (twice && (d *= 2) > 9) d -= 9;
    sum += d;
    twice = !twice;
  }
  return sum % 10 == 0;
}

namespace {

// IBAN lengths of the registry's (ISO 13616, SWIFT) most used countries; others may be 15-34.
int iban_length(std::string_view country) {
  static constexpr std::pair<const char*, int> kLengths[] = {
      {"AT", 20}, {"BE", 16}, {"BG", 22}, {"CH", 21}, {"CY", 28}, {"CZ", 24}, {"DE", 22},
      {"DK", 18}, {"EE", 20}, {"ES", 24}, {"FI", 18}, {"FR", 27}, {"GB", 22}, {"GR", 27},
      {"HR", 21}, {"HU", 28}, {"IE", 22}, {"IS", 26}, {"IT", 27}, {"LT", 20}, {"LU", 20},
      {"LV", 21}, {"MT", 31}, {"NL", 18}, {"NO", 15}, {"PL", 28}, {"PT", 25}, {"RO", 24},
      {"SE", 24}, {"SI", 19}, {"SK", 24}, {"TR", 26}};
  for (const auto& [code, length] : kLengths)
    if (country == code) return length;
  return 0;
}

}  // namespace

bool iban_valid(std::string_view iban) {
  if (iban.size() < 15 || iban.size() > 34 || !upper(iban[0]) || !upper(iban[1]) ||
      !digit(iban[2]) || !digit(iban[3]))
    return false;
  const int length = iban_length(iban.substr(0, 2));
  if (length != 0 && int(iban.size()) != length) return false;
  int remainder = 0;
  for (size_t k = 0; k < iban.size(); ++k) {
    const char c = iban[(k + 4) % iban.size()];  // the first four characters go to the end
    if (digit(c)) {
      remainder = (remainder * 10 + (c - '0')) % 97;
    } else if (upper(c)) {
      remainder = (remainder * 100 + (c - 'A' + 10)) % 97;
    } else {
      return false;
    }
  }
  return remainder == 1;
}

std::vector<PiiSpan> find_personal_data(std::string_view text,
                                        const std::vector<std::string>& names) {
  const Text t{text};
  std::vector<PiiSpan> candidates;
  // In order of precedence: an earlier finder's span wins an overlap.
  find_emails(t, candidates);
  find_ibans(t, candidates);
  find_cards(t, candidates);
  find_ipv6(t, candidates);
  find_ipv4(t, candidates);
  find_birth_dates(t, candidates);
  find_phones(t, candidates);
  std::vector<std::string> longest_first = names;
  std::stable_sort(longest_first.begin(), longest_first.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  find_names(t, longest_first, candidates);

  std::vector<char> taken(text.size(), 0);
  std::vector<PiiSpan> found;
  for (const PiiSpan& span : candidates) {
    if (std::any_of(taken.begin() + long(span.begin), taken.begin() + long(span.end),
                    [](char c) { return c != 0; }))
      continue;
    std::fill(taken.begin() + long(span.begin), taken.begin() + long(span.end), 1);
    found.push_back(span);
  }
  std::sort(found.begin(), found.end(),
            [](const PiiSpan& a, const PiiSpan& b) { return a.begin < b.begin; });
  return found;
}

int64_t AnonymiseReport::total() const {
  int64_t sum = 0;
  for (int64_t n : found)
    sum += n;
  return sum;
}

std::string AnonymiseReport::to_string() const {
  std::string out;
  for (int k = 0; k < kPiiKinds; ++k)
    if (found[size_t(k)] > 0)
      out += fmt::format("{}{} {}", out.empty() ? "" : ", ", pii_kind_name(PiiKind(k)),
                         found[size_t(k)]);
  return out.empty() ? "nothing" : out;
}

Anonymiser::Anonymiser(const SecretKey& key, AnonymiseOptions options)
    : key_(key), options_(std::move(options)) {}

std::string Anonymiser::pseudonym(PiiKind kind, std::string_view value) const {
  const std::string normal = normalise(kind, value);
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, key_.data(), SecretKey::kBytes);
  const char* name = pii_kind_name(kind);
  crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(name),
                                std::string_view(name).size() + 1);  // with its '\0'
  crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(normal.data()),
                                normal.size());
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_final(&state, mac);
  char hex_text[13];
  sodium_bin2hex(hex_text, sizeof hex_text, mac, 6);
  std::string upper_name = name;
  for (char& c : upper_name)
    c = char(std::toupper(static_cast<unsigned char>(c)));
  return "[" + upper_name + "_" + hex_text + "]";
}

std::string Anonymiser::anonymise(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t at = 0;
  for (const PiiSpan& span : find_personal_data(text, options_.names)) {
    out.append(text.substr(at, span.begin - at));
    out += pseudonym(span.kind, text.substr(span.begin, span.end - span.begin));
    ++report_.found[size_t(span.kind)];
    at = span.end;
  }
  out.append(text.substr(at));
  return out;
}

Expected<AnonymiseReport> anonymise_file(const std::string& in, const std::string& out,
                                         const SecretKey& key, const AnonymiseOptions& options) {
  std::ifstream input(in, std::ios::binary);
  if (!input) return not_found("anonymise: cannot open {}", in);
  TESSEL_ASSIGN_OR_RETURN(AtomicFileWriter output, AtomicFileWriter::open(out));
  Anonymiser anonymiser(key, options);
  for (std::string line; std::getline(input, line);) {
    std::string clean = anonymiser.anonymise(line);
    if (!input.eof()) clean += '\n';  // the line had one
    TESSEL_TRY(output.write(clean));
  }
  if (input.bad()) return io_error("anonymise: reading {} failed", in);
  TESSEL_TRY(output.commit());
  return anonymiser.report();
}

Expected<std::vector<std::string>> read_name_list(const std::string& path) {
  std::ifstream input(path);
  if (!input) return not_found("name list {} cannot be opened", path);
  std::vector<std::string> names;
  for (std::string line; std::getline(input, line);) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
      line.pop_back();
    size_t start = 0;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start])))
      ++start;
    line = line.substr(start);
    if (!line.empty() && line[0] != '#') names.push_back(line);
  }
  return names;
}

}  // namespace tessel::secure
