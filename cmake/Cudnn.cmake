# cuDNN 9 (the GPU's fused attention) and cudnn-frontend (its header-only C++ graph API), for the CUDA
# backend. Sets CUDNN_INCLUDE_DIR, CUDNN_LIBRARY and CUDNN_FRONTEND_INCLUDE_DIR.
#   cuDNN: CUDNN_ROOT (a -D variable or the environment; a folder with include/cudnn.h and
#     lib/libcudnn.so*, e.g. PyTorch's nvidia/cudnn, whose library may be only libcudnn.so.9), else
#     the CUDA toolkit's own folders, else the system's.
#   cudnn-frontend: CUDNN_FRONTEND_INCLUDE_DIR, else .deps/cudnn-frontend/include, where
#     scripts/bootstrap.sh unpacks the pinned nvidia-cudnn-frontend wheel.
if(NOT CUDNN_ROOT AND DEFINED ENV{CUDNN_ROOT})
  set(CUDNN_ROOT "$ENV{CUDNN_ROOT}")
endif()
set(CUDNN_ROOT "${CUDNN_ROOT}" CACHE PATH "A cuDNN 9 installation (include/, lib/); empty: CUDA's folders")
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS "${CUDNN_ROOT}/include" ${CUDAToolkit_INCLUDE_DIRS})
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
             HINTS "${CUDNN_ROOT}/lib" "${CUDNN_ROOT}/lib64" "${CUDAToolkit_LIBRARY_DIR}")
if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
  message(FATAL_ERROR "cuDNN 9 not found (cudnn.h: ${CUDNN_INCLUDE_DIR}, libcudnn: ${CUDNN_LIBRARY}): install it "
                      "into the CUDA toolkit, or point CUDNN_ROOT at a folder with include/cudnn.h and lib/libcudnn.so*")
endif()
file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" cudnn_major REGEX "^#define CUDNN_MAJOR [0-9]+")
string(REGEX REPLACE "[^0-9]" "" cudnn_major "${cudnn_major}")
if(NOT cudnn_major STREQUAL "9")
  message(FATAL_ERROR "cuDNN ${CUDNN_INCLUDE_DIR} is version ${cudnn_major}; fp8kit needs cuDNN 9: set CUDNN_ROOT")
endif()
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS "${CMAKE_SOURCE_DIR}/.deps/cudnn-frontend/include"
          NO_DEFAULT_PATH)
if(NOT CUDNN_FRONTEND_INCLUDE_DIR)
  message(FATAL_ERROR "cudnn-frontend's headers not found: run scripts/bootstrap.sh (it unpacks them into "
                      ".deps/cudnn-frontend/include), or set CUDNN_FRONTEND_INCLUDE_DIR")
endif()
message(STATUS "fp8kit: cuDNN ${CUDNN_LIBRARY}, cudnn-frontend ${CUDNN_FRONTEND_INCLUDE_DIR}")
