// The registry of context-parallel schemes (cp_scheme.h). A new scheme is one line here and its
// algorithm file's CpScheme.
#include "parallel/cp_scheme.h"

#include "core/error.h"

namespace ringside {

// Each defined at the end of its algorithm file.
const CpScheme& ring_cp_scheme();        // ring_attention.cpp
const CpScheme& all_gather_cp_scheme();  // allgather_attention.cpp
const CpScheme& ulysses_cp_scheme();     // ulysses_attention.cpp
const CpScheme& ulysses_ring_cp_scheme();  // ulysses_attention.cpp
const CpScheme& ring_q_cp_scheme();      // ring_q_attention.cpp

const std::vector<const CpScheme*>& cp_schemes() {
  static const std::vector<const CpScheme*> all = {&no_cp_scheme(), &ring_cp_scheme(), &all_gather_cp_scheme(),
                                                   &ulysses_cp_scheme(), &ulysses_ring_cp_scheme(), &ring_q_cp_scheme()};
  return all;
}

int cp_scheme_index(const CpScheme& scheme) {
  const std::vector<const CpScheme*>& all = cp_schemes();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == &scheme) return int(i);
  throw Error(std::string("the scheme ") + scheme.name + " is not registered (cp_schemes)");
}

const CpScheme& default_cp_scheme() { return ring_cp_scheme(); }

namespace {

// A name as configuration names spell it: all-gather for all_gather.
std::string dashed(std::string name) {
  for (char& ch : name) ch = ch == '_' ? '-' : ch;
  return name;
}

// The scheme called `name` (its --cp-comm name, TransformerEngine's, or the dashed form), or null.
const CpScheme* find_cp_scheme(const std::string& name) {
  for (const CpScheme* s : cp_schemes())
    if (name == s->name || name == dashed(s->name) || (*s->te_name && name == s->te_name)) return s;
  return nullptr;
}

}  // namespace

std::vector<std::string> cp_comm_names() {
  std::vector<std::string> names;
  for (const CpScheme* s : cp_schemes()) {
    if (s->none()) continue;
    names.push_back(s->name);
    if (dashed(s->name) != s->name) names.push_back(dashed(s->name));  // all-gather too
  }
  return names;
}

std::string cp_comm_choices(bool with_none) {
  std::vector<std::string> shown;
  for (const CpScheme* s : cp_schemes())
    if (with_none || !s->none()) shown.push_back(s->name);
  std::string out;
  for (size_t i = 0; i < shown.size(); ++i) out += (i == 0 ? "" : i + 1 == shown.size() ? " or " : ", ") + shown[i];
  return out;
}

std::vector<const CpScheme*> cp_schemes_named(const std::string& list) {
  std::vector<const CpScheme*> named;
  if (list.empty()) return named;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = list.find(',', at);
    const std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty()) throw ConfigError("--cp-comm '" + detail::shown_input(list, 48) + "': an empty item (" + cp_comm_choices() + ", or all)");
    if (item == "all") {
      for (const CpScheme* s : cp_schemes())
        if (!s->none()) named.push_back(s);
    } else {
      const CpScheme* s = find_cp_scheme(item);
      if (!s) throw ConfigError("unknown --cp-comm '" + detail::shown_input(item, 24) + "' (" + cp_comm_choices() + ", or all)");
      if (s->none()) throw ConfigError("--cp-comm none: plan weighs TP alone wherever C = 1; name schemes of context parallelism");
      named.push_back(s);
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return named;
}

const CpScheme& cp_scheme(const std::string& name) {
  if (const CpScheme* s = find_cp_scheme(name)) return *s;
  throw ConfigError("unknown --cp-comm '" + detail::shown_input(name, 24) + "' (" + cp_comm_choices() + ")");
}

}  // namespace ringside
