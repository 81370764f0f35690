// Decode attention over paged caches: every implementation against the reference on scattered
// block tables, ragged lengths (1, page ± 1), MHA/GQA and speculative q_len (1-16, token trees); the
// split-KV combine across repeated launches. append_kv and gather_kv: test_kv_append.cpp.
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/gpu/gpu_test.h"

namespace topt::testing {

struct DecodeParam {
  int64_t batch, context;
  const char* lengths;
  int64_t q_len, heads, kv_heads, page_size;
};

Case decode_case(const DecodeParam& s, DType dt) {
  Params p;
  p.set("batch", s.batch);
  p.set("context", s.context);
  p.set("lengths", std::string(s.lengths));
  p.set("q_len", s.q_len);
  p.set("heads", s.heads);
  p.set("kv_heads", s.kv_heads);
  p.set("page_size", s.page_size);
  return make_case("attention_decode", p, dt);
}

// Three launches of `inst`, each on poisoned outputs and checked against the reference: state an
// instance keeps between launches (split counters, a plan made again, a packed output) must leave
// every one right.
void expect_right_on_every_launch(Instance& inst, const Problem& problem, const Reference& ref, cudaStream_t stream,
                                  const std::string& what) {
  for (int launch = 0; launch < 3; ++launch) {
    for (auto& out : problem.outputs()) poison_nan(out, stream);
    inst.launch(stream);
    inst.copy_out(stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CheckResult r = check_outputs(problem, ref, stream);
    EXPECT_TRUE(r.passes()) << what << " launch " << launch << ": " << r.describe();
  }
}

class DecodeGpu : public GpuTest, public ::testing::WithParamInterface<std::tuple<DecodeParam, DType>> {};

// Ragged batches hold lengths 1, page − 1, page, page + 1 beside random ones; batch 1 with a long
// context takes many splits, large q_len more than one row block.
INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeGpu,
    ::testing::Combine(::testing::ValuesIn(shape_grid<DecodeParam>({{1, 1, "uniform", 1, 8, 8, 16},
                                                                    {7, 300, "ragged", 1, 8, 8, 16},
                                                                    {6, 700, "ragged", 1, 16, 2, 32},
                                                                    {8, 257, "ragged", 2, 64, 8, 16},
                                                                    {3, 2049, "uniform", 4, 16, 2, 64},
                                                                    {5, 513, "ragged", 3, 4, 4, 128},
                                                                    {1, 4099, "uniform", 8, 8, 8, 256},
                                                                    {2, 17, "uniform", 8, 2, 1, 16},
                                                                    // K = 8-15 drafts: MHA's 16 rows in
                                                                    // one tile, GQA's in 5-8 row blocks
                                                                    {2, 33, "uniform", 9, 4, 4, 16},
                                                                    {3, 700, "ragged", 12, 16, 2, 16},
                                                                    {1, 4100, "uniform", 16, 8, 8, 64},
                                                                    {2, 300, "ragged", 16, 64, 8, 32},
                                                                    // GQA's 32 and 64 rows in one block's
                                                                    // row groups (ours_v3), many splits
                                                                    {1, 3001, "uniform", 8, 64, 8, 16},
                                                                    {3, 1001, "ragged", 4, 64, 8, 16}},
                                                                   {{1, 5000, "uniform", 1, 64, 8, 16},
                                                                    // 1280 groups: enough rounds of blocks
                                                                    // for ours_v3's tail plan
                                                                    {40, 300, "uniform", 1, 32, 32, 16}})),
                       ::testing::ValuesIn(dtype_grid())),
    [](const auto& info) {
      const DecodeParam& s = std::get<0>(info.param);
      return std::to_string(s.batch) + "x" + std::to_string(s.context) + "_" + s.lengths + "_q" +
             std::to_string(s.q_len) + "_h" + std::to_string(s.heads) + "kv" + std::to_string(s.kv_heads) + "_p" +
             std::to_string(s.page_size) + "_" + dtype_name(std::get<1>(info.param));
    });

TEST_P(DecodeGpu, OursAndGatherCublasMatchTheReference) {
  auto [s, dt] = GetParam();
  Case c = decode_case(s, dt);
  for (const char* impl : {"ours", "ours_simt", "ours_v2", "ours_v2_2stage", "ours_v3", "gather_cublas"}) {
    if (left_out_under_sanitizer(c.op, impl)) continue;
    CheckResult r = run_and_check(c, impl);
    EXPECT_TRUE(r.passes()) << impl << " " << c.label() << ": " << r.describe();
  }
}

TEST_P(DecodeGpu, CudnnMatchesOrRefusesClearly) {
  auto [s, dt] = GetParam();
  Case c = decode_case(s, dt);
  if (left_out_under_sanitizer(c.op, "cudnn")) GTEST_SKIP() << "cuDNN's kernels: checked by the plain GPU run";
  for (const char* impl : {"cudnn", "cudnn_paged"}) {
    try {
      CheckResult r = run_and_check(c, impl);
      EXPECT_TRUE(r.passes()) << impl << " " << c.label() << ": " << r.describe();
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("cuDNN"), std::string::npos) << e.what();
    }
  }
}

