#include "sync/progress_view.h"

#include <catch2/catch.hpp>

namespace meshtrain::sync {
namespace {

TEST_CASE("ProgressView steps are monotone and removal is immediate", "[sync][view]") {
  ProgressView view("me");
  REQUIRE(view.empty());
  REQUIRE_FALSE(view.MinStep().has_value());

  REQUIRE(view.Update("b", 5, 100));
  REQUIRE(view.Update("a", 3, 100));
  REQUIRE_FALSE(view.Update("me", 1, 100));  // self is never a peer
  REQUIRE(view.size() == 2);
  REQUIRE(view.peers() == std::vector<std::string>{"a", "b"});
  REQUIRE(*view.MinStep() == 3);
  REQUIRE(*view.MaxStep() == 5);

  // Stale gossip never lowers a step, nor refreshes when it was learned.
  REQUIRE_FALSE(view.Update("b", 4, 200));
  REQUIRE_FALSE(view.Update("b", 5, 200));
  REQUIRE(view.Find("b")->step == 5);
  REQUIRE(view.Find("b")->learned == 100);

  REQUIRE(view.Update("a", 9, 300));
  REQUIRE(*view.MinStep() == 5);
  REQUIRE(*view.MaxStep() == 9);

  REQUIRE(view.Remove("b"));
  REQUIRE_FALSE(view.Remove("b"));
  REQUIRE_FALSE(view.Contains("b"));
  REQUIRE(*view.MinStep() == 9);
  REQUIRE(view.Remove("a"));
  REQUIRE_FALSE(view.MinStep().has_value());
}

TEST_CASE("ProgressView keeps an EWMA of each peer's step interval", "[sync][view]") {
  ProgressView view({}, 0.5);
  view.Update("p", 0, 0);
  REQUIRE(view.Find("p")->interval_ms == 0);  // unknown until the step advances
  view.Update("p", 2, 400);                   // 200 ms per step
  REQUIRE(view.Find("p")->interval_ms == Approx(200));
  view.Update("p", 3, 800);  // 400 ms sample: 0.5·400 + 0.5·200
  REQUIRE(view.Find("p")->interval_ms == Approx(300));
  REQUIRE(view.Find("p")->learned == 800);
}

TEST_CASE("ProgressView min/max stay right under many peers at equal steps", "[sync][view]") {
  ProgressView view;
  for (int i = 0; i < 50; ++i)
    view.Update("n" + std::to_string(i), static_cast<uint64_t>(i % 5), 0);
  REQUIRE(*view.MinStep() == 0);
  REQUIRE(*view.MaxStep() == 4);
  for (int i = 0; i < 50; i += 5) view.Remove("n" + std::to_string(i));  // every step-0 peer
  REQUIRE(*view.MinStep() == 1);
  for (int i = 1; i < 50; i += 5) view.Update("n" + std::to_string(i), 7, 10);
  REQUIRE(*view.MinStep() == 2);
  REQUIRE(*view.MaxStep() == 7);
}

}  // namespace
}  // namespace meshtrain::sync
