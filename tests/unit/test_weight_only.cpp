// The weight-only GEMMs' host side: the packed layout (packed → unpacked is the quantized matrix bit
// for bit; each lane's words hold its mma.sync fragments, register-ready), the GPTQ/AWQ importers, the
// path heuristic and the refusals, the cost model and the shipped configs.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "harness/config.h"
#include "harness/registry.h"
#include "baselines/cutlass/cutlass_int4.h"
#include "harness/sweep.h"
#include "kernels/gemm/weight_only_gemm.h"
#include "kernels/gemm/weight_only_pack.h"
#include "kernels/gemm/weight_only_plan.h"
#include "suites/gemm/gemm_suites.h"

namespace topt {
namespace {

using namespace kernels::gemm;

std::vector<uint8_t> random_codes(const WeightShape& s, int bits, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> codes(size_t(s.n * s.k));
  for (auto& c : codes) c = uint8_t(rng() & (bits == 4 ? 0xF : 0xFF));
  return codes;
}

// Shapes on and off the strip (16) and chunk (64), down to a single row.
const std::vector<WeightShape> kShapes = {{16, 64}, {40, 200}, {33, 72}, {1, 8}, {130, 520}, {256, 1024}};

TEST(WeightOnlyPack, PackedThenUnpackedIsTheQuantizedMatrixBitForBit) {
  for (int bits : {4, 8})
    for (const WeightShape& s : kShapes) {
      SCOPED_TRACE(testing::Message() << bits << "-bit " << s.n << "x" << s.k);
      const auto codes = random_codes(s, bits, uint32_t(s.n * 7 + s.k));
      const auto packed = pack_weights(codes, s, bits);
      EXPECT_EQ(int64_t(packed.size()) * 4, packed_bytes(s, bits));
      EXPECT_EQ(unpack_weights(packed, s, bits), codes);
    }
}

TEST(WeightOnlyPack, PackedSizeIsWholeStripsAndChunks) {
  EXPECT_EQ(packed_bytes({4096, 4096}, 4), 4096 * 4096 / 2);
  EXPECT_EQ(packed_bytes({4096, 4096}, 8), 4096 * 4096);
  EXPECT_EQ(packed_bytes({17, 65}, 4), 2 * 2 * 512);  // 2 strips × 2 chunks of 512 bytes
}

// Every element of a (strip, chunk) lies in exactly one lane's fragment, and lane t's four tiles read
// x[16t, 16t + 16) of the chunk: tile j's B registers (logical k 2t, 2t+1 | 2t+8, 2t+9) are x's
// 16t + 4j + {0, 1 | 2, 3}, the pairs the decode kernel passes to mma.sync.
TEST(WeightOnlyPack, EachChunkElementIsInOneFragmentAndLaneTReadsItsSixteenK) {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < 32; ++lane)
    for (int tile = 0; tile < 4; ++tile)
      for (int a = 0; a < kFragmentElements; ++a) {
        const ChunkOffset o = fragment_element_offset(lane, tile, a);
        EXPECT_TRUE(seen.insert({o.row, o.k}).second) << lane << " " << tile << " " << a;
        // The PTX table of the m16n8k16 A fragment: a0,a1 row g cols 2t, 2t+1; a2,a3 row g+8; a4..a7 cols + 8.
        const int g = lane / 4, t = lane % 4;
        EXPECT_EQ(o.row, g + 8 * ((a / 2) % 2));
        const int logical_col = 2 * t + a % 2 + 8 * (a / 4);
        const int b_register = logical_col / 8;  // B's b0,b1 (k 2t, 2t+1) or b2,b3 (k 2t+8, 2t+9)
        EXPECT_EQ(o.k, 16 * t + 4 * tile + 2 * b_register + logical_col % 2);
      }
  EXPECT_EQ(seen.size(), size_t(kStripN * kChunkK));
}

// The decode kernel reads register i of an int4 tile as (word >> 4i) & 0x000F000F: nibble i is the
// register's first element (2i), nibble i + 4 its second (2i + 1).
TEST(WeightOnlyPack, Int4WordsAreRegisterReady) {
  const WeightShape s{40, 200};
  const auto codes = random_codes(s, 4, 11);
  const auto packed = pack_weights(codes, s, 4);
  for (size_t w = 0; w < packed.size(); ++w) {
    const int tile = int(w % 4), lane = int(w / 4 % 32);
    const int64_t chunk_index = int64_t(w / 128), strip = chunk_index / s.chunks(), chunk = chunk_index % s.chunks();
    for (int reg = 0; reg < 4; ++reg) {
      const uint32_t pair = (packed[w] >> (4 * reg)) & 0x000F000Fu;
      for (int half = 0; half < 2; ++half) {
        const ChunkOffset o = fragment_element_offset(lane, tile, 2 * reg + half);
        const int64_t n = strip * kStripN + o.row, k = chunk * kChunkK + o.k;
        const uint32_t code = (pair >> (16 * half)) & 0xF;
        if (n < s.n && k < s.k) ASSERT_EQ(code, codes[size_t(n * s.k + k)]) << w << " " << reg << " " << half;
        else ASSERT_EQ(code, uint32_t(padding_code(4)));
      }
    }
  }
}

// The decode kernel's chunk → scale group: every divisor a group can be in chunks (1 .. 2^20, and
// every one up to 300), each against numerators at and around its multiples up to 2^31 − 1.
TEST(WeightOnlyDivider, DividesLikeTheIntegerDivision) {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 300; ++d) divisors.push_back(d);
  for (uint32_t d = 512; d <= (1u << 20); d = d * 3 / 2 + 1) divisors.push_back(d);
  divisors.push_back(1u << 20);
  std::mt19937 rng(5);
  for (const uint32_t d : divisors) {
    const UnsignedDivider divider(d);
    std::vector<uint32_t> numerators = {0, 1, 0x7fffffffu, 0x7fffffffu - d};
    for (int i = 0; i < 200; ++i) {
      const uint32_t multiple = uint32_t(i) * d, random_multiple = uint32_t(rng() % (0x7fffffffu / d)) * d;
      for (const uint32_t base : {multiple, random_multiple})
        for (const uint32_t offset : {0u, 1u, d - 1})
          if (uint64_t(base) + offset < 0x80000000u) numerators.push_back(base + offset);
      numerators.push_back(rng() & 0x7fffffffu);
    }
    for (const uint32_t n : numerators) ASSERT_EQ(divider.divide(n), n / d) << n << " / " << d;
  }
}

