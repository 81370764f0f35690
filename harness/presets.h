// Model presets: the shapes of the Llama-2 family, which sweeps use as a `model` axis.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace topt {

struct ModelPreset {
  std::string name;
  // hidden, heads, kv_heads, head_dim, ffn, layers, vocab: named as the op axes they fill in.
  std::vector<std::pair<std::string, int64_t>> fields;
};

const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace topt
