// topt profile --timeline's tables, from hand-made kernel records.
#include <gtest/gtest.h>

#include "harness/kernel_timeline.h"

namespace topt {
namespace {

KernelRecord kernel(const std::string& name, uint64_t start_ns, uint64_t end_ns) {
  KernelRecord r;
  r.name = name;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.grid = dim3(132, 1, 1);
  r.block = dim3(384, 1, 1);
  r.registers = 168;
  r.shared_bytes = 196608;
  return r;
}

TEST(KernelTimeline, ShortNameDropsReturnTypeNamespacesTemplatesAndParameters) {
  EXPECT_EQ(kernel_short_name("void topt::kernels::gemm::stream_kernel<8, true>(topt::kernels::gemm::Params)"),
            "stream_kernel");
  EXPECT_EQ(kernel_short_name("rmsnorm_kernel(float const*, int)"), "rmsnorm_kernel");
  EXPECT_EQ(kernel_short_name("nvjet_sm90_tst_64x8_64x16"), "nvjet_sm90_tst_64x8_64x16");
  EXPECT_EQ(kernel_short_name("topt::testing::(anonymous namespace)::copy_kernel(int4 const*, int4*, unsigned long)"),
            "copy_kernel");
}

TEST(KernelTimeline, RowsGiveStartDurationAndGapIncludingOverlap) {
  // b starts 1 µs after a ends; c starts 0.5 µs before b ends (PDL overlap).
  std::vector<KernelRecord> records{kernel("void ns::a<1, 2>(int)", 10000, 15000), kernel("b", 16000, 20000),
                                    kernel("b", 19500, 21000)};
  const std::string csv = timeline_csv(records);
  EXPECT_NE(csv.find("0,a,0.000,5.000,0.000,5.000,132x1x1,384x1x1,168,196608,\"void ns::a<1, 2>(int)\"\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find("1,b,6.000,4.000,1.000,4.000,"), std::string::npos) << csv;
  // The overlapped kernel adds only its end past b's: 1 µs of its 1.5.
  EXPECT_NE(csv.find("2,b,9.500,1.500,-0.500,1.000,"), std::string::npos) << csv;
  EXPECT_EQ(timeline_summary(records), "3 kernels, span 11.0 us, kernels' sum 10.5 us, idle gaps 1.0 us");
}

TEST(KernelTimeline, ByKernelSumsTheTimeEachAddsLargestFirst) {
  // b2 starts with a2 (PDL) and waits for it: it adds only its last 2 µs of 3.
  std::vector<KernelRecord> records{kernel("a", 0, 1000), kernel("b", 1000, 4000), kernel("a", 4000, 5000),
                                    kernel("b", 4000, 7000), kernel("c", 6000, 6500)};
  EXPECT_EQ(timeline_by_kernel_csv(records),
            "kernel,launches,added_us,mean_added_us,duration_us,share\n"
            "b,2,5.000,2.500,6.000,0.7143\n"
            "a,2,2.000,1.000,2.000,0.2857\n"
            "c,1,0.000,0.000,0.500,0.0000\n");
}

TEST(KernelTimeline, EmptyLaunchAndFileNames) {
  EXPECT_EQ(timeline_summary({}), "no kernels");
  EXPECT_EQ(timeline_csv({}),
            "index,kernel,start_us,duration_us,gap_us,added_us,grid,block,registers,shared_bytes,name\n");
  EXPECT_EQ(timeline_file_stem("decode_step/ours_v2_pdl/model=llama2-7b,q_len=5"),
            "decode_step_ours_v2_pdl_model_llama2-7b_q_len_5");
  const std::string long_name = std::string(300, 'x') + "q_len=5", other = std::string(301, 'x') + "q_len=5";
  const std::string stem = timeline_file_stem(long_name);
  EXPECT_EQ(stem.size(), 160u);
  EXPECT_EQ(stem.substr(0, 100), long_name.substr(0, 100));
  EXPECT_EQ(stem.substr(stem.size() - 7), "q_len_5");
  EXPECT_NE(stem, timeline_file_stem(other));
}

}  // namespace
}  // namespace topt