TEST(WeightOnlyPack, Int8CodesAreStoredBiasedBy128) {
  for (int code = -128; code < 128; ++code)
    EXPECT_EQ(code_of_stored(8, stored_code(8, uint8_t(int8_t(code)))), uint8_t(int8_t(code)));
  EXPECT_EQ(stored_code(8, uint8_t(int8_t(-128))), 0u);
  EXPECT_EQ(stored_code(8, 0), 128u);
}

// A random quantized int4 matrix with zero points, packed the way GPTQ's (v1) and AWQ's checkpoints are.
struct Int4Checkpoint {
  int64_t n, k, group;
  std::vector<uint8_t> codes, zeros;  // [N, K], [groups, N]
  std::vector<uint16_t> scales;       // [groups, N] fp16 bits
};

Int4Checkpoint random_checkpoint(int64_t n, int64_t k, int64_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  Int4Checkpoint c{n, k, group, random_codes({n, k}, 4, seed), {}, {}};
  const int64_t groups = scale_groups(k, group);
  for (int64_t i = 0; i < groups * n; ++i) {
    c.zeros.push_back(uint8_t(rng() & 0xF));
    c.scales.push_back(uint16_t(0x2000 + rng() % 0x1000));  // positive fp16 values around 2^-7
  }
  return c;
}

std::vector<int32_t> pack_nibbles(const std::vector<uint8_t>& values) {
  std::vector<int32_t> words(values.size() / 8, 0);
  for (size_t i = 0; i < values.size(); ++i) words[i / 8] |= int32_t(uint32_t(values[i]) << (4 * (i % 8)));
  return words;
}

