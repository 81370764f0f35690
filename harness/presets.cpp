#include "harness/presets.h"

namespace topt {

const std::vector<ModelPreset>& model_presets() {
  // From the Llama-2 paper and the released configs; 70B uses grouped-query attention (8 KV heads).
  static const std::vector<ModelPreset> presets = {
      {"llama2-7b", {{"hidden", 4096}, {"heads", 32}, {"kv_heads", 32}, {"head_dim", 128},
                     {"ffn", 11008}, {"layers", 32}, {"vocab", 32000}}},
      {"llama2-13b", {{"hidden", 5120}, {"heads", 40}, {"kv_heads", 40}, {"head_dim", 128},
                      {"ffn", 13824}, {"layers", 40}, {"vocab", 32000}}},
      {"llama2-70b", {{"hidden", 8192}, {"heads", 64}, {"kv_heads", 8}, {"head_dim", 128},
                      {"ffn", 28672}, {"layers", 80}, {"vocab", 32000}}},
  };
  return presets;
}

const ModelPreset* find_preset(const std::string& name) {
  for (auto& p : model_presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (auto& p : model_presets()) names.push_back(p.name);
  return names;
}

}  // namespace topt
