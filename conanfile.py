"""Conan recipe for memo, a header-only C++20 library.

The package is memo's own CMake install: headers plus the versioned
memoConfig.cmake, which consumers reach through find_package(memo CONFIG).
"""
import os

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class MemoConan(ConanFile):
    name = "memo"
    version = "0.1.0"
    license = "Apache-2.0"
    description = ("Header-only building blocks for training transformers on "
                   "ultra-long sequences: activation swapping, static memory "
                   "planning, chunked attention, subsequence pipelines")
    topics = ("cuda", "transformer", "memory-planning", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {
        "with_cuda": [True, False],
        "with_mpi": [True, False],
        "with_lpsolve": [True, False],
    }
    default_options = {"with_cuda": False, "with_mpi": False, "with_lpsolve": True}
    exports_sources = "CMakeLists.txt", "LICENSE", "include/*", "cmake/*"
    no_copy_source = True

    def requirements(self):
        self.requires("eigen/3.4.0")

    def layout(self):
        cmake_layout(self)

    def generate(self):
        toolchain = CMakeToolchain(self)
        toolchain.cache_variables["MEMO_BUILD_TESTS"] = False
        toolchain.cache_variables["MEMO_BUILD_EXAMPLES"] = False
        toolchain.cache_variables["MEMO_BUILD_BENCH"] = False
        toolchain.cache_variables["MEMO_ENABLE_CUDA"] = "ON" if self.options.with_cuda else "OFF"
        toolchain.cache_variables["MEMO_ENABLE_MPI"] = bool(self.options.with_mpi)
        toolchain.cache_variables["MEMO_ENABLE_LPSOLVE"] = bool(self.options.with_lpsolve)
        toolchain.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()

    def package(self):
        CMake(self).install()

    def package_id(self):
        # Headers only: one package serves every setting and option.
        self.info.clear()

    def package_info(self):
        # Consumers use memo's own installed config, not a generated one.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.builddirs = [os.path.join("share", "memo")]
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