// FlashInfer's tensor-core decode (its batch prefill on the pages, our table turned into its
// indptr/indices/last_page_len): every shape of the grid, head_dim 128 (what it is built for), page
// sizes 16 to 256, GQA, ragged lengths, q_len 1-16 (queries repacked, outputs unpacked by copy_out).
// Its CUDA-core decode (flashinfer_simt) on the shapes it takes: one query token, group 1, 2, 3, 4 or 8.
TEST_P(DecodeGpu, FlashInferPeersMatchTheReference) {
  auto [s, dt] = GetParam();
  Case c = decode_case(s, dt);
  for (const char* name : {"flashinfer", "flashinfer_simt"}) {
    if (left_out_under_sanitizer(c.op, name)) continue;
    const Impl* impl = builtin_registry().find(c.op)->find_impl(name);
    ASSERT_NE(impl, nullptr) << name;
    ASSERT_EQ(impl->role, Role::peer) << name;
    if (std::string why = impl->unsupported(c); !why.empty()) {
      EXPECT_EQ(std::string(name), "flashinfer_simt") << c.label() << ": " << why;
      EXPECT_GT(s.q_len, 1) << c.label() << ": " << why;  // the grid's groups are 1, 2 and 8
      continue;
    }
    CheckResult r = run_and_check(c, name);
    EXPECT_TRUE(r.passes()) << name << " " << c.label() << ": " << r.describe();
  }
}

// FlashInfer's plans split a long batch-1 sequence over their float workspace and merge the parts:
// every launch is right, one query token or four (the packed output poisoned again after each
// copy_out), tensor cores or CUDA cores.
TEST_F(GpuTest, FlashInferDecodeIsRightOnEveryLaunch) {
  if (small_shapes_only()) GTEST_SKIP() << "repeated launches of a large case: memcheck's, not racecheck's";
  for (auto [impl, q_len] :
       {std::pair{"flashinfer", 1}, std::pair{"flashinfer", 4}, std::pair{"flashinfer_simt", 1}}) {
    Case c = decode_case({1, 9000, "uniform", q_len, 64, 8, 16}, DType::bf16);
    const OpDef* op = builtin_registry().find(c.op);
    auto problem = op->make_problem(c, 5, stream);
    Reference ref = compute_reference(*problem, int64_t(1) << 22, stream);
    auto inst = op->find_impl(impl)->prepare(*problem, c, stream);
    const auto metrics = inst->metrics();
    ASSERT_EQ(metrics.size(), 1u);
    EXPECT_EQ(metrics[0].first, "plan_us");
    EXPECT_GT(metrics[0].second, 0.0);
    expect_right_on_every_launch(*inst, *problem, ref, stream, std::string(impl) + " q_len " + std::to_string(q_len));
  }
}

