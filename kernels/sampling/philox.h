// Philox4x32-10, counter-based, on the host and the device alike: uniform n of subsequence s under
// `seed` is a pure function of (seed, s, n), so a CPU reference draws exactly the numbers a kernel
// drew. The stream is cuRAND's curandStatePhilox4_32_10: curand_init(seed, s, offset) followed by k
// curand_uniform calls yields philox_uniform(seed, s, offset + k - 1) for the k-th (FlashInfer's
// sampling kernels draw so, with s the batch row), so their rows check exactly too.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TOPT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TOPT_HOST_DEVICE inline
#endif

namespace topt::kernels {

struct Philox4 {
  uint32_t v[4];
};

// One Philox round: two 32x32 -> 64-bit products, as cuRAND's _philox4x32round (Random123's layout).
TOPT_HOST_DEVICE Philox4 philox_round(Philox4 c, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = uint64_t(0xD2511F53u) * c.v[0], p1 = uint64_t(0xCD9E8D57u) * c.v[2];
  return {{uint32_t(p1 >> 32) ^ c.v[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c.v[3] ^ k1, uint32_t(p0)}};
}

// Philox4x32-10 of counter `c` under key (k0, k1): ten rounds, the key bumped by the Weyl constants
// between them.
TOPT_HOST_DEVICE Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 9; ++round) {
    c = philox_round(c, k0, k1);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return philox_round(c, k0, k1);
}

// The n-th 32-bit word of subsequence s: word n % 4 of the block at counter (n / 4, s), the counter's
// low 64 bits the block index and its high 64 bits the subsequence, as cuRAND lays them out.
TOPT_HOST_DEVICE uint32_t philox_word(uint64_t seed, uint64_t subsequence, uint64_t n) {
  const uint64_t block = n / 4;
  const Philox4 out = philox4x32_10(
      {{uint32_t(block), uint32_t(block >> 32), uint32_t(subsequence), uint32_t(subsequence >> 32)}}, uint32_t(seed),
      uint32_t(seed >> 32));
  return out.v[n % 4];
}

// A uniform in (0, 1] as curand_uniform makes it: word · 2^-32 + 2^-33 in fp32, as one fused
// multiply-add (what nvcc contracts cuRAND's expression to), so that host and device agree to the bit.
TOPT_HOST_DEVICE float philox_uniform(uint64_t seed, uint64_t subsequence, uint64_t n) {
  return fmaf(float(philox_word(seed, subsequence, n)), 2.3283064e-10f, 2.3283064e-10f / 2.0f);
}

}  // namespace topt::kernels
