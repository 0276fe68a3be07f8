// dataset.chat_role_names: the one parser the config rules and the data setup share.
#include "config/chat_role_names.hpp"

#include <catch2/catch.hpp>

using dyncp::config::parse_chat_role_names;

TEST_CASE("chat_role_names parses name=role pairs and names the first bad entry",
          "[config][chat]") {
  const auto roles = parse_chat_role_names("customer=user,agent=assistant,bot=tool");
  REQUIRE_FALSE(roles.bad_entry);
  REQUIRE(roles.pairs.size() == 3);
  CHECK(roles.pairs[0] == std::pair<std::string, std::string>{"customer", "user"});
  CHECK(roles.pairs[2] == std::pair<std::string, std::string>{"bot", "tool"});
  CHECK(parse_chat_role_names("").pairs.empty());
  CHECK_FALSE(parse_chat_role_names("").bad_entry);
  // Not a role the templates know, no '=', no name, a trailing comma: refused, no pairs.
  for (const char* bad : {"customer=client", "customer", "=user", "a=user,"}) {
    const auto parsed = parse_chat_role_names(bad);
    INFO(bad);
    CHECK(parsed.bad_entry);
    CHECK(parsed.pairs.empty());
  }
  CHECK(*parse_chat_role_names("a=user,b=robot").bad_entry == "b=robot");
}