// Head dims it is not built for are refused up front, with the reason.
TEST(DecodePlan, FlashInferRefusesOtherHeadDims) {
  Params p;
  p.set("batch", int64_t(2));
  p.set("context", int64_t(100));
  p.set("heads", int64_t(8));
  p.set("kv_heads", int64_t(8));
  p.set("head_dim", int64_t(64));
  Case c = make_case("attention_decode", p, DType::bf16);
  for (const char* impl : {"flashinfer", "flashinfer_simt"}) {
    const std::string why = builtin_registry().find(c.op)->find_impl(impl)->unsupported(c);
    EXPECT_NE(why.find("head_dim 64"), std::string::npos) << impl << ": " << why;
  }
  // Its CUDA-core decode takes one query token and the group sizes its dispatch has.
  c.params.set("head_dim", int64_t(128));
  c.params.set("q_len", int64_t(2));
  EXPECT_NE(builtin_registry().find(c.op)->find_impl("flashinfer_simt")->unsupported(c).find("q_len 2"),
            std::string::npos);
  c.params.set("q_len", int64_t(1));
  c.params.set("heads", int64_t(16));
  c.params.set("kv_heads", int64_t(1));
  EXPECT_NE(builtin_registry().find(c.op)->find_impl("flashinfer_simt")->unsupported(c).find("group 16"),
            std::string::npos);
  c.params.set("kv_heads", int64_t(2));
  EXPECT_EQ(builtin_registry().find(c.op)->find_impl("flashinfer_simt")->unsupported(c), "");

}

// The split combine counts finished splits in the workspace and resets the count: every launch
// after the first must be right too (the harness checks the first and times the rest).
TEST_F(GpuTest, DecodeSplitCombineIsRightOnEveryLaunch) {
  if (small_shapes_only()) GTEST_SKIP() << "repeated launches of a large case: memcheck's, not racecheck's";
  Case c = decode_case({2, 6000, "ragged", 1, 64, 8, 16}, DType::bf16);
  const OpDef* op = builtin_registry().find(c.op);
  auto problem = op->make_problem(c, 5, stream);
  Reference ref = compute_reference(*problem, int64_t(1) << 22, stream);
  for (const char* impl : {"ours", "ours_simt", "ours_v2", "ours_v2_2stage", "ours_v3"}) {
    auto inst = op->find_impl(impl)->prepare(*problem, c, stream);
    EXPECT_GT(inst->workspace_bytes(), 0u) << "expected a split-KV plan";
    expect_right_on_every_launch(*inst, *problem, ref, stream, impl);
  }
}

// host_plan=per_launch: ours and FlashInfer's plan and upload again inside every launch, which must
// be right every time (the upload rewrites the work list and zeroes the combine counters under the
// next launch); both carry plan_us, and say that their launch does host work.
TEST_F(GpuTest, DecodePlanPerLaunchIsRightOnEveryLaunch) {
  if (small_shapes_only()) GTEST_SKIP() << "repeated launches of a large case: memcheck's, not racecheck's";
  Case c = decode_case({5, 6000, "ragged", 1, 64, 8, 16}, DType::bf16);
  c.params.set("host_plan", std::string("per_launch"));
  const OpDef* op = builtin_registry().find(c.op);
  auto problem = op->make_problem(c, 5, stream);
  Reference ref = compute_reference(*problem, int64_t(1) << 22, stream);
  for (const char* impl : {"ours_v2", "ours_v3", "flashinfer", "flashinfer_simt"}) {
    auto inst = op->find_impl(impl)->prepare(*problem, c, stream);
    EXPECT_NE(inst->host_work_in_launch(), "") << impl;
    const auto metrics = inst->metrics();
    ASSERT_FALSE(metrics.empty()) << impl;
    EXPECT_EQ(metrics[0].first, "plan_us") << impl;
    EXPECT_GT(metrics[0].second, 0.0) << impl;
    expect_right_on_every_launch(*inst, *problem, ref, stream, impl);
  }
  // The same case planned apart: no host work in the launch.
  c.params.set("host_plan", std::string("apart"));
  auto problem_apart = op->make_problem(c, 5, stream);
  EXPECT_EQ(op->find_impl("ours_v3")->prepare(*problem_apart, c, stream)->host_work_in_launch(), "");
}

