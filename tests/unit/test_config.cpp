#include <gtest/gtest.h>

#include "harness/config.h"
#include "harness/registry.h"

namespace topt {
namespace {

Config parse(const std::string& yaml) { return parse_config(yaml, "test.yaml", builtin_registry()); }

// Parses `yaml`, expecting a ConfigError; returns its message.
std::string error_of(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << yaml;
  return "";
}

const char* kValid = R"(
name: t
seed: 7
measure: {cache: hot, cuda_graph: true, min_samples: 5, max_noise_pct: 2.5, repetitions: 2, interleave: true}
check: {cpu_reference_max_elements: 1000}
ops:
  - op: rmsnorm
    impls: [ours, cudnn]
    axes:
      tokens: [1, 16]
      hidden: 4096
      dtype: [bf16, fp16]
    exclude:
      - {tokens: 16, dtype: fp16}
    measure: {timeout_s: 0.5}
)";

TEST(Config, ParsesEverySection) {
  Config c = parse(kValid);
  EXPECT_EQ(c.name, "t");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.measure.cache, CacheMode::hot);
  EXPECT_TRUE(c.measure.cuda_graph);
  EXPECT_EQ(c.measure.min_samples, 5);
  EXPECT_DOUBLE_EQ(c.measure.max_noise_pct, 2.5);
  EXPECT_EQ(c.measure.repetitions, 2);
  EXPECT_TRUE(c.measure.interleave);
  EXPECT_EQ(c.check.cpu_reference_max_elements, 1000);
  ASSERT_EQ(c.ops.size(), 1u);
  EXPECT_EQ(c.ops[0].impls, (std::vector<std::string>{"ours", "cudnn"}));
  ASSERT_EQ(c.ops[0].axes.size(), 3u);
  EXPECT_EQ(c.ops[0].axes[0].second.size(), 2u);
  EXPECT_EQ(c.ops[0].exclude.size(), 1u);
  // Per-op settings start from the global ones.
  EXPECT_DOUBLE_EQ(c.ops[0].measure.timeout_s, 0.5);
  EXPECT_EQ(c.ops[0].measure.min_samples, 5);
}

TEST(Config, CacheModes) {
  const std::string ops = "ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\n";
  EXPECT_EQ(parse(ops).measure.cache, CacheMode::cold);
  EXPECT_EQ(parse("measure: {cache: cold_clean}\n" + ops).measure.cache, CacheMode::cold_clean);
  EXPECT_EQ(parse("measure: {cache: hot}\n" + ops).measure.cache, CacheMode::hot);
}

TEST(Config, UnknownKeyNamesLineColumnAndSuggests) {
  std::string e = error_of("measure: {warmpu_min_runs: 3}\nops: []\n");
  EXPECT_NE(e.find("test.yaml:1:11"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'warmpu_min_runs' in measure"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'warmup_min_runs'"), std::string::npos) << e;
}

TEST(Config, UnknownTopLevelKeyListsValidNames) {
  std::string e = error_of("nmae: x\nops: []\n");
  EXPECT_NE(e.find("test.yaml:1:1"), std::string::npos) << e;
  EXPECT_NE(e.find("expected one of: name, description, seed, world_size, measure, check, ops, gates"), std::string::npos) << e;
}

