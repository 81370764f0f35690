// The host side of programmatic dependent launch: which launches carry the attribute. (That the
// kernels wait under it is the GPU tests' part: the GEMM chain, the decode step and spec decode.)
#include <gtest/gtest.h>

#include "kernels/sm90/pdl.h"

namespace topt::testing {

namespace {

unsigned attributes_now(cudaLaunchAttribute (&attrs)[2]) {
  attrs[0].id = cudaLaunchAttributeClusterDimension;  // a caller's own attribute stays first
  return kernels::add_pdl_attribute(attrs, 1);
}

}  // namespace

TEST(Pdl, OnlyLaunchesInsideAnOpenScopeCarryTheAttribute) {
  cudaLaunchAttribute attrs[2]{};
  EXPECT_EQ(attributes_now(attrs), 1u);
  {
    const kernels::PdlScope on(true);
    ASSERT_EQ(attributes_now(attrs), 2u);
    EXPECT_EQ(attrs[0].id, cudaLaunchAttributeClusterDimension);
    EXPECT_EQ(attrs[1].id, cudaLaunchAttributeProgrammaticStreamSerialization);
    EXPECT_EQ(attrs[1].val.programmaticStreamSerializationAllowed, 1);
    {
      const kernels::PdlScope off(false);  // a nested scope may turn it off...
      EXPECT_EQ(attributes_now(attrs), 1u);
    }
    EXPECT_EQ(attributes_now(attrs), 2u);  // ...and its end restores the outer one's setting
  }
  EXPECT_EQ(attributes_now(attrs), 1u);
}

}  // namespace topt::testing