// gather_cublas's two GEMMs are each the fastest of cuBLASLt's candidates, named in its plan.
TEST_F(GpuTest, GatherCublasNamesItsChosenCandidates) {
  if (left_out_under_sanitizer("attention_decode", "gather_cublas")) GTEST_SKIP() << "cuBLASLt: not racecheck's";
  Case c = decode_case({4, 3000, "ragged", 2, 64, 8, 16}, DType::bf16);
  const OpDef* op = builtin_registry().find(c.op);
  auto problem = op->make_problem(c, 5, stream);
  const PlanChoice plan = op->find_impl("gather_cublas")->prepare(*problem, c, stream)->plan_choice();
  EXPECT_GE(plan.tried, 2) << plan.name;
  EXPECT_EQ(plan.name.find("q·kᵀ: heuristic candidate"), 0u) << plan.name;
  EXPECT_NE(plan.name.find("; p·v: heuristic candidate"), std::string::npos) << plan.name;
  EXPECT_TRUE(op->find_impl("gather_cublas")->chooses_plan);
}

// Tables whose pages follow one another (a fresh pool), as the sweep's page_order=sequential rows.
TEST_F(GpuTest, DecodeIsRightOnSequentialPages) {
  // Pages of 16 and 32 tokens: a tile of 4 or 2 consecutive pages is one TMA copy per half.
  for (int64_t page_size : {16, 32}) {
    Case c = decode_case({4, 3000, "ragged", 1, 64, 8, page_size}, DType::bf16);
    c.params.set("page_order", std::string("sequential"));
    for (const char* impl : {"ours_v3", "gather_cublas"}) {
      if (left_out_under_sanitizer(c.op, impl)) continue;
      CheckResult r = run_and_check(c, impl);
      EXPECT_TRUE(r.passes()) << impl << " " << c.label() << ": " << r.describe();
    }
  }
}

// What plan_decode reads of a cache: its shape (bf16, page 16), no memory.
kernels::PagedKv planned_cache(int batch, int kv_heads) {
  kernels::PagedKv kv;
  kv.batch = batch;
  kv.kv_heads = kv_heads;
  kv.head_dim = 128;
  kv.page_size = 16;
  return kv;
}

// A ragged batch's split comes from a longest-first schedule of its blocks. One 32k sequence
// beside fifteen of 12000 tokens: 480 blocks of 12000 tokens would take two rounds of the block
// slots, so even those are cut, and the 32k one into more splits than in a uniform batch.
TEST_F(GpuTest, DecodeRaggedPlansCutTheLongestSequence) {
  const kernels::PagedKv kv = planned_cache(16, 32);
  std::vector<int> lens(16, 12000);
  lens[0] = 32768;
  const kernels::DecodeShape uniform{32, 1, 32768, 16 * 32768};
  const kernels::DecodeShape ragged{32, 1, 32768, 32768 + 15 * 12000, lens};
  const auto u = kernels::plan_decode(kv, uniform, kernels::DecodeVariant::tma);
  const auto r = kernels::plan_decode(kv, ragged, kernels::DecodeVariant::tma);
  EXPECT_LT(r.split_tokens, 12000) << r.describe();
  EXPECT_GT(r.splits, u.splits) << r.describe() << " | " << u.describe();
}

// A uniform batch takes the split count whose rounds of blocks end first, a block costing its tiles and its
// prologue (kBlockOverheadTiles): 13B's 40 heads at batch 1 x 1k run a few splits in one round, not the
// five rounds of one-tile splits that filled the last wave best.
TEST_F(GpuTest, DecodeUniformPlansWeighABlocksPrologue) {
  const kernels::PagedKv kv = planned_cache(1, 40);
  const kernels::DecodeShape shape{40, 1, 1024, 1024};
  const auto plan = kernels::plan_decode(kv, shape, kernels::DecodeVariant::tma);
  const int slots = current_device_sm_count() * plan.blocks_per_sm;
  EXPECT_GT(plan.splits, 1) << plan.describe();
  EXPECT_LE(40 * plan.splits, slots) << plan.describe();
}