TEST(Config, UnknownOp) {
  std::string e = error_of("ops:\n  - op: rmsnrom\n    axes: {tokens: 1, hidden: 8}\n");
  EXPECT_NE(e.find("test.yaml:2:9"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown op 'rmsnrom'; did you mean 'rmsnorm'"), std::string::npos) << e;
}

TEST(Config, UnknownImplementation) {
  std::string e = error_of("ops:\n  - op: rmsnorm\n    impls: [ours, cudann]\n    axes: {tokens: 1, hidden: 8}\n");
  EXPECT_NE(e.find("test.yaml:3:19"), std::string::npos) << e;
  EXPECT_NE(e.find("no implementation 'cudann'; did you mean 'cudnn'"), std::string::npos) << e;
}

TEST(Config, UnknownAxis) {
  std::string e = error_of("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hiden: 8}\n");
  EXPECT_NE(e.find("test.yaml:3:23"), std::string::npos) << e;
  EXPECT_NE(e.find("no axis 'hiden'; did you mean 'hidden'"), std::string::npos) << e;
}

TEST(Config, UnknownPreset) {
  std::string e = error_of("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, model: llama2-8b}\n");
  EXPECT_NE(e.find("unknown model preset 'llama2-8b'"), std::string::npos) << e;
  EXPECT_NE(e.find("llama2-7b, llama2-13b, llama2-70b"), std::string::npos) << e;
}

TEST(Config, WrongTypes) {
  EXPECT_NE(error_of("ops:\n  - op: rmsnorm\n    axes: {tokens: many, hidden: 8}\n")
                .find("test.yaml:3:20: error: axis 'tokens' of op 'rmsnorm': expected an integer, got 'many'"),
            std::string::npos);
  EXPECT_NE(error_of("measure: {cuda_graph: maybe}\nops: []\n").find("measure.cuda_graph: expected true or false"),
            std::string::npos);
  EXPECT_NE(error_of("measure: {cache: warm}\nops: []\n").find("expected cold, cold_clean or hot, got 'warm'"), std::string::npos);
  EXPECT_NE(error_of("measure: {min_samples: -3}\nops: []\n").find("must be > 0"), std::string::npos);
  EXPECT_NE(error_of("measure: 5\nops: []\n").find("measure: expected a map"), std::string::npos);
  EXPECT_NE(error_of("ops: {op: rmsnorm}\n").find("ops: expected a list"), std::string::npos);
  EXPECT_NE(error_of("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8, dtype: fp8}\n")
                .find("'fp8' is not supported; did you mean 'fp16'? expected one of: bf16, fp16"),
            std::string::npos);
}

TEST(Config, MissingRequiredFields) {
  EXPECT_NE(error_of("name: x\n").find("missing required key 'ops'"), std::string::npos);
  EXPECT_NE(error_of("ops: []\n").find("ops: the list is empty"), std::string::npos);
  EXPECT_NE(error_of("ops:\n  - axes: {tokens: 1}\n").find("test.yaml:2:5: error: ops entry: missing required key 'op'"),
            std::string::npos);
  EXPECT_NE(error_of("ops:\n  - op: rmsnorm\n").find("missing required key 'axes'"), std::string::npos);
}

TEST(Config, MalformedYamlNamesThePlace) {
  std::string e = error_of("ops:\n  - op: rmsnorm\n    axes: {tokens: [1, 2}\n");
  EXPECT_NE(e.find("test.yaml:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("malformed YAML"), std::string::npos) << e;
}

TEST(Config, ShippedConfigsParse) {
  for (const char* name : {"quick.yaml", "softmax_vocab.yaml", "spec_decode.yaml"}) {
    Config c = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/" + name, builtin_registry());
    EXPECT_FALSE(c.ops.empty()) << name;
  }
}

TEST(Config, MissingFile) {
  EXPECT_THROW(load_config("/nonexistent/x.yaml", builtin_registry()), ConfigError);
}

// yaml-cpp keeps one of two equal keys silently: every map of the config, nested in lists too.
TEST(Config, DuplicateKeysAreErrorsWithTheirLine) {
  EXPECT_EQ(error_of("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\nops: []\n"),
            "test.yaml:4:1: error: duplicate key 'ops' (first at line 1): a map takes each key once");
  EXPECT_NE(error_of("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\n"
                     "gates:\n  - {op: rmsnorm, impl: ours, min_speedup: 1, min_speedup: 2}\n")
                .find("test.yaml:5:47: error: duplicate key 'min_speedup' (first at line 5)"),
            std::string::npos);
}

TEST(Config, IntegerAxesNameTheirLimit) {
  for (const char* value : {"2147483648", "1000000000000", "1e12"})
    EXPECT_NE(error_of(std::string("ops:\n  - op: rmsnorm\n    axes: {hidden: 8, tokens: ") + value + "}\n")
                  .find(std::string(value) + " is more than an axis holds: the largest is 2147483647"),
              std::string::npos)
        << value;
  EXPECT_EQ(parse("ops:\n  - op: rmsnorm\n    axes: {hidden: 8, tokens: 2147483647}\n").ops.size(), 1u);
}

// A gate that names nothing the config runs could only fail after the whole sweep: refused at once.
TEST(Config, GatesMustNameWhatTheConfigRuns) {
  const std::string ops = "ops:\n  - op: rmsnorm\n    impls: [ours, cudnn]\n    axes: {tokens: 1, hidden: 8}\ngates:\n";
  EXPECT_NE(error_of(ops + "  - {op: softmax, impl: ours, min_speedup: 1}\n").find("gates[0].op: the config sweeps no op 'softmax'"),
            std::string::npos);
  EXPECT_NE(error_of(ops + "  - {op: rmsnorm, impl: ourz, min_speedup: 1}\n")
                .find("gates[0].impl: 'ourz' matches no implementation the config runs for op 'rmsnorm'; did you mean 'ours'?"),
            std::string::npos);
  EXPECT_NE(error_of(ops + "  - {impl: ours, vs: unfused, min_speedup: 1}\n").find("gates[0].vs: the config runs no implementation 'unfused'"),
            std::string::npos);
  // A regex that matches some implementation, and an implementation the op runs by default, pass.
  EXPECT_EQ(parse(ops + "  - {op: rmsnorm, impl: 'our.*', vs: cudnn, min_speedup: 1}\n").gates.size(), 1u);
  EXPECT_EQ(parse("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\ngates:\n  - {impl: ours, vs: unfused, min_speedup: 1}\n")
                .gates.size(),
            1u);
}

}  // namespace
}  // namespace topt
