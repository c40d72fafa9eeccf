# Finds every external dependency of pipetwin. Nothing here is vendored:
# Debian packages for the C++ libraries, the PyPI torch wheel (in a virtualenv
# outside the source tree, see scripts/setup.sh) for LibTorch, and the CUDA
# toolkit with NCCL under /usr/local/cuda.

include(cmake/LibraryDependencies.cmake)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)

# --- LibTorch from the torch wheel -------------------------------------------
set(PIPETWIN_VENV "$ENV{PIPETWIN_VENV}" CACHE PATH "virtualenv holding the torch wheel")
if(NOT PIPETWIN_VENV)
  set(PIPETWIN_VENV "$ENV{HOME}/.cache/pipetwin/venv" CACHE PATH "" FORCE)
endif()
set(PIPETWIN_PYTHON "${PIPETWIN_VENV}/bin/python" CACHE FILEPATH "python of the virtualenv")
if(NOT EXISTS "${PIPETWIN_PYTHON}")
  message(FATAL_ERROR "No Python at ${PIPETWIN_PYTHON}: run scripts/setup.sh first "
                      "(or set PIPETWIN_VENV to the virtualenv holding torch).")
endif()
execute_process(
  COMMAND "${PIPETWIN_PYTHON}" -c
    "import os, torch; print(torch.utils.cmake_prefix_path); print(os.path.dirname(os.path.dirname(torch.__file__)))"
  OUTPUT_VARIABLE _torch_out OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _torch_rc)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "torch is not importable from ${PIPETWIN_PYTHON}: run scripts/setup.sh")
endif()
string(REPLACE "\n" ";" _torch_out "${_torch_out}")
list(GET _torch_out 0 PIPETWIN_TORCH_PREFIX)
list(GET _torch_out 1 PIPETWIN_SITE_PACKAGES)
list(APPEND CMAKE_PREFIX_PATH "${PIPETWIN_TORCH_PREFIX}")

# The CUDA side: the toolkit under /usr/local/cuda (same CUDA major/minor as the wheel).
if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
set(CMAKE_CUDA_STANDARD 17)  # torch's CUDA probes reject the CUDA20 dialect
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  # No GPU to probe at configure time: name the architectures (A100, H100).
  set(ENV{TORCH_CUDA_ARCH_LIST} "8.0;9.0")
endif()
find_package(CUDAToolkit REQUIRED)
find_package(Torch REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION} from ${PIPETWIN_TORCH_PREFIX}")

# pipetwin::torch: what a translation unit that uses LibTorch and c10d needs.
#  - The wheel does not ship Gloo's headers, which ProcessGroupGloo.hpp includes;
#    Debian's libgloo-dev provides them (headers only: Gloo itself is linked
#    inside libtorch_cpu, libgloo.so is never linked).
#  - ProcessGroupNCCL.hpp inlines NCCL structs (ncclConfig_t): they must come
#    from the wheel's nccl.h, the NCCL that libtorch_cuda was built and loads
#    with (2.29), not the toolkit's (2.28) - a mismatch corrupts the heap.
#  - libtorch_cuda finds its CUDA libraries through its RPATH at run time; the
#    link needs the same directories (-rpath-link) so that ld does not resolve
#    libnccl.so.2 to the toolkit's older copy.
find_path(PIPETWIN_GLOO_INCLUDE_DIR gloo/algorithm.h REQUIRED)
set(_nv "${PIPETWIN_SITE_PACKAGES}/nvidia")
add_library(pipetwin_torch INTERFACE)
add_library(pipetwin::torch ALIAS pipetwin_torch)
target_link_libraries(pipetwin_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(pipetwin_torch SYSTEM BEFORE INTERFACE
  "${_nv}/nccl/include" "${PIPETWIN_GLOO_INCLUDE_DIR}")
target_compile_definitions(pipetwin_torch INTERFACE USE_C10D_GLOO USE_C10D_NCCL)
target_link_options(pipetwin_torch INTERFACE
  "LINKER:-rpath-link,${_nv}/nccl/lib:${_nv}/cu13/lib:${_nv}/cudnn/lib:${_nv}/nvshmem/lib:${_nv}/cusparselt/lib")

# NCCL of the toolkit (its own test links it alone: the wheel's libtorch_cuda
# loads the wheel's NCCL, and one process must not mix the two).
find_library(PIPETWIN_NCCL_LIBRARY nccl HINTS "${CUDAToolkit_LIBRARY_DIR}" REQUIRED)
find_path(PIPETWIN_NCCL_INCLUDE_DIR nccl.h HINTS "${CUDAToolkit_INCLUDE_DIRS}" REQUIRED)
