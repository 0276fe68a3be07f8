#pragma once
// Internal to lib/config: builds KeySpec entries from a field accessor, deducing the key's type,
// nullability and choices from the C++ field type, so a key is declared in one line.

#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/enums.hpp"
#include "config/key_table.hpp"

namespace dyncp::config::detail {

// Sizes are bounded well below int64 so products of two sizes never overflow.
inline constexpr std::int64_t max_size = std::numeric_limits<std::int32_t>::max();

// Job sizes far past any real run, refused by the loader (exit 2, naming the key and the
// limit) before anything is drawn: a global batch's ids, lengths and schedule are built every
// step and by --dry-run (2^31 samples took minutes and 20 GB), a mock dataset's epoch
// permutation holds 8 bytes a sample and is drawn sample by sample, and a sequence's tokens
// size the activation arenas.
inline constexpr std::int64_t max_global_batch_size = std::int64_t{1} << 20;
inline constexpr std::int64_t max_mock_samples = std::int64_t{1} << 24;
inline constexpr std::int64_t max_sequence_tokens = std::int64_t{1} << 24;

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {
  using inner = T;
};

template <typename T>
struct IsEnumVector : std::false_type {};
template <typename E>
requires std::is_enum_v<E>
struct IsEnumVector<std::vector<E>> : std::true_type {
  using inner = E;
};

template <typename T>
std::vector<std::string> enum_choices() {
  std::vector<std::string> out;
  for (const auto name : EnumTraits<T>::names) out.emplace_back(name);
  return out;
}

// Fill type, nullability and choices for a field of type T.
template <typename T>
void describe_type(KeySpec& spec) {
  if constexpr (IsOptional<T>::value) {
    spec.nullable = true;
    describe_type<typename IsOptional<T>::inner>(spec);
  } else if constexpr (std::is_same_v<T, bool>) {
    spec.type = KeyType::boolean;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    spec.type = KeyType::integer;
  } else if constexpr (std::is_same_v<T, double>) {
    spec.type = KeyType::number;
  } else if constexpr (std::is_same_v<T, std::string>) {
    spec.type = KeyType::string;
  } else if constexpr (std::is_enum_v<T>) {
    spec.type = KeyType::choice;
    spec.choices = enum_choices<T>();
  } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
    spec.type = KeyType::integer_list;
  } else if constexpr (IsEnumVector<T>::value) {
    spec.type = KeyType::choice_list;
    spec.choices = enum_choices<typename IsEnumVector<T>::inner>();
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    spec.type = KeyType::choice_list;  // free strings: no choices listed
  } else {
    static_assert(sizeof(T) == 0, "unsupported config field type");
  }
}

template <typename T>
KeyValue to_key_value(const T& field) {
  if constexpr (IsOptional<T>::value) {
    if (!field) return std::monostate{};
    return to_key_value(*field);
  } else if constexpr (std::is_enum_v<T>) {
    return to_string(field);
  } else if constexpr (IsEnumVector<T>::value) {
    std::vector<std::string> names;
    for (const auto item : field) names.push_back(to_string(item));
    return names;
  } else {
    return field;
  }
}

// The loader has already checked `value` against the key's type and choices.
template <typename T>
void from_key_value(const KeyValue& value, T& field) {
  if constexpr (IsOptional<T>::value) {
    if (std::holds_alternative<std::monostate>(value)) {
      field.reset();
    } else {
      typename IsOptional<T>::inner inner{};
      from_key_value(value, inner);
      field = std::move(inner);
    }
  } else if constexpr (std::is_enum_v<T>) {
    field = *parse_enum<T>(std::get<std::string>(value));
  } else if constexpr (IsEnumVector<T>::value) {
    field.clear();
    for (const auto& name : std::get<std::vector<std::string>>(value)) {
      field.push_back(*parse_enum<typename IsEnumVector<T>::inner>(name));
    }
  } else if constexpr (std::is_same_v<T, double>) {
    // Integers written for a number key ("lr: 1") arrive as int64.
    if (const auto* integer = std::get_if<std::int64_t>(&value)) {
      field = static_cast<double>(*integer);
    } else {
      field = std::get<double>(value);
    }
  } else {
    field = std::get<T>(value);
  }
}

struct KeyOptions {
  std::int64_t min = 1;  // integers: sizes are >= 1 unless a key says otherwise
  std::int64_t max = max_size;
  std::string rules;
  std::vector<std::string> aliases;
  std::string feature;  // unbuilt feature a non-default value needs
};

// `access` is a generic lambda `[](auto& c) -> auto& { return c.section.field; }`.
template <typename Access>
KeySpec make_key(std::string path, Access access, std::string doc, KeyOptions options = {}) {
  using Field = std::remove_cvref_t<decltype(access(std::declval<ConfigContainer&>()))>;
  KeySpec spec;
  spec.path = std::move(path);
  describe_type<Field>(spec);
  spec.min_integer = options.min;
  spec.max_integer = options.max;
  spec.doc = std::move(doc);
  spec.rules = std::move(options.rules);
  spec.aliases = std::move(options.aliases);
  spec.unbuilt_feature = std::move(options.feature);
  spec.get = [access](const ConfigContainer& config) { return to_key_value(access(config)); };
  spec.set = [access](ConfigContainer& config, const KeyValue& value) {
    from_key_value(value, access(config));
  };
  return spec;
}

#define DYNCP_FIELD(member) \
  [](auto& c) -> auto& {    \
    return c.member;        \
  }

void append_model_architecture_keys(std::vector<KeySpec>& keys);

}  // namespace dyncp::config::detail
