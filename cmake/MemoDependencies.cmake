# Shared by memo's own build and by the installed memoConfig.cmake, so that a
# consumer resolves Eigen exactly the way memo was built against it.
include_guard(GLOBAL)

set(MEMO_EIGEN_MIN_VERSION 3.4)

# Eigen 3.4 and Eigen 5.x both ship a CMake config, with different version
# schemes; memo works with either, and with nothing older than 3.4.
macro(memo_find_eigen)
  if(NOT TARGET Eigen3::Eigen)
    find_package(Eigen3 NO_MODULE ${ARGN})
  endif()
  if(TARGET Eigen3::Eigen)
    if(DEFINED Eigen3_VERSION AND Eigen3_VERSION AND Eigen3_VERSION VERSION_LESS MEMO_EIGEN_MIN_VERSION)
      message(FATAL_ERROR "memo needs Eigen >= ${MEMO_EIGEN_MIN_VERSION}; found ${Eigen3_VERSION} at ${Eigen3_DIR}")
    endif()
  elseif(NOT "${ARGN}" MATCHES "QUIET")
    message(FATAL_ERROR "memo needs Eigen >= ${MEMO_EIGEN_MIN_VERSION} (Debian: apt-get install libeigen3-dev)")
  endif()
endmacro()

# CMake releases before 3.26 do not know nvcc's C++20 flag, so any target
# that needs cxx_std_20 (memo::memo does) fails to generate for .cu sources
# ("requires the language dialect CUDA20"). nvcc >= 12 accepts -std=c++20;
# tell CMake so. Call after enable_language(CUDA).
macro(memo_teach_cmake_cuda20)
  if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA" AND NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION
     AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
endmacro()
