// The globals transformers gives chat templates: jinja2's default namespace (range, limited by
// the sandbox to 100,000 items; dict; namespace; cycler; joiner; lipsum) and transformers'
// raise_exception and strftime_now. Adding one is one entry in the table at the end.
#include <ctime>
#include <memory>
#include <random>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"

namespace dyncp::data::jinja {

namespace {

Value range(CallArguments& a) {
  std::int64_t start = 0;
  std::int64_t stop = 0;
  std::int64_t step = 1;
  const auto number = [](const Value& v) {
    if (v.kind() != Value::Kind::integer) throw TemplateError(0, "range() needs integers");
    return v.as_int();
  };
  if (a.positional.size() == 1) {
    stop = number(a.positional[0]);
  } else if (a.positional.size() == 2 || a.positional.size() == 3) {
    start = number(a.positional[0]);
    stop = number(a.positional[1]);
    if (a.positional.size() == 3) step = number(a.positional[2]);
  } else {
    throw TemplateError(0, "range() takes 1 to 3 arguments");
  }
  if (step == 0) throw TemplateError(0, "range() step must not be zero");
  ValueList items;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (items.size() >= 100000) throw TemplateError(0, "range() too big (sandbox limit 100000)");
    items.push_back(Value::integer(i));
  }
  return Value::list(std::move(items));
}

Value make_dict(CallArguments& a, bool as_namespace) {
  auto dict = std::make_shared<Dict>();
  dict->is_namespace = as_namespace;
  for (const Value& positional : a.positional) {
    if (!positional.is_dict())
      throw TemplateError(0, "namespace()/dict() take a dict or key=value");
    for (const auto& [key, value] : positional.dict_ptr()->entries) dict->set(key, value);
  }
  for (const auto& [key, value] : a.keyword) dict->set(key, value);
  if (as_namespace) {
    for (const auto& entry : dict->entries) {
      if (entry.first.starts_with("_"))
        throw TemplateError(0,
                            "Chat templates cannot store underscore-prefixed attributes on a "
                            "namespace, but got '" +
                                entry.first + "'");
    }
  }
  return Value::dict(std::move(dict));
}

Value dict_global(CallArguments& a) {
  return make_dict(a, false);
}

Value namespace_global(CallArguments& a) {
  return make_dict(a, true);
}

Value raise_exception(CallArguments& a) {
  throw TemplateError(0, a.positional.empty() ? std::string() : python_str(a.positional[0]), true);
}

Value strftime_now(CallArguments& a) {
  const std::string format = a.positional.empty() ? std::string() : python_str(a.positional[0]);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[256];
  const std::size_t written = std::strftime(buffer, sizeof(buffer), format.c_str(), &local);
  return Value::string(std::string(buffer, written));
}

// jinja2.utils.Cycler: next() returns the current item and advances, current is the item
// next() returns next, reset() goes back to the first.
Value cycler(CallArguments& a) {
  if (a.positional.empty()) throw TemplateError(0, "at least one item has to be provided");
  auto object = std::make_shared<Dict>();
  auto position = std::make_shared<std::size_t>(0);
  const ValueList items = a.positional;
  Dict* self = object.get();
  const std::weak_ptr<Dict> weak = object;
  self->set("items", Value::list(items, true));
  self->set("current", items[0]);
  self->set("next", Value::callable(
                        [weak, items, position](CallArguments&) {
                          const Value item = items[*position];
                          *position = (*position + 1) % items.size();
                          if (auto alive = weak.lock()) alive->set("current", items[*position]);
                          return item;
                        },
                        "next"));
  self->set("reset", Value::callable(
                         [weak, items, position](CallArguments&) {
                           *position = 0;
                           if (auto alive = weak.lock()) alive->set("current", items[0]);
                           return Value::none();
                         },
                         "reset"));
  return Value::dict(std::move(object));
}

// jinja2.utils.Joiner: '' the first time it is called, the separator after that.
Value joiner(CallArguments& a) {
  const Value separator = argument_or(a, 0, "sep", Value::string(", "));
  auto used = std::make_shared<bool>(false);
  return Value::callable(
      [separator, used](CallArguments&) {
        if (!*used) {
          *used = true;
          return Value::string("");
        }
        return separator;
      },
      "joiner");
}

// jinja2.utils.generate_lorem_ipsum with its word list. jinja2 draws with Python's unseeded
// random module, so any output of this shape is one it could give; this one draws from a
// generator seeded by the arguments, so a prepared cache is reproducible.
Value lipsum(CallArguments& a) {
  static const ValueList words =
      split(
          "a ac accumsan ad adipiscing aenean aliquam aliquet amet ante aptent arcu at auctor "
          "augue bibendum blandit class commodo condimentum congue consectetuer consequat conubia "
          "convallis cras cubilia cum curabitur curae cursus dapibus diam dictum dictumst "
          "dignissim dis dolor donec dui duis egestas eget eleifend elementum elit enim erat eros "
          "est et etiam eu euismod facilisi facilisis fames faucibus felis fermentum feugiat "
          "fringilla fusce gravida habitant habitasse hac hendrerit hymenaeos iaculis id imperdiet "
          "in inceptos integer interdum ipsum justo lacinia lacus laoreet lectus leo libero ligula "
          "litora lobortis lorem luctus maecenas magna magnis malesuada massa mattis mauris metus "
          "mi molestie mollis montes morbi mus nam nascetur natoque nec neque netus nibh nisi nisl "
          "non nonummy nostra nulla nullam nunc odio orci ornare parturient pede pellentesque "
          "penatibus per pharetra phasellus placerat platea porta porttitor posuere potenti "
          "praesent pretium primis proin pulvinar purus quam quis quisque rhoncus ridiculus risus "
          "rutrum sagittis sapien scelerisque sed sem semper senectus sit sociis sociosqu sodales "
          "sollicitudin suscipit suspendisse taciti tellus tempor tempus tincidunt torquent tortor "
          "tristique turpis ullamcorper ultrices ultricies urna ut varius vehicula vel velit "
          "venenatis vestibulum vitae vivamus viverra volutpat vulputate",
          std::nullopt, std::nullopt, 0)
          .items();
  const std::int64_t paragraphs =
      require_int(argument_or(a, 0, "n", Value::integer(5)), "lipsum(n)", 0);
  const bool html = argument_or(a, 1, "html", Value::boolean(true)).truthy();
  const std::int64_t low =
      require_int(argument_or(a, 2, "min", Value::integer(20)), "lipsum(min)", 0);
  const std::int64_t high =
      require_int(argument_or(a, 3, "max", Value::integer(100)), "lipsum(max)", 0);
  if (high <= low) throw TemplateError(0, "lipsum(): empty range for randrange(min, max)");
  std::mt19937_64 random(static_cast<std::uint64_t>(paragraphs * 1000003 + low * 1009 + high));
  const auto randrange = [&](std::int64_t from, std::int64_t to) {
    return std::uniform_int_distribution<std::int64_t>(from, to - 1)(random);
  };
  std::vector<std::string> result;
  for (std::int64_t n = 0; n < paragraphs; ++n) {
    bool next_capitalized = true;
    std::int64_t last_comma = 0;
    std::int64_t last_fullstop = 0;
    std::string last;
    std::string paragraph;
    const std::int64_t count = randrange(low, high);
    for (std::int64_t index = 0; index < count; ++index) {
      std::string word;
      do {
        word =
            words[static_cast<std::size_t>(randrange(0, static_cast<std::int64_t>(words.size())))]
                .text();
      } while (word == last);
      last = word;
      if (next_capitalized) {
        word = capitalize(word);
        next_capitalized = false;
      }
      if (index - randrange(3, 8) > last_comma) {
        last_comma = index;
        last_fullstop += 2;
        word += ",";
      }
      if (index - randrange(10, 20) > last_fullstop) {
        last_comma = last_fullstop = index;
        word += ".";
        next_capitalized = true;
      }
      paragraph += (paragraph.empty() ? "" : " ") + word;
    }
    if (paragraph.ends_with(",")) {
      paragraph.back() = '.';
    } else if (!paragraph.ends_with(".")) {
      paragraph += ".";
    }
    result.push_back(std::move(paragraph));
  }
  std::string out;
  for (std::size_t i = 0; i < result.size(); ++i) {
    if (html) {
      out += (i > 0 ? "\n" : "") + std::string("<p>") + escape_html(result[i]) + "</p>";
    } else {
      out += (i > 0 ? "\n\n" : "") + result[i];
    }
  }
  return html ? Value::markup(std::move(out)) : Value::string(std::move(out));
}

}  // namespace

void add_globals(Dict& globals) {
  static const std::pair<const char*, Value (*)(CallArguments&)> table[] = {
      {"range", range},
      {"dict", dict_global},
      {"namespace", namespace_global},
      {"cycler", cycler},
      {"joiner", joiner},
      {"lipsum", lipsum},
      {"raise_exception", raise_exception},
      {"strftime_now", strftime_now},
  };
  for (const auto& [name, function] : table) globals.set(name, Value::callable(function, name));
}

}  // namespace dyncp::data::jinja