TEST(WeightOnlyImport, GptqQweightIsPackedAlongKAndZerosAreStoredMinusOne) {
  const Int4Checkpoint c = random_checkpoint(16, 256, 128, 3);
  std::vector<int32_t> qweight(size_t(c.k / 8 * c.n), 0);
  for (int64_t k = 0; k < c.k; ++k)
    for (int64_t n = 0; n < c.n; ++n)
      qweight[size_t(k / 8 * c.n + n)] |= int32_t(uint32_t(c.codes[size_t(n * c.k + k)]) << (4 * (k % 8)));
  std::vector<uint8_t> stored_zeros;
  for (uint8_t z : c.zeros) stored_zeros.push_back(uint8_t((z + 15) & 0xF));
  const QuantizedWeight w = import_gptq(qweight, pack_nibbles(stored_zeros), c.scales, c.n, c.k, c.group);
  EXPECT_EQ(w.codes, c.codes);
  EXPECT_EQ(w.zeros, c.zeros);
  EXPECT_TRUE(w.format.asymmetric);
  EXPECT_EQ(w.format.group, 128);
  ASSERT_EQ(w.scales.size(), c.scales.size());
  for (size_t i = 0; i < c.scales.size(); ++i) EXPECT_EQ(w.scales[i], fp16_bits_to_bf16_bits(c.scales[i]));

  // One word pinned: qweight[0][0] = 0x76543210 is column 0's k = 0..7 = 0..7.
  std::vector<int32_t> one(size_t(8 / 8 * 8), 0);
  one[0] = 0x76543210;
  const QuantizedWeight pinned =
      import_gptq(one, {int32_t(0x77777777)}, std::vector<uint16_t>(8, 0x3C00), 8, 8, 8);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(pinned.codes[size_t(k)], k);
  EXPECT_FALSE(pinned.format.asymmetric);  // stored 7 everywhere: zero 8, GPTQ's symmetric
  EXPECT_TRUE(pinned.zeros.empty());
  EXPECT_EQ(pinned.scales[0], 0x3F80);  // fp16 1.0 → bf16 1.0
}

TEST(WeightOnlyImport, AwqPacksAlongNInItsInterleavedOrder) {
  // One word pinned: nibble i holds column kAwqOrder[i], so 0x76543210 is columns 0..7 = 0,4,1,5,2,6,3,7.
  const QuantizedWeight pinned =
      import_awq({int32_t(0x76543210)}, {int32_t(0x76543210)}, std::vector<uint16_t>(8, 0x3C00), 8, 1, 1);
  const std::vector<uint8_t> columns = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int n = 0; n < 8; ++n) {
    EXPECT_EQ(pinned.codes[size_t(n)], columns[size_t(n)]) << n;
    EXPECT_EQ(pinned.zeros[size_t(n)], columns[size_t(n)]) << n;
  }
  // A whole matrix: codes [N, K] and zeros [groups, N] back as they were.
  const Int4Checkpoint c = random_checkpoint(24, 192, 64, 5);
  auto awq_rows = [](const std::vector<uint8_t>& row_major, int64_t rows, int64_t cols, bool transpose) {
    std::vector<int32_t> words(size_t(rows * cols / 8), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; ++col) {
        const int position = [&] {
          for (int i = 0; i < 8; ++i)
            if (kAwqOrder[i] == col % 8) return i;
          return -1;
        }();
        const uint8_t v = transpose ? row_major[size_t(col * rows + r)] : row_major[size_t(r * cols + col)];
        words[size_t(r * cols / 8 + col / 8)] |= int32_t(uint32_t(v) << (4 * position));
      }
    return words;
  };
  const QuantizedWeight w = import_awq(awq_rows(c.codes, c.k, c.n, true), awq_rows(c.zeros, 3, c.n, false),
                                       c.scales, c.n, c.k, c.group);
  EXPECT_EQ(w.codes, c.codes);
  EXPECT_EQ(w.zeros, c.zeros);
  EXPECT_TRUE(w.format.asymmetric);
}

TEST(WeightOnlyImport, ShapesThatDoNotFitAreNamed) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::vector<uint16_t> scales(8, 0x3C00);
  EXPECT_NE(message([&] { import_gptq({0}, {0}, scales, 8, 12, 12); }).find("K = 12 is not a multiple of 8"),
            std::string::npos);
  EXPECT_NE(message([&] { import_awq({0}, {0}, scales, 12, 8, 8); }).find("N = 12 is not a multiple of 8"),
            std::string::npos);
  EXPECT_NE(message([&] { import_gptq({0, 0}, {0}, scales, 8, 8, 8); }).find("qweight holds 2 words"),
            std::string::npos);
  EXPECT_EQ(message([&] { import_awq({0}, {0}, scales, 8, 1, 1); }), "no error");  // 8 scales, 1 group: fits
  EXPECT_NE(message([&] { import_awq({0}, {0, 0}, scales, 8, 1, 1); }).find("qzeros holds 2 words"),
            std::string::npos);
}

