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
