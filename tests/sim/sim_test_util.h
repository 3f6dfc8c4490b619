// Shared by the simulator tests.
#pragma once

#include <catch2/catch.hpp>
#include <utility>

#include "sim/psp_sim.h"

namespace meshtrain::sim {

// Runs a simulation that must succeed.
inline PspSimResult Run(const PspSimOptions& o) {
  auto r = RunPspSim(o);
  REQUIRE(r.ok());
  return std::move(r).value();
}

}  // namespace meshtrain::sim