// Up to 64 tokens the weights stream packed: int4 up to 16 tokens on large weights with K from 5120 the
// streaming kernel (2^27 weights at 1-2 tokens, 2^26 at 3-16); else the wgmma kernel from 9 tokens on weights
// from 2^27 (up to 16 tokens; int8 up to 32), 3 · 2^24 (17-32; int8 33-64), 5 · 2^22 (33-64); else the decode
// kernel; above
// 64, the core. The Llama-2 layers as the H200 measured them (W4A16_NOTES.md).
TEST(WeightOnlyPlan, StreamDecodeOrWgmmaUpTo64TokensThenTheCore) {
  auto path = [](int64_t m, int64_t n, int64_t k, int bits = 4) { return choose_weight_only_path(m, n, k, bits); };
  for (int64_t m : {1, 2, 4, 8, 9, 16}) {
    EXPECT_EQ(path(m, 57344, 8192), WeightOnlyPath::stream) << m;
    EXPECT_EQ(path(m, 8192, 28672), WeightOnlyPath::stream) << m;
    EXPECT_EQ(path(m, 27648, 5120), WeightOnlyPath::stream) << m;
  }
  for (int64_t m : {17, 32, 64}) {
    EXPECT_EQ(path(m, 57344, 8192), WeightOnlyPath::wgmma) << m;
    EXPECT_EQ(path(m, 8192, 28672), WeightOnlyPath::wgmma) << m;
    EXPECT_EQ(path(m, 27648, 5120), WeightOnlyPath::wgmma) << m;
  }
  for (int64_t m : {1, 2}) {
    EXPECT_EQ(path(m, 15360, 5120), WeightOnlyPath::decode) << m;  // 2^26.2 weights
    EXPECT_EQ(path(m, 8192, 8192), WeightOnlyPath::decode) << m;
  }
  for (int64_t m : {3, 4, 8, 9, 16}) {
    EXPECT_EQ(path(m, 15360, 5120), WeightOnlyPath::stream) << m;
    EXPECT_EQ(path(m, 8192, 8192), WeightOnlyPath::stream) << m;  // 2^26 exactly
    EXPECT_EQ(path(m, 10240, 8192), WeightOnlyPath::stream) << m;
    EXPECT_EQ(path(m, 5120, 5120), WeightOnlyPath::decode) << m;  // 2^24.6 weights
  }
  for (int64_t m : {1, 4, 9, 16}) {
    EXPECT_EQ(path(m, 22016, 4096), WeightOnlyPath::decode) << m;  // K = 4096: the streaming kernel's blocks are short
    EXPECT_EQ(path(m, 12288, 4096), WeightOnlyPath::decode) << m;
  }
  // Zero points take N a multiple of 16 (the streaming and wgmma kernels' copies of zero rows).
  EXPECT_EQ(choose_weight_only_path(16, 57352, 8192, 4, false, true), WeightOnlyPath::decode);
  EXPECT_EQ(choose_weight_only_path(17, 57352, 8192, 4, false, true), WeightOnlyPath::decode);
  EXPECT_EQ(choose_weight_only_path(17, 57352, 8192, 4), WeightOnlyPath::wgmma);
  EXPECT_EQ(choose_weight_only_path(16, 57344, 8192, 4, false, true), WeightOnlyPath::stream);
  EXPECT_EQ(path(32, 8192, 8192), WeightOnlyPath::wgmma);  // 2^26 exactly
  EXPECT_EQ(path(32, 5120, 13824), WeightOnlyPath::wgmma);
  EXPECT_EQ(path(32, 12288, 4096), WeightOnlyPath::wgmma);  // 3 · 2^24 exactly
  EXPECT_EQ(path(32, 4096, 11008), WeightOnlyPath::decode);
  EXPECT_EQ(path(64, 12288, 4096), WeightOnlyPath::wgmma);
  EXPECT_EQ(path(64, 4096, 11008), WeightOnlyPath::wgmma);
  EXPECT_EQ(path(64, 5120, 5120), WeightOnlyPath::wgmma);
  EXPECT_EQ(path(64, 5120, 4096), WeightOnlyPath::wgmma);  // 5 · 2^22 exactly
  EXPECT_EQ(path(64, 4096, 4096), WeightOnlyPath::decode);
  EXPECT_EQ(path(32, 5120, 5120), WeightOnlyPath::decode);
  // int8: the decode kernel up to 8 tokens and on small weights, the wgmma kernel from 2^27 weights up to 32.
  EXPECT_EQ(path(1, 57344, 8192, 8), WeightOnlyPath::decode);
  for (int64_t m : {9, 16, 32, 64}) EXPECT_EQ(path(m, 57344, 8192, 8), WeightOnlyPath::wgmma) << m;
  EXPECT_EQ(path(32, 10240, 8192, 8), WeightOnlyPath::decode);
  EXPECT_EQ(path(64, 10240, 8192, 8), WeightOnlyPath::wgmma);
  EXPECT_EQ(path(64, 4096, 11008, 8), WeightOnlyPath::decode);  // int8 from 3 · 2^24 at 33-64
  for (int64_t m : {65, 128, 130, 256, 8192})
    for (int bits : {4, 8}) EXPECT_EQ(path(m, 4096, 4096, bits), WeightOnlyPath::dequantize_then_core) << m;
  // Against the decode kernel's split plans (the decode step): the streaming kernel on every int4 layer up to
  // 16 tokens; the wgmma kernel's share above unchanged.
  EXPECT_EQ(choose_weight_only_path(8, 57344, 8192, 4, true), WeightOnlyPath::stream);
  EXPECT_EQ(choose_weight_only_path(16, 57344, 8192, 4, true), WeightOnlyPath::stream);
  for (int64_t m : {1, 2, 9, 16}) {
    EXPECT_EQ(choose_weight_only_path(m, 10240, 8192, 4, true), WeightOnlyPath::stream) << m;
    EXPECT_EQ(choose_weight_only_path(m, 4096, 4096, 4, true), WeightOnlyPath::stream) << m;
    EXPECT_EQ(choose_weight_only_path(m, 4096, 4096, 8, true), WeightOnlyPath::decode) << m;  // int8
  }
  for (int64_t m : {32, 64}) EXPECT_EQ(choose_weight_only_path(m, 10240, 8192, 4, true), WeightOnlyPath::wgmma) << m;
  EXPECT_EQ(choose_weight_only_path(32, 4096, 11008, 4, true), WeightOnlyPath::decode);
  EXPECT_EQ(choose_weight_only_path(64, 4096, 11008, 4, true), WeightOnlyPath::wgmma);
}

