#include "harness/run_order.h"

#include <algorithm>

namespace topt {

int interleave_cycle(size_t n) { return int(n % 2 == 0 ? n : 2 * n); }

std::vector<size_t> interleave_order(size_t n, int round) {
  std::vector<size_t> order(n);
  if (n == 0) return order;
  // Row r of the design is the zigzag 0, n-1, 1, n-2, 2, … shifted by r (mod n); for odd n the
  // cycle also takes each row reversed, right after it.
  const int cycle_pos = round % interleave_cycle(n);
  const bool odd = n % 2 == 1;
  const size_t shift = size_t(odd ? cycle_pos / 2 : cycle_pos);
  for (size_t k = 0; k < n; ++k) {
    const size_t zigzag = k % 2 == 0 ? k / 2 : n - (k + 1) / 2;
    order[k] = (zigzag + shift) % n;
  }
  if (odd && cycle_pos % 2 == 1) std::reverse(order.begin(), order.end());
  return order;
}

}  // namespace topt
