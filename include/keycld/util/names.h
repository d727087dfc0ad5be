// One name table per enum: parsing, the name of a value, the list of names for error texts and
// for the CLI's choices (CLI::IsMember(Names<E>())) all read the same table. An enum opts in by
// specialising NameTable<E> next to its definition:
//   template <> struct NameTable<EnvName> {
//     static constexpr const char* kWhat = "environment";
//     static constexpr std::pair<EnvName, const char*> kEntries[] = {{EnvName::kPendulum, …}, …};
//   };
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "keycld/util/error.h"

namespace keycld {

template <typename E>
struct NameTable;  // specialised per enum: kWhat, kEntries

/// "a", "a or b", "a, b or c".
inline std::string JoinAlternatives(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    s += (i == 0 ? "" : (i + 1 == names.size() ? " or " : ", ")) + names[i];
  }
  return s;
}

/// Every name of E, in table order.
template <typename E>
std::vector<std::string> Names() {
  std::vector<std::string> out;
  for (const auto& [value, name] : NameTable<E>::kEntries) out.push_back(name);
  return out;
}

/// The value called `name`; InputError "unknown <what> 'name' (expected a, b or c)" otherwise.
template <typename E>
E ParseName(const std::string& name) {
  for (const auto& [value, n] : NameTable<E>::kEntries) {
    if (name == n) return value;
  }
  throw InputError(std::string("unknown ") + NameTable<E>::kWhat + " '" + name + "' (expected " +
                   JoinAlternatives(Names<E>()) + ")");
}

/// The name of `value` ("?" for a value missing from the table).
template <typename E>
std::string NameOf(E value) {
  for (const auto& [v, n] : NameTable<E>::kEntries) {
    if (v == value) return n;
  }
  return "?";
}

}  // namespace keycld
