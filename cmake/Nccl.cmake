# NCCL (the nccl backend of dist::Communicator), optional: without it the build configures and links,
# and asking for the nccl backend throws a clear error. Sets FP8KIT_HAVE_NCCL, NCCL_INCLUDE_DIR and
# NCCL_LIBRARY.
#   NCCL_ROOT (a -D variable or the environment; a folder with include/nccl.h and lib/libnccl.so*, e.g.
#   PyTorch's nvidia/nccl, whose library may be only libnccl.so.2), else the CUDA toolkit's own
#   folders, else the system's. NCCL 2.18 or newer (non-blocking communicators, ncclCommFinalize).
if(NOT NCCL_ROOT AND DEFINED ENV{NCCL_ROOT})
  set(NCCL_ROOT "$ENV{NCCL_ROOT}")
endif()
set(NCCL_ROOT "${NCCL_ROOT}" CACHE PATH "An NCCL installation (include/, lib/); empty: CUDA's folders")
find_path(NCCL_INCLUDE_DIR nccl.h HINTS "${NCCL_ROOT}/include" ${CUDAToolkit_INCLUDE_DIRS})
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS "${NCCL_ROOT}/lib" "${NCCL_ROOT}/lib64" "${CUDAToolkit_LIBRARY_DIR}"
                   "${CUDAToolkit_LIBRARY_ROOT}/lib")
set(FP8KIT_HAVE_NCCL OFF)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" nccl_version REGEX "^#define NCCL_(MAJOR|MINOR) [0-9]+")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*" "\\1.\\2" nccl_version "${nccl_version}")
  if(nccl_version VERSION_LESS 2.18)
    message(STATUS "fp8kit: NCCL ${nccl_version} at ${NCCL_INCLUDE_DIR} is older than 2.18: no nccl backend "
                   "(set NCCL_ROOT)")
  else()
    set(FP8KIT_HAVE_NCCL ON)
    message(STATUS "fp8kit: NCCL ${nccl_version} ${NCCL_LIBRARY}")
  endif()
else()
  message(STATUS "fp8kit: NCCL not found (set NCCL_ROOT to a folder with include/nccl.h and lib/libnccl.so*): "
                 "no nccl backend")
endif()
