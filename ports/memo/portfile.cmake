# vcpkg port for memo (header-only). The configure options below are the ones
# memo's own consumer test (tests/consumer/run_consumer.cmake) uses, so what
# this port installs is what CI checks.
set(VCPKG_BUILD_TYPE release)

# Used as an overlay port from a checkout of memo:
#   vcpkg install memo --overlay-ports=<memo>/ports
# A registry port replaces this line with vcpkg_from_github(...) for a release.
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda MEMO_ENABLE_CUDA
    mpi MEMO_ENABLE_MPI
)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DMEMO_BUILD_TESTS=OFF
    -DMEMO_BUILD_EXAMPLES=OFF
    -DMEMO_BUILD_BENCH=OFF
    ${FEATURE_OPTIONS}
)

vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME memo CONFIG_PATH share/memo)

vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
