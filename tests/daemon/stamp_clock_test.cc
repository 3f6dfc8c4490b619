// The stamp clock: stamps never go back across restarts with --data-dir, even when
// the wall clock does; they advance with the monotonic clock.
#include "daemon/stamp_clock.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace meshtrain::daemon {

TEST_CASE("stamp clock: persisted floor survives a wall clock stepped back", "[stamps]") {
  std::string dir = (std::filesystem::temp_directory_path() / "mt-stamps-XXXXXX").string();
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  const uint64_t wall = 1'800'000'000'000;
  const uint64_t ahead = wall + 300'000;  // 5 minutes ahead
  uint64_t last = 0;
  {
    StampClock c(dir);
    REQUIRE(c.Start(ahead, 1000).ok());
    CHECK(c.Now(1000) == ahead);
    CHECK(c.Now(61000) == ahead + 60000);
    CHECK(c.reserved() == ahead + StampClock::kReserveMs);
    REQUIRE(c.Renew(61000).ok());  // plenty left: unchanged
    CHECK(c.reserved() == ahead + StampClock::kReserveMs);
    const uint64_t late = 1000 + StampClock::kReserveMs * 3 / 4;
    REQUIRE(c.Renew(late).ok());  // less than half left: extended
    CHECK(c.reserved() == c.Now(late) + StampClock::kReserveMs);
    last = c.Now(late);
  }
  StampClock restarted(dir);  // the wall clock was corrected: 5 minutes back
  REQUIRE(restarted.Start(wall, 5).ok());
  CHECK(restarted.Now(5) > last);
  StampClock later(dir);  // a wall clock past the reservation wins
  const uint64_t far = wall + 10 * StampClock::kReserveMs;
  REQUIRE(later.Start(far, 0).ok());
  CHECK(later.Now(0) == far);
  std::ofstream(dir + "/stamps") << "garbage";
  StampClock bad(dir);
  REQUIRE(bad.Start(wall, 0).ok());
  CHECK(bad.Now(0) == wall);
  StampClock none("");  // no data dir: the wall clock at start
  REQUIRE(none.Start(wall, 7).ok());
  CHECK(none.Now(10) == wall + 3);
  CHECK(none.Renew(1'000'000'000).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace meshtrain::daemon
