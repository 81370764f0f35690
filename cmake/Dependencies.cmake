# Every dependency comes in as an imported target; scripts/setup.sh installs them.
find_package(CUDAToolkit 13 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(benchmark REQUIRED)
find_package(GTest REQUIRED)
find_package(CLI11 REQUIRED)

# cuDNN 9 ships no CMake package: find it beside the toolkit.
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include REQUIRED)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib REQUIRED)
add_library(CUDNN::cudnn SHARED IMPORTED)
set_target_properties(CUDNN::cudnn PROPERTIES
  IMPORTED_LOCATION ${CUDNN_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})

# The cuDNN frontend is header-only; the PyPI wheel nvidia-cudnn-frontend puts its headers in
# <site-packages>/include. CUDNN_FRONTEND_INCLUDE_DIR overrides the lookup.
if(NOT CUDNN_FRONTEND_INCLUDE_DIR)
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import sysconfig; print(sysconfig.get_paths()['purelib'] + '/include')"
    OUTPUT_VARIABLE CUDNN_FRONTEND_INCLUDE_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
if(NOT EXISTS "${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend.h")
  message(FATAL_ERROR "cudnn_frontend.h not found in '${CUDNN_FRONTEND_INCLUDE_DIR}': run scripts/setup.sh")
endif()
add_library(cudnn_frontend INTERFACE IMPORTED)
# SYSTEM: its warnings are not ours.
set_target_properties(cudnn_frontend PROPERTIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${CUDNN_FRONTEND_INCLUDE_DIR})
target_include_directories(cudnn_frontend SYSTEM INTERFACE ${CUDNN_FRONTEND_INCLUDE_DIR})
target_link_libraries(cudnn_frontend INTERFACE CUDNN::cudnn)

# NCCL, the collective ops' baseline, ships no CMake package: find it beside the toolkit (on the GPU
# machines it comes from PyTorch's wheel at run time: scripts/device_env.sh).
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include REQUIRED)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib REQUIRED)
add_library(NCCL::nccl SHARED IMPORTED)
set_target_properties(NCCL::nccl PROPERTIES
  IMPORTED_LOCATION ${NCCL_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})

# FlashInfer, the attention and norm peers: its C++ headers (and the CUTLASS they use) from the
# flashinfer-python wheel of the version in baselines/flashinfer/VERSION, unpacked by scripts/setup.sh.
# FLASHINFER_INCLUDE_DIR overrides the lookup (its parent must hold cutlass/include and
# cutlass/tools/util/include, which its SM90 headers use).
file(STRINGS ${CMAKE_SOURCE_DIR}/baselines/flashinfer/VERSION FLASHINFER_VERSION LIMIT_COUNT 1)
if(NOT FLASHINFER_INCLUDE_DIR)
  if(DEFINED ENV{XDG_CACHE_HOME})
    set(FLASHINFER_INCLUDE_DIR "$ENV{XDG_CACHE_HOME}/topt/flashinfer-${FLASHINFER_VERSION}/include")
  else()
    set(FLASHINFER_INCLUDE_DIR "$ENV{HOME}/.cache/topt/flashinfer-${FLASHINFER_VERSION}/include")
  endif()
endif()
get_filename_component(FLASHINFER_CUTLASS_INCLUDE_DIR "${FLASHINFER_INCLUDE_DIR}/../cutlass/include" ABSOLUTE)
get_filename_component(FLASHINFER_CUTLASS_UTIL_INCLUDE_DIR "${FLASHINFER_INCLUDE_DIR}/../cutlass/tools/util/include"
                       ABSOLUTE)
if(NOT EXISTS "${FLASHINFER_INCLUDE_DIR}/flashinfer/attention/prefill.cuh"
   OR NOT EXISTS "${FLASHINFER_CUTLASS_INCLUDE_DIR}/cutlass/cutlass.h"
   OR NOT EXISTS "${FLASHINFER_CUTLASS_UTIL_INCLUDE_DIR}/cutlass/util/command_line.h")
  message(FATAL_ERROR "FlashInfer ${FLASHINFER_VERSION} headers not found in '${FLASHINFER_INCLUDE_DIR}' "
                      "(with CUTLASS in '${FLASHINFER_CUTLASS_INCLUDE_DIR}'): run scripts/setup.sh")
endif()
add_library(flashinfer_headers INTERFACE IMPORTED)
# SYSTEM: its warnings are not ours. norm.cuh's TensorRT-LLM helpers define their bf16/fp8 pack types
# only under ENABLE_BF16 / ENABLE_FP8.
target_include_directories(flashinfer_headers SYSTEM INTERFACE
  ${FLASHINFER_INCLUDE_DIR} ${FLASHINFER_CUTLASS_INCLUDE_DIR} ${FLASHINFER_CUTLASS_UTIL_INCLUDE_DIR})
target_compile_definitions(flashinfer_headers INTERFACE ENABLE_BF16 ENABLE_FP8)
# CUTLASS, the GEMM peers (baselines/cutlass): the copy that ships in the same wheel (CUTLASS 4.2.1 with
# FlashInfer 0.5.3), so that one pin names both.
add_library(cutlass_headers INTERFACE IMPORTED)
target_include_directories(cutlass_headers SYSTEM INTERFACE
  ${FLASHINFER_CUTLASS_INCLUDE_DIR} ${FLASHINFER_CUTLASS_UTIL_INCLUDE_DIR})
