// Config: key-path lookup in a toml++ table, typed conversion, and the messages for each mistake.
#include "support/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <type_traits>

#include "support/atomic_file.h"

namespace tessel {

struct Config::Document {
  toml::table root;
  std::string source;
};

namespace {

const char* type_phrase(toml::node_type type) {
  switch (type) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

// "file:line:col" of a node, or just the file when toml++ has no position for it.
std::string where(const std::string& source, const toml::source_region& region) {
  if (region.begin.line == 0) return source;
  return fmt::format("{}:{}:{}", source, region.begin.line, region.begin.column);
}

// The value itself, for scalars, so the message shows what the user wrote.
std::string shown_value(const toml::node& node) {
  if (const auto* s = node.as_string()) return fmt::format(" (\"{}\")", s->get());
  if (const auto* i = node.as_integer()) return fmt::format(" ({})", i->get());
  if (const auto* f = node.as_floating_point()) return fmt::format(" ({})", f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? " (true)" : " (false)";
  return "";
}

Status wrong_type(const std::string& source, const toml::node& node, const std::string& key,
                  const char* expected) {
  return invalid_argument("{}: key '{}': expected {}, got {}{}", where(source, node.source()), key,
                          expected, type_phrase(node.type()), shown_value(node));
}

template <typename T>
struct Expectation;
template <>
struct Expectation<bool> {
  static constexpr const char* text = "true or false";
  static constexpr const char* array = "an array of booleans";
};
template <>
struct Expectation<int64_t> {
  static constexpr const char* text = "an integer";
  static constexpr const char* array = "an array of integers";
};
template <>
struct Expectation<double> {
  static constexpr const char* text = "a number";
  static constexpr const char* array = "an array of numbers";
};
template <>
struct Expectation<std::string> {
  static constexpr const char* text = "a string";
  static constexpr const char* array = "an array of strings";
};

template <typename T>
Expected<T> convert_scalar(const std::string& source, const toml::node& node,
                           const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) {
    if (const auto* b = node.as_boolean()) return b->get();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (const auto* i = node.as_integer()) return i->get();
  } else if constexpr (std::is_same_v<T, double>) {
    if (const auto* f = node.as_floating_point()) return f->get();
    if (const auto* i = node.as_integer()) return static_cast<double>(i->get());
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (const auto* s = node.as_string()) return s->get();
  }
  return wrong_type(source, node, key, Expectation<T>::text);
}

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

template <typename T>
Expected<T> convert(const std::string& source, const toml::node& node, const std::string& key) {
  if constexpr (IsVector<T>::value) {
    using Element = typename T::value_type;
    const auto* array = node.as_array();
    if (array == nullptr) return wrong_type(source, node, key, Expectation<Element>::array);
    T out;
    for (size_t i = 0; i < array->size(); ++i) {
      TESSEL_ASSIGN_OR_RETURN(Element e, convert_scalar<Element>(source, *array->get(i),
                                                                 fmt::format("{}[{}]", key, i)));
      out.push_back(std::move(e));
    }
    return out;
  } else {
    return convert_scalar<T>(source, node, key);
  }
}

// The node at a dotted key under `root`; nullptr when some part is missing. A part that exists
// but is not a table is an error (the user wrote `optimizer = 3` and we look for optimizer.lr).
Expected<const toml::node*> find(const toml::table& root, const std::string& source,
                                 const std::string& key) {
  const toml::node* node = &root;
  if (key.empty()) return node;
  std::string walked;
  size_t start = 0;
  while (start <= key.size()) {
    const size_t dot = std::min(key.find('.', start), key.size());
    const std::string part = key.substr(start, dot - start);
    const auto* table = node->as_table();
    if (table == nullptr) {
      return invalid_argument("{}: key '{}': '{}' is {}, not a table",
                              where(source, node->source()), key, walked,
                              type_phrase(node->type()));
    }
    node = table->get(part);
    if (node == nullptr) return static_cast<const toml::node*>(nullptr);
    walked += (walked.empty() ? "" : ".") + part;
    start = dot + 1;
  }
  return node;
}

// The table a Config stands for: one is only ever made for a path that holds a table (the root,
// or through table()).
const toml::table& table_at(const Config::Document& doc, const std::string& path) {
  Expected<const toml::node*> node = find(doc.root, doc.source, path);
  TESSEL_CHECK(node.ok() && *node != nullptr && (*node)->is_table(), "config path '{}'", path);
  return *(*node)->as_table();
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

Expected<Config> Config::load(const std::string& path) {
  Expected<std::string> text = read_file(path);
  if (!text) return text.status().with_context("config");
  return parse(*text, path);
}

Expected<Config> Config::parse(std::string_view text, std::string source) {
  auto doc = std::make_shared<Document>();
  doc->source = std::move(source);
  try {
    doc->root = toml::parse(text, doc->source);
  } catch (const toml::parse_error& e) {
    return invalid_argument("{}: {}", where(doc->source, e.source()), e.description());
  }
  return Config(std::move(doc), "");
}

const std::string& Config::source() const {
  return doc_->source;
}

std::string Config::full_key(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool Config::has(std::string_view key) const {
  Expected<const toml::node*> node = find(doc_->root, doc_->source, full_key(key));
  return node.ok() && *node != nullptr;
}

template <typename T>
Expected<T> Config::get(std::string_view key) const {
  const std::string full = full_key(key);
  TESSEL_ASSIGN_OR_RETURN(const toml::node* node, find(doc_->root, doc_->source, full));
  if (node == nullptr) return not_found("{}: missing key '{}'", doc_->source, full);
  return convert<T>(doc_->source, *node, full);
}

template <typename T>
Expected<T> Config::get_or(std::string_view key, T fallback) const {
  const std::string full = full_key(key);
  TESSEL_ASSIGN_OR_RETURN(const toml::node* node, find(doc_->root, doc_->source, full));
  if (node == nullptr) return fallback;
  return convert<T>(doc_->source, *node, full);
}

Expected<Config> Config::table(std::string_view key) const {
  const std::string full = full_key(key);
  TESSEL_ASSIGN_OR_RETURN(const toml::node* node, find(doc_->root, doc_->source, full));
  if (node == nullptr) return not_found("{}: missing table [{}]", doc_->source, full);
  if (!node->is_table()) return wrong_type(doc_->source, *node, full, "a table");
  return Config(doc_, full);
}

std::vector<std::string> Config::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : table_at(*doc_, path_))
    out.emplace_back(k.str());
  return out;
}

Status Config::check_keys(const std::vector<std::string>& allowed) const {
  for (const auto& [k, v] : table_at(*doc_, path_)) {
    const std::string_view name = k.str();
    if (std::find(allowed.begin(), allowed.end(), name) != allowed.end()) continue;
    // Suggest the closest allowed key when it is a plausible typo.
    std::string suggestion;
    size_t best = std::max<size_t>(2, name.size() / 3) + 1;
    for (const std::string& a : allowed) {
      const size_t d = edit_distance(name, a);
      if (d < best) {
        best = d;
        suggestion = a;
      }
    }
    std::string allowed_list;
    for (const std::string& a : allowed)
      allowed_list += (allowed_list.empty() ? "" : ", ") + a;
    return invalid_argument(
        "{}: unknown key '{}'{}; allowed in {}: {}", where(doc_->source, k.source()),
        full_key(name), suggestion.empty() ? "" : fmt::format(" (did you mean '{}'?)", suggestion),
        path_.empty() ? std::string("the top level") : "[" + path_ + "]",
        allowed_list.empty() ? "none" : allowed_list);
  }
  return ok_status();
}

#define TESSEL_INSTANTIATE_CONFIG_GETTERS(T)                       \
  template Expected<T> Config::get<T>(std::string_view key) const; \
  template Expected<T> Config::get_or<T>(std::string_view key, T fallback) const;
TESSEL_INSTANTIATE_CONFIG_GETTERS(bool)
TESSEL_INSTANTIATE_CONFIG_GETTERS(int64_t)
TESSEL_INSTANTIATE_CONFIG_GETTERS(double)
TESSEL_INSTANTIATE_CONFIG_GETTERS(std::string)
TESSEL_INSTANTIATE_CONFIG_GETTERS(std::vector<int64_t>)
TESSEL_INSTANTIATE_CONFIG_GETTERS(std::vector<double>)
TESSEL_INSTANTIATE_CONFIG_GETTERS(std::vector<std::string>)
#undef TESSEL_INSTANTIATE_CONFIG_GETTERS

}  // namespace tessel
