// The globals transformers gives chat templates: jinja2's range (the sandbox's, limited to
// 100,000 items), dict and namespace, and transformers' raise_exception and strftime_now.
#include <ctime>

#include "data/jinja_builtins.hpp"
#include "data/jinja_python.hpp"

namespace dyncp::data::jinja {

void add_globals(Dict& globals) {
  globals.set("range", Value::callable(
                           [](CallArguments& a) {
                             std::int64_t start = 0;
                             std::int64_t stop = 0;
                             std::int64_t step = 1;
                             const auto number = [](const Value& v) {
                               if (v.kind() != Value::Kind::integer)
                                 throw TemplateError(0, "range() needs integers");
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
                             for (std::int64_t i = start; step > 0 ? i < stop : i > stop;
                                  i += step) {
                               if (items.size() >= 100000)
                                 throw TemplateError(0, "range() too big (sandbox limit 100000)");
                               items.push_back(Value::integer(i));
                             }
                             return Value::list(std::move(items));
                           },
                           "range"));
  const auto make_dict = [](CallArguments& a, bool as_namespace) {
    auto dict = std::make_shared<Dict>();
    dict->is_namespace = as_namespace;
    for (const Value& positional : a.positional) {
      if (!positional.is_dict())
        throw TemplateError(0, "namespace()/dict() take a dict or key=value");
      for (const auto& [key, value] : positional.dict_ptr()->entries) dict->set(key, value);
    }
    for (const auto& [key, value] : a.keyword) dict->set(key, value);
    return Value::dict(std::move(dict));
  };
  globals.set(
      "namespace",
      Value::callable([make_dict](CallArguments& a) { return make_dict(a, true); }, "namespace"));
  globals.set("dict", Value::callable([make_dict](CallArguments& a) { return make_dict(a, false); },
                                      "dict"));
  globals.set("raise_exception",
              Value::callable(
                  [](CallArguments& a) -> Value {
                    throw TemplateError(
                        0, a.positional.empty() ? std::string() : python_str(a.positional[0]),
                        true);
                  },
                  "raise_exception"));
  globals.set("strftime_now", Value::callable(
                                  [](CallArguments& a) {
                                    const std::string format = a.positional.empty()
                                                                   ? std::string()
                                                                   : python_str(a.positional[0]);
                                    const std::time_t now = std::time(nullptr);
                                    std::tm local{};
                                    localtime_r(&now, &local);
                                    char buffer[256];
                                    const std::size_t written = std::strftime(
                                        buffer, sizeof(buffer), format.c_str(), &local);
                                    return Value::string(std::string(buffer, written));
                                  },
                                  "strftime_now"));
}

}  // namespace dyncp::data::jinja