TEST(WeightOnlyPlan, DecodeSharesXAcrossStripsAndFillsTheLastWave) {
  constexpr int kH100Resident = 132 * 3;  // int4 at M = 1: 3 blocks of 8 warps per SM
  // 7B O at M = 1: 256 strips; 8 a block make 32 blocks, 12 K splits make 384 (one round of 396, 97%).
  const WeightOnlyDecodePlan o = plan_weight_only_decode(1, 4096, 4096, kH100Resident);
  EXPECT_EQ(o.strips_per_block, 8);
  EXPECT_EQ(o.splits, 12);
  EXPECT_EQ(o.blocks(4096), 384);
  // 70B gate+up at M = 1: 448 blocks of 8 strips would take 2 rounds for 1.13 rounds of work; 7 splits
  // make 3136 blocks, 8 rounds at 99%.
  const WeightOnlyDecodePlan gate_up = plan_weight_only_decode(1, 57344, 8192, kH100Resident);
  EXPECT_EQ(gate_up.strips_per_block, 8);
  EXPECT_EQ(gate_up.splits, 7);
  EXPECT_GE(last_wave_fill(gate_up.blocks(57344), kH100Resident), 0.98);
  EXPECT_NEAR(last_wave_fill(448, 396), 448.0 / 792.0, 1e-12);
  EXPECT_EQ(last_wave_fill(396, 396), 1.0);
  for (int64_t m : {1, 16, 64})
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{40, 200}, {4096, 4096}, {8192, 28672}, {10240, 8192}}) {
      SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k);
      const WeightOnlyDecodePlan p = plan_weight_only_decode(m, n, k, kH100Resident);
      EXPECT_TRUE(p.strips_per_block == 1 || p.strips_per_block == 2 || p.strips_per_block == 4 ||
                  p.strips_per_block == 8);
      EXPECT_GE(p.splits, 1);
      EXPECT_LE(p.splits, kMaxDecodeSplits);
      // Each warp keeps at least kMinDecodeChunksPerWarp chunks of K where K has them.
      const int64_t chunks = (k + 63) / 64, warps_per_split = kDecodeWarps / p.strips_per_block;
      if (p.splits > 1) EXPECT_GE(chunks / (p.splits * warps_per_split), kMinDecodeChunksPerWarp);
    }
  // A tiny K cannot be split: 4 chunks over 8 warps.
  EXPECT_EQ(plan_weight_only_decode(1, 4096, 256, kH100Resident).splits, 1);
  EXPECT_NE(kStripPerBlockPlan.describe().find("1 strips a block, 1 K splits"), std::string::npos);
}

