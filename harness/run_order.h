// The order in which an interleaved case times its implementations, round by round.
#pragma once
#include <cstddef>
#include <vector>

namespace topt {

// Round `round`'s order of n implementations: row `round` of a Williams design (a balanced Latin
// square). Over a full cycle (n rounds for even n, 2n for odd n) every implementation takes every
// slot equally often and follows every other one equally often. The predecessor matters because,
// on power-capped rows, the clock a measurement gets depends on what ran just before it. A plain
// rotation keeps each implementation's predecessor fixed: two launches of the same kernel read up
// to 10% apart in one sweep that way (docs/NOTES.md, "Run order and the power cap").
std::vector<size_t> interleave_order(size_t n, int round);

// Rounds in one full cycle of interleave_order for n implementations.
int interleave_cycle(size_t n);

}  // namespace topt
