#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <string>

#include "daemon/trainer/trainer.h"

using meshtrain::daemon::FinalModels;

namespace {

struct In {
  uint64_t step = 0;
  std::optional<uint64_t> final_step;
};

}  // namespace

TEST_CASE("final models: each finished peer's final model is taken over once",
          "[daemon][final_models]") {
  FinalModels finals;
  std::map<std::string, In> inbox;
  // Ordinary models (no final step) are never taken over, even from a stopped peer.
  inbox["a"] = In{10, std::nullopt};
  inbox["b"] = In{12, std::nullopt};
  CHECK(finals.Take(inbox) == nullptr);

  // b's final model at its step 400: taken the first time ...
  inbox["b"] = In{401, 400};
  In* got = finals.Take(inbox);
  REQUIRE(got != nullptr);
  CHECK(got == &inbox["b"]);
  // ... and not again when b offers it again (every 200 ms), whatever weight step it carries.
  inbox["b"] = In{402, 400};
  CHECK(finals.Take(inbox) == nullptr);
  inbox["b"] = In{900, 400};
  CHECK(finals.Take(inbox) == nullptr);

  // Another peer's final model is a different model; so is b's after it trained on and
  // finished again at a later step.
  inbox["c"] = In{402, 380};
  got = finals.Take(inbox);
  REQUIRE(got != nullptr);
  CHECK(got == &inbox["c"]);
  CHECK(finals.Take(inbox) == nullptr);
  inbox["b"] = In{520, 510};
  got = finals.Take(inbox);
  REQUIRE(got != nullptr);
  CHECK(got == &inbox["b"]);
  CHECK(finals.Take(inbox) == nullptr);
}
