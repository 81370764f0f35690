#include "kernels/gemm/weight_only_pack.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

namespace topt::kernels::gemm {

std::vector<uint32_t> pack_weights(const std::vector<uint8_t>& codes, const WeightShape& shape, int bits) {
  std::vector<uint32_t> packed(size_t(packed_bytes(shape, bits) / 4));
  for (size_t w = 0; w < packed.size(); ++w) packed[w] = pack_word(codes.data(), shape, bits, int64_t(w));
  return packed;
}

std::vector<uint8_t> unpack_weights(const std::vector<uint32_t>& packed, const WeightShape& shape, int bits) {
  std::vector<uint8_t> codes(size_t(shape.n * shape.k));
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  for (size_t w = 0; w < packed.size(); ++w)
    for (int i = 0; i < per_word; ++i) {
      const PackedElement e = packed_element(shape, bits, int64_t(w) * per_word + i);
      if (e.n < shape.n && e.k < shape.k)
        codes[size_t(e.n * shape.k + e.k)] = code_of_stored(bits, (packed[w] >> (bits * i)) & mask);
    }
  return codes;
}

uint16_t fp16_bits_to_bf16_bits(uint16_t fp16) {
  __half_raw h;
  h.x = fp16;
  const __nv_bfloat16_raw b = __nv_bfloat16(__float2bfloat16_rn(__half2float(__half(h))));
  return b.x;
}

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// Checks the sizes both layouts share and fills what they share: shape, format, the scales in bf16.
QuantizedWeight imported(const char* layout, const std::vector<int32_t>& qweight, size_t qweight_words,
                         const std::vector<int32_t>& qzeros, const std::vector<uint16_t>& scales_fp16, int64_t n,
                         int64_t k, int64_t group) {
  const std::string where = std::string(layout) + " import: ";
  require(n > 0 && k > 0 && group > 0, where + "n, k and group must be >= 1");
  require(n % 8 == 0, where + "N = " + std::to_string(n) + " is not a multiple of 8 (qzeros pack 8 columns a word)");
  QuantizedWeight w;
  w.shape = {n, k};
  w.format = {4, group, true};
  const int64_t groups = scale_groups(k, group);
  require(qweight.size() == qweight_words, where + "qweight holds " + std::to_string(qweight.size()) +
                                               " words, the shape needs " + std::to_string(qweight_words));
  require(int64_t(qzeros.size()) == groups * n / 8, where + "qzeros holds " + std::to_string(qzeros.size()) +
                                                        " words, " + std::to_string(groups) + " groups need " +
                                                        std::to_string(groups * n / 8));
  require(int64_t(scales_fp16.size()) == groups * n, where + "scales hold " + std::to_string(scales_fp16.size()) +
                                                         " values, " + std::to_string(groups) + " groups need " +
                                                         std::to_string(groups * n));
  w.codes.resize(size_t(n * k));
  w.zeros.resize(size_t(groups * n));
  w.scales.resize(size_t(groups * n));
  for (size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = fp16_bits_to_bf16_bits(scales_fp16[i]);
  return w;
}

uint8_t nibble(int32_t word, int index) { return uint8_t((uint32_t(word) >> (4 * index)) & 0xF); }

// Symmetric where every zero is 8: no zeros array.
void drop_symmetric_zeros(QuantizedWeight& w) {
  for (uint8_t z : w.zeros)
    if (z != 8) return;
  w.zeros.clear();
  w.format.asymmetric = false;
}

}  // namespace

QuantizedWeight import_gptq(const std::vector<int32_t>& qweight, const std::vector<int32_t>& qzeros,
                            const std::vector<uint16_t>& scales_fp16, int64_t n, int64_t k, int64_t group) {
  require(k % 8 == 0, "GPTQ import: K = " + std::to_string(k) + " is not a multiple of 8 (qweight packs 8 rows of K a word)");
  QuantizedWeight w = imported("GPTQ", qweight, size_t(k / 8 * n), qzeros, scales_fp16, n, k, group);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c) w.codes[size_t(c * k + kk)] = nibble(qweight[size_t(kk / 8 * n + c)], int(kk % 8));
  for (size_t i = 0; i < w.zeros.size(); ++i)
    w.zeros[i] = uint8_t((nibble(qzeros[i / 8], int(i % 8)) + 1) & 0xF);  // v1 stores zero − 1
  drop_symmetric_zeros(w);
  return w;
}

QuantizedWeight import_awq(const std::vector<int32_t>& qweight, const std::vector<int32_t>& qzeros,
                           const std::vector<uint16_t>& scales_fp16, int64_t n, int64_t k, int64_t group) {
  QuantizedWeight w = imported("AWQ", qweight, size_t(k * n / 8), qzeros, scales_fp16, n, k, group);
  auto unpack_row = [](const int32_t* words, int64_t columns, uint8_t* out, int64_t stride) {
    for (int64_t c = 0; c < columns / 8; ++c)
      for (int i = 0; i < 8; ++i) out[(8 * c + kAwqOrder[i]) * stride] = nibble(words[c], i);
  };
  for (int64_t kk = 0; kk < k; ++kk) unpack_row(&qweight[size_t(kk * n / 8)], n, &w.codes[size_t(kk)], k);
  const int64_t groups = scale_groups(k, group);
  for (int64_t g = 0; g < groups; ++g) unpack_row(&qzeros[size_t(g * n / 8)], n, &w.zeros[size_t(g * n)], 1);
  return w;
}

}  // namespace topt::kernels::gemm