// Uniform groups keep the deep ring (1 block an SM) where its plan fills one round of the SMs: 13B at
// batch 1 (40 heads, 3 splits: 120 blocks) and 7B at batch 4 (128 groups, one split); 13B at batch 2 (80
// groups: one split on 80 SMs, or three in two rounds) goes to the 3-stage ring's one round of two an SM.
TEST_F(GpuTest, DecodeDeepRingOnlyWhereItFillsARound) {
  if (current_device_sm_count() != 132) GTEST_SKIP() << "the plans below are an H100/H200's (132 SMs)";
  for (auto [batch, heads, stages] : {std::tuple{1, 40, kernels::decode::kStagesTmaDeep},
                                      {4, 32, kernels::decode::kStagesTmaDeep}, {2, 40, kernels::decode::kStagesTma}}) {
    const kernels::PagedKv kv = planned_cache(batch, heads);
    for (int context : {1024, 4096}) {
      const kernels::DecodeShape shape{heads, 1, context, int64_t(batch) * context};
      const auto plan = kernels::plan_decode(kv, shape, kernels::DecodeVariant::tma);
      EXPECT_EQ(plan.tma_stages, stages) << batch << "x" << context << ", " << heads << " heads: " << plan.describe();
      EXPECT_LE(int64_t(batch) * heads * plan.splits, int64_t(132) * plan.blocks_per_sm) << plan.describe();
    }
  }
}

// GQA rows past 16 go to one block's row groups on the deep ring (its 8 warps), 64 rows a block at
// most: 70B's q_len 2 / 4 / 8 / 16 (16 / 32 / 64 / 128 rows) take 1 / 1 / 1 / 2 row blocks.
TEST_F(GpuTest, DecodeGqaRowsShareABlocksTiles) {
  const kernels::PagedKv kv = planned_cache(16, 8);
  for (auto [q_len, rows, row_blocks] : {std::tuple{2, 16, 1}, {4, 32, 1}, {8, 64, 1}, {16, 64, 2}}) {
    const kernels::DecodeShape shape{64, q_len, 4096, 16 * 4096};
    const auto plan = kernels::plan_decode(kv, shape, kernels::DecodeVariant::tma);
    EXPECT_EQ(plan.rows_per_block, rows) << plan.describe();
    EXPECT_EQ(plan.row_blocks, row_blocks) << plan.describe();
    if (rows > 16) EXPECT_EQ(plan.tma_stages, kernels::decode::kStagesTmaDeep) << plan.describe();
  }
}

// With its lengths known, a ragged batch launches a work list: every (group, row block, split)
// that holds keys once, the longest splits first, and one block for a sequence of length 0 (it
// writes its zero output). A uniform batch keeps the grid; lengths that do not fit are refused.
TEST_F(GpuTest, DecodeRaggedWorkListHoldsTheBlocksWithKeysLongestFirst) {
  const kernels::PagedKv kv = planned_cache(6, 8);
  const std::vector<int> lens{32768, 0, 1, 17, 5000, 12000};
  kernels::DecodeShape shape{64, 1, 32768, std::accumulate(lens.begin(), lens.end(), int64_t(0)), lens};
  const auto plan = kernels::plan_decode(kv, shape, kernels::DecodeVariant::tma);
  ASSERT_FALSE(plan.work.empty()) << plan.describe();
  const int split = plan.split_tokens;
  auto group_splits = [&](int len) { return std::max(1, (len + split - 1) / split); };
  size_t expected = 0;
  for (int len : lens) expected += size_t(group_splits(len)) * kv.kv_heads * plan.row_blocks;
  EXPECT_EQ(plan.work.size(), expected) << plan.describe();
  std::set<std::tuple<int, int, int>> seen;
  int previous = split;
  for (const auto& w : plan.work) {
    const int len = lens[size_t(w.group / kv.kv_heads)];
    const int tokens = std::clamp(len - w.split * split, 0, split);
    EXPECT_LE(tokens, previous) << "not longest first";
    previous = tokens;
    EXPECT_TRUE(tokens > 0 || len == 0) << "a block with no keys in a sequence that has some";
    EXPECT_EQ(w.group_splits, group_splits(len));
    EXPECT_TRUE(seen.insert({w.group, w.row_block, w.split}).second) << "a block listed twice";
  }
  // The workspace ends with a combine counter per (group, row block), all that its upload zeroes.
  EXPECT_EQ(plan.counter_bytes, size_t(kv.batch) * kv.kv_heads * plan.row_blocks * sizeof(int)) << plan.describe();

  shape.lengths.assign(6, 32768);
  shape.total_len = 6 * 32768;
  EXPECT_TRUE(kernels::plan_decode(kv, shape, kernels::DecodeVariant::tma).work.empty());
  shape.lengths = {1, 2};
  EXPECT_THROW(kernels::plan_decode(kv, shape, kernels::DecodeVariant::tma), std::invalid_argument);
  shape.lengths.assign(6, 40000);
  EXPECT_THROW(kernels::plan_decode(kv, shape, kernels::DecodeVariant::tma), std::invalid_argument);
}