// The wgmma kernel (M = 9..64): blocks of kWgmmaStrips strips, K split where the rounds of blocks times
// (chunks a block + the block's overhead) fall; its token tile is M rounded up to 16, 32 or 64.
TEST(WeightOnlyPlan, WgmmaKernelSplitsKWhereThatPays) {
  EXPECT_EQ(wgmma_tile_n(9), 16);
  EXPECT_EQ(wgmma_tile_n(16), 16);
  EXPECT_EQ(wgmma_tile_n(17), 32);
  EXPECT_EQ(wgmma_tile_n(33), 64);
  EXPECT_EQ(wgmma_tile_n(64), 64);
  constexpr int kResident = 132;  // one block an SM
  // 7B O: 256 strips make 16 blocks; K's 64 chunks take at most 4 splits, one round: 1 × (16 + 16).
  const WeightOnlyDecodePlan o = plan_weight_only_wgmma(4096, 4096, kResident);
  EXPECT_EQ(o.kernel, WeightOnlyPath::wgmma);
  EXPECT_EQ(o.strips_per_block, kWgmmaStrips);
  EXPECT_EQ(o.splits, 4);
  EXPECT_EQ(o.blocks(4096), 64);
  // 70B gate+up: 224 blocks, 2 rounds × (128 + 16); 3 splits would take 6 rounds × (43 + 16).
  EXPECT_EQ(plan_weight_only_wgmma(57344, 8192, kResident).splits, 1);
  // 70B down: 32 blocks over 448 chunks: 4 splits, one round × (112 + 16).
  EXPECT_EQ(plan_weight_only_wgmma(8192, 28672, kResident).splits, 4);
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{40, 200}, {1000, 1032}, {12288, 4096}, {8192, 28672}}) {
    SCOPED_TRACE(testing::Message() << n << "x" << k);
    const WeightOnlyDecodePlan p = plan_weight_only_wgmma(n, k, kResident);
    EXPECT_EQ(p.strips_per_block, kWgmmaStrips);
    EXPECT_GE(p.splits, 1);
    EXPECT_LE(p.splits, kMaxDecodeSplits);
    if (p.splits > 1) EXPECT_GE((k + 63) / 64 / p.splits, kMinWgmmaChunksPerSplit);
  }
  EXPECT_NE(o.describe().find("wgmma"), std::string::npos);
}

TEST(WeightOnlyPlan, RefusalsNameTheReason) {
  EXPECT_EQ(weight_only_unsupported(4096, 4096, {4, 128, false}), "");
  EXPECT_EQ(weight_only_unsupported(4096, 4096, {4, 64, true}), "");
  EXPECT_EQ(weight_only_unsupported(33, 200, {4, 200, false}), "");  // per channel, K off the chunk
  EXPECT_EQ(weight_only_unsupported(33, 200, {8, 200, false}), "");
  EXPECT_NE(weight_only_unsupported(64, 100, {4, 128, false}).find("multiple of 8"), std::string::npos);
  EXPECT_NE(weight_only_unsupported(64, 256, {4, 32, false}).find("group = 32"), std::string::npos);
  EXPECT_NE(weight_only_unsupported(64, 256, {8, 128, false}).find("per output channel"), std::string::npos);
  EXPECT_NE(weight_only_unsupported(64, 256, {3, 256, false}).find("3-bit"), std::string::npos);
  EXPECT_NE(weight_only_unsupported(8, int64_t(1) << 25, {8, int64_t(1) << 25, false}).find("2^25"), std::string::npos);
}

// The streaming kernel: up to 16 tokens; int4 scale rows (and zero rows) go by 16-byte bulk copies, so N
// must be a multiple of 8 (16 with zero points); int8's per-channel scales are read after the sums.
TEST(WeightOnlyPlan, StreamingKernelRefusalsNameTheReason) {
  EXPECT_EQ(weight_only_stream_unsupported(1, 4096, 4, false), "");
  EXPECT_EQ(weight_only_stream_unsupported(16, 40, 4, false), "");
  EXPECT_EQ(weight_only_stream_unsupported(16, 48, 4, true), "");
  EXPECT_EQ(weight_only_stream_unsupported(3, 44, 8, false), "");
  EXPECT_NE(weight_only_stream_unsupported(17, 4096, 4, false).find("m = 17"), std::string::npos);
  EXPECT_NE(weight_only_stream_unsupported(1, 44, 4, false).find("multiple of 8"), std::string::npos);
  EXPECT_NE(weight_only_stream_unsupported(1, 40, 4, true).find("multiple of 16"), std::string::npos);
  const WeightOnlyDecodePlan p = plan_weight_only_stream(16, 4096, 4096, 132 * 2);
  EXPECT_EQ(p.kernel, WeightOnlyPath::stream);
  EXPECT_EQ(p.strips_per_block, kStreamWarps);
  EXPECT_NE(p.describe().find("streaming"), std::string::npos);
}

