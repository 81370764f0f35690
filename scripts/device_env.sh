# Sourced on a GPU machine before running the bundle: cuDNN 9.19 (matching the headers the
# bundle was built with) ships inside that machine's PyTorch, as do cuBLAS and CUPTI for CUDA 13, and
# NCCL (the collective ops' baseline; topt links it, so it must be found for topt to start).
py_lib_dirs=$(python3 - <<'PY' 2>/dev/null
import importlib, os
dirs = []
for mod in ("nvidia.cudnn", "nvidia.cublas", "nvidia.cuda_cupti", "nvidia.cuda_nvrtc", "nvidia.nccl"):
    try:
        m = importlib.import_module(mod)
        d = os.path.join(list(m.__path__)[0], "lib")
        if os.path.isdir(d):
            dirs.append(d)
    except ImportError:
        pass
print(":".join(dirs))
PY
)
export LD_LIBRARY_PATH="${py_lib_dirs:+$py_lib_dirs:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