// A uniform batch of many rounds of blocks launches its whole groups, then the last round's worth
// of groups cut in pieces; one of two rounds keeps the grid.
TEST_F(GpuTest, DecodeManyRoundsCutTheLastRoundsGroups) {
  const int batch = 64, kv_heads = 32, len = 4096;
  const kernels::PagedKv kv = planned_cache(batch, kv_heads);
  const kernels::DecodeShape shape{32, 1, len, int64_t(batch) * len, std::vector<int>(batch, len)};
  const auto plan = kernels::plan_decode(kv, shape, kernels::DecodeVariant::tma);
  const int slots = current_device_sm_count() * plan.blocks_per_sm;
  const int groups = batch * kv_heads * plan.row_blocks;
  if (groups < 4 * slots) GTEST_SKIP() << "this GPU takes " << groups << " groups in fewer than 4 rounds";
  ASSERT_FALSE(plan.work.empty()) << plan.describe();
  std::map<std::pair<int, int>, std::set<int>> splits_of;  // (group, row block) -> its splits
  size_t i = 0;
  for (; i < plan.work.size() && plan.work[i].group_splits == 1; ++i) {
    EXPECT_GE(plan.work[i].split_tokens, len);
    splits_of[{plan.work[i].group, plan.work[i].row_block}].insert(plan.work[i].split);
  }
  EXPECT_EQ(i, size_t(groups - slots)) << "whole groups first, all but the last round's";
  for (; i < plan.work.size(); ++i) {
    const auto& w = plan.work[i];
    EXPECT_EQ(w.group_splits, plan.splits);
    EXPECT_GE(int64_t(w.split_tokens) * w.group_splits, len);
    EXPECT_LT(int64_t(w.split_tokens) * (w.group_splits - 1), len) << "a piece past the end";
    EXPECT_TRUE(splits_of[std::make_pair(w.group, w.row_block)].insert(w.split).second) << "a piece listed twice";
  }
  EXPECT_EQ(splits_of.size(), size_t(groups)) << "every group once";
  for (const auto& [g, splits] : splits_of)
    EXPECT_TRUE(splits.size() == 1 || int(splits.size()) == plan.splits) << "group " << g.first;

  const kernels::PagedKv two_rounds = planned_cache(16, kv_heads);
  const kernels::DecodeShape short_batch{32, 1, len, 16 * len, std::vector<int>(16, len)};
  EXPECT_TRUE(kernels::plan_decode(two_rounds, short_batch, kernels::DecodeVariant::tma).work.empty());
}