// At 1-2 tokens the streaming kernel takes blocks of 4 strips (2 warps a strip) where they need fewer K
// splits than blocks of 8; never above 2 tokens, nor at equal splits (H200: 264 blocks at once).
TEST(WeightOnlyPlan, StreamingKernelSlicesStripsWhereThatSavesKSplits) {
  constexpr int kResident = 132 * 2;
  auto strips = [](int64_t m, int64_t n, int64_t k) {
    return plan_weight_only_stream(m, n, k, kResident).strips_per_block;
  };
  for (int64_t m : {1, 2}) {
    EXPECT_EQ(strips(m, 12288, 4096), 4) << m;  // 2 splits → 1
    EXPECT_EQ(strips(m, 22016, 4096), 4) << m;  // 3 → 1
    EXPECT_EQ(strips(m, 8192, 8192), 4) << m;   // 4 → 2
    EXPECT_EQ(strips(m, 27648, 5120), 8) << m;  // 1 split either way
    EXPECT_EQ(strips(m, 57344, 8192), 8) << m;
    EXPECT_EQ(strips(m, 10240, 8192), 8) << m;  // 3 either way
  }
  EXPECT_LT(plan_weight_only_stream(1, 12288, 4096, kResident).splits,
            plan_weight_only_stream(3, 12288, 4096, kResident).splits);
  for (int64_t m : {3, 16}) EXPECT_EQ(strips(m, 12288, 4096), 8) << m;
}

// The shipped configs: W4A16 group 128 on every Llama-2 layer at every token count the issue names, the
// other formats on a few layers, W8A16 on every layer; the quick sweep parses.
TEST(WeightOnlyConfigs, EveryLlamaLayerAtEveryTokenCount) {
  const Config cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/gemm_w4a16.yaml", builtin_registry());
  std::map<std::string, std::map<std::pair<int64_t, int64_t>, std::set<int64_t>>> swept;  // format -> layer -> M
  for (const PlannedCase& pc : expand_sweep(cfg, builtin_registry())) {
    const suites::GemmShape s(pc.c);
    const std::string format = pc.c.op == "gemm_w8a16" ? "w8" : "w4/g" + std::to_string(pc.c.params.i("group")) +
                                                                    "/" + pc.c.params.s("zero");
    swept[format][{s.n, s.k}].insert(s.m);
  }
  const std::set<std::pair<int64_t, int64_t>> llama = {
      {12288, 4096}, {4096, 4096},  {22016, 4096}, {4096, 11008}, {15360, 5120}, {5120, 5120},
      {27648, 5120}, {5120, 13824}, {10240, 8192}, {8192, 8192},  {57344, 8192}, {8192, 28672}};
  std::set<std::pair<int64_t, int64_t>> layers;
  for (auto& [layer, ms] : swept["w4/g128/sym"]) {
    layers.insert(layer);
    EXPECT_EQ(ms, (std::set<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256})) << layer.first << "x" << layer.second;
  }
  EXPECT_EQ(layers, llama);
  layers.clear();
  for (auto& [layer, ms] : swept["w8"]) layers.insert(layer);
  EXPECT_EQ(layers, llama);
  for (const char* format : {"w4/g64/sym", "w4/g0/sym", "w4/g128/asym", "w4/g64/asym", "w4/g0/asym"})
    EXPECT_FALSE(swept[format].empty()) << format;
  const Config quick =
      load_config(std::string(TOPT_SOURCE_DIR) + "/configs/gemm_w4a16_quick.yaml", builtin_registry());
  EXPECT_EQ(expand_sweep(quick, builtin_registry()).size(), 21u);
}

