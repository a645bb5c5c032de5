# FindLPSolve
# -----------
# Finds lp_solve 5.5. Debian ships its header as <lpsolve/lp_lib.h> and a
# static liblpsolve55.a (next to a shared liblpsolve55.so) that also needs
# colamd, libdl and libm at link time.
#
# Result: LPSolve_FOUND, LPSolve_INCLUDE_DIR, LPSolve_LIBRARY and the imported
# target LPSolve::LPSolve.
include(FindPackageHandleStandardArgs)

find_path(LPSolve_INCLUDE_DIR NAMES lpsolve/lp_lib.h)
find_library(LPSolve_LIBRARY NAMES lpsolve55 PATH_SUFFIXES lp_solve)
find_library(LPSolve_COLAMD_LIBRARY NAMES colamd)

find_package_handle_standard_args(LPSolve
  REQUIRED_VARS LPSolve_LIBRARY LPSolve_INCLUDE_DIR)

if(LPSolve_FOUND AND NOT TARGET LPSolve::LPSolve)
  add_library(LPSolve::LPSolve UNKNOWN IMPORTED)
  set_target_properties(LPSolve::LPSolve PROPERTIES
    IMPORTED_LOCATION "${LPSolve_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${LPSolve_INCLUDE_DIR}")
  set(_memo_lpsolve_deps ${CMAKE_DL_LIBS} m)
  if(LPSolve_COLAMD_LIBRARY)
    list(PREPEND _memo_lpsolve_deps "${LPSolve_COLAMD_LIBRARY}")
  endif()
  set_property(TARGET LPSolve::LPSolve PROPERTY INTERFACE_LINK_LIBRARIES "${_memo_lpsolve_deps}")
endif()
mark_as_advanced(LPSolve_INCLUDE_DIR LPSolve_LIBRARY LPSolve_COLAMD_LIBRARY)