// Token trees (EAGLE-2 style verify passes): ours_v3 and FlashInfer's custom mask against the
// reference, which applies the same mask; per-sequence random trees, ragged lengths, MHA and GQA,
// many splits (batch 1, long context), q_len 16; the other rungs and the baselines refuse, saying so.
TEST_F(GpuTest, DecodeTreeMasksMatchTheReference) {
  const auto cases = shape_grid<std::pair<DecodeParam, const char*>>(
      {{{3, 700, "ragged", 5, 8, 8, 16}, "random"},
       {{4, 300, "ragged", 9, 64, 8, 16}, "random"},
       {{2, 1000, "uniform", 16, 8, 8, 32}, "wide"},
       {{2, 257, "ragged", 16, 16, 2, 16}, "random"}},
      {{{1, 5000, "uniform", 8, 32, 32, 16}, "binary"}});
  for (const auto& [shape, tree] : cases) {
    Case c = decode_case(shape, DType::bf16);
    c.params.set("tree", std::string(tree));
    for (const char* impl : {"ours_v3", "flashinfer"}) {
      if (left_out_under_sanitizer(c.op, impl)) continue;
      CheckResult r = run_and_check(c, impl);
      EXPECT_TRUE(r.passes()) << impl << " " << c.label() << ": " << r.describe();
    }
    const OpDef* op = builtin_registry().find(c.op);
    for (const char* impl : {"ours", "ours_simt", "ours_v2", "ours_v2_2stage", "cudnn", "cudnn_paged",
                             "gather_cublas", "flashinfer_simt"}) {
      const std::string why = op->find_impl(impl)->unsupported(c);
      EXPECT_EQ(why.rfind("tree masks: ", 0), 0u) << impl << " " << c.label() << ": '" << why << "'";
    }
  }
}

// A tree changes what the rows see: its output is not the chain's (a mask the kernel ignored would
// pass as a chain), and the GPU reference applies it as the CPU one does.
TEST_F(GpuTest, DecodeTreeReferenceIsNotTheChains) {
  Case c = decode_case({2, 300, "ragged", 6, 8, 4, 16}, DType::bf16);
  c.params.set("tree", std::string("binary"));
  CheckResult on_cpu = run_and_check(c, "ours_v3", 11, int64_t(1) << 30);
  CheckResult on_gpu = run_and_check(c, "ours_v3", 11, 0);
  EXPECT_TRUE(on_cpu.passes()) << on_cpu.describe();
  EXPECT_TRUE(on_gpu.passes()) << on_gpu.describe();
  EXPECT_NEAR(on_cpu.rel_error, on_gpu.rel_error, 1e-4);
  const OpDef* op = builtin_registry().find(c.op);
  auto tree_problem = op->make_problem(c, 11, stream);
  Case chain = c;
  chain.params.set("tree", std::string("chain"));
  auto chain_problem = op->make_problem(chain, 11, stream);
  const Reference tree_ref = compute_reference(*tree_problem, int64_t(1) << 30, stream);
  const Reference chain_ref = compute_reference(*chain_problem, int64_t(1) << 30, stream);
  ASSERT_EQ(tree_ref.host.size(), 1u);
  ASSERT_EQ(tree_ref.host[0].size(), chain_ref.host[0].size());
  // (batch, heads, q_len, head_dim): token 0 (the root) sees the same keys either way; token 2 (a
  // child of the root, whose chain sees token 1 too) does not.
  const size_t d = 128;
  EXPECT_EQ(tree_ref.host[0][0], chain_ref.host[0][0]);
  EXPECT_NE(tree_ref.host[0][2 * d], chain_ref.host[0][2 * d]);
}

TEST_F(GpuTest, DecodeGpuReferenceAgreesWithCpuReference) {
  Case c = decode_case({3, 1000, "ragged", 2, 16, 4, 32}, DType::bf16);
  CheckResult on_cpu = run_and_check(c, "ours", 11, int64_t(1) << 30);
  CheckResult on_gpu = run_and_check(c, "ours", 11, 0);
  EXPECT_TRUE(on_cpu.passes()) << on_cpu.describe();
  EXPECT_TRUE(on_gpu.passes()) << on_gpu.describe();
  EXPECT_NEAR(on_cpu.rel_error, on_gpu.rel_error, 1e-4);
}

}  // namespace topt::testing