// The cost: x and y, and the packed weights as the kernels read them (codes, scales, zeros).
TEST(WeightOnlyCost, BytesAreThePackedWeightsScalesAndZeros) {
  Case c{"gemm_w4a16", {}, DType::bf16};
  for (auto [name, value] : std::vector<std::pair<std::string, Value>>{
           {"m", int64_t(1)}, {"n", int64_t(4096)}, {"k", int64_t(4096)}, {"group", int64_t(128)}, {"zero", std::string("asym")}})
    c.params.set(name, value);
  const Cost cost = builtin_registry().find("gemm_w4a16")->cost(c);
  EXPECT_DOUBLE_EQ(cost.bytes, 4096.0 * 2 + 4096.0 * 4096 / 2 + 32.0 * 4096 * 3 + 4096.0 * 2);
  EXPECT_TRUE(cost.reads_only);
  EXPECT_DOUBLE_EQ(cost.flops, 2.0 * 4096 * 4096);
  c.params.set("group", int64_t(32));
  EXPECT_NE(builtin_registry().find("gemm_w4a16")->invalid(c).find("group = 32"), std::string::npos);
}


// CUTLASS's int4b_t layout (the peer's weights, packed at prepare): the stored code − 8 as a
// two's-complement nibble, the even K index low; packed → unpacked is the quantized matrix bit for bit.
TEST(CutlassInt4, PackedThenUnpackedIsTheQuantizedMatrixBitForBit) {
  using baselines::cutlass_gemm::cutlass_int4_byte;
  using baselines::cutlass_gemm::cutlass_int4_code;
  const uint8_t stored[4] = {8, 15, 0, 9};  // codes 0, 7, −8, 1
  EXPECT_EQ(cutlass_int4_byte(stored, 0), 0x70);
  EXPECT_EQ(cutlass_int4_byte(stored, 1), 0x18);
  for (const WeightShape& s : kShapes) {
    if (s.n * s.k % 2 != 0) continue;
    const std::vector<uint8_t> codes = random_codes(s, 4, 11);
    std::vector<uint8_t> packed(codes.size() / 2);
    for (size_t i = 0; i < packed.size(); ++i) packed[i] = cutlass_int4_byte(codes.data(), int64_t(i));
    for (size_t i = 0; i < codes.size(); ++i)
      ASSERT_EQ(cutlass_int4_code(packed.data(), int64_t(i)), codes[i]) << s.n << "x" << s.k << " element " << i;
  }
}

// The CUTLASS peer of the weight-only ops refuses up front what it cannot take: asymmetric int4 (its
// zero mode rounds more than the op's dequantization) and rows its TMA cannot load; the shape is
// checked before the device.
TEST(CutlassWeightOnlyPeer, RefusesWhatItCannotTake) {
  auto refusal = [](int64_t n, int64_t k, const WeightFormat& f) {
    Case c{"gemm_w4a16", {}, DType::bf16};
    for (auto [name, value] : std::vector<std::pair<std::string, int64_t>>{{"m", 1}, {"n", n}, {"k", k}})
      c.params.set(name, value);
    return suites::cutlass_weight_only_unsupported(suites::GemmShape(c), f);
  };
  EXPECT_NE(refusal(4096, 4096, {4, 128, true}).find("zero mode"), std::string::npos);
  EXPECT_NE(refusal(4096, 1032, {4, 128, false}).find("K = 1032 is not a multiple of 32"), std::string::npos);
  EXPECT_NE(refusal(4096, 1032, {8, 1032, false}).find("K = 1032 is not a multiple of 16"), std::string::npos);
  EXPECT_NE(refusal(1004, 4096, {4, 64, false}).find("N = 1004 is not a multiple of 8"), std::string::npos);
  // Aligned shapes pass the shape checks (what remains is the device's: none here, or an H100).
  for (const WeightFormat& f : {WeightFormat{4, 128, false}, WeightFormat{4, 64, false}, WeightFormat{4, 1056, false},
                                WeightFormat{8, 1040, false}}) {
    const std::string why = refusal(1000, f.bits == 4 ? 1056 : 1040, f);
    EXPECT_EQ(why.find("multiple of"), std::string::npos) << why;
    EXPECT_EQ(why.find("zero"), std::string::npos) << why;
  }
  for (const char* op : {"gemm_w4a16", "gemm_w8a16"}) {
    const Impl* cutlass = builtin_registry().find(op)->find_impl("cutlass");
    ASSERT_NE(cutlass, nullptr) << op;
    EXPECT_EQ(cutlass->role, Role::peer) << op;
  }
}

}  // namespace
}  // namespace topt
