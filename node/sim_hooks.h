// SIMULATOR-ONLY SEAM. Nothing here changes what a Node decides; it only concerns how fast the
// simulator (sim/) runs meshes of thousands of nodes, where every node's state is a cache miss.
//
// Node::Prefetch(stage, input) (declared in node/node.h under "Simulator-only", defined in
// node/sim_hooks.cc) is a hint for the processor: it loads what handling an input touches
// first. Stage 0 fetches lines of the Node object itself; stage 1 (later, when those had time
// to arrive) the objects it points to (the barrier core). Stages 2 and 3 follow the input's
// sender into the views: the external view's and the barrier's index buckets, then their
// entries. The simulator calls it for the next events' nodes, a few events ahead.
//
// Field layout of Node (node/node.h, private section), which the hints rely on:
//   - What NextDeadline, Tick and the barrier read on every input (the barrier state, the
//     timers bandwidth_at_, retry_join_at_, final_serve_at_, the lifecycle, and LinkProbes's
//     deadline, its first field) sit together on a few cache lines after the barrier core's
//     pointer: keep new per-input fields there, and cold ones (maps, strings) out of it.
//   - The RNG (2.5 KB of state) is the last field, away from the hot lines.
// Drivers other than the simulator never need any of this.
#pragma once

#include "node/node.h"
