#include "sync/progress_view.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <random>
#include <string>

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

TEST_CASE("ProgressView agrees with a std::map under random updates and removals", "[sync][view]") {
  ProgressView view("self");
  std::map<std::string, uint64_t> ref;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const std::string name = "n" + std::to_string(rng() % 300);
    const uint64_t step = rng() % 40;
    const int op = static_cast<int>(rng() % 4);
    if (op == 0) {
      REQUIRE(view.Remove(name) == (ref.erase(name) > 0));
    } else if (op == 1) {
      const bool known = ref.count(name) > 0;
      const bool advanced = known && step > ref[name];
      REQUIRE(view.UpdateKnown(name, step, i) == advanced);
      if (advanced) ref[name] = step;
    } else {
      bool added = false;
      const bool known = ref.count(name) > 0;
      const bool changed = view.Update(name, step, i, &added);
      REQUIRE(added == !known);
      REQUIRE(changed == (!known || step > ref[name]));
      if (changed) ref[name] = step;
    }
    if (i % 97 == 0) {
      REQUIRE(view.size() == ref.size());
      uint64_t lo = ~uint64_t{0}, hi = 0;
      for (const auto& [n, st] : ref) {
        const PeerProgress* p = view.Find(n);
        REQUIRE(p != nullptr);
        REQUIRE(p->step == st);
        size_t hint = static_cast<size_t>(rng() % 400);  // right or wrong: both must work
        REQUIRE(view.Find(n, &hint) == p);
        REQUIRE(view.name_at(hint) == n);
        lo = std::min(lo, st);
        hi = std::max(hi, st);
      }
      if (ref.empty()) {
        REQUIRE(!view.MinStep());
      } else {
        REQUIRE(*view.MinStep() == lo);
        REQUIRE(*view.MaxStep() == hi);
      }
      REQUIRE(view.Find("nope") == nullptr);
    }
  }
  REQUIRE(!view.Update("self", 1, 0));
}

TEST_CASE("ProgressViews sharing a NameTable hold ids and stay independent", "[sync][view]") {
  auto names = std::make_shared<NameTable>();
  ProgressView a("a", 0.3, names);
  ProgressView b("b", 0.3, names);
  REQUIRE(a.Update("p", 3, 10));
  REQUIRE(b.Update("q", 1, 10));
  REQUIRE(b.Update("p", 5, 10));
  REQUIRE(names->size() == 2);  // "p" is stored once
  REQUIRE(a.Find("p")->step == 3);
  REQUIRE(b.Find("p")->step == 5);
  REQUIRE_FALSE(a.Contains("q"));
  REQUIRE(a.Remove("p"));
  REQUIRE(b.Find("p")->step == 5);
  REQUIRE(b.Remove("q"));  // the last entry moves into the hole: its name still resolves
  REQUIRE(b.name_at(0) == "p");
  REQUIRE(b.peers() == std::vector<std::string>{"p"});
}

}  // namespace
}  // namespace meshtrain::sync
