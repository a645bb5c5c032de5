# memo_add_tools_in_directory([SMOKE [ARGS <args...>] [JSON]] [PREFIX <test prefix>]):
# one executable per *.cpp in the calling directory, named after the file,
# with optional components linked when they are built. With SMOKE each
# program is also a ctest test run with ARGS (in a scratch
# directory); JSON additionally requires its output to be one JSON object.
# A source file with a line "// smoke-args: <args>" is smoke-run with those
# arguments instead of ARGS (e.g. a short run of a long training example).
include_guard(GLOBAL)
function(memo_add_tools_in_directory)
  cmake_parse_arguments(arg "SMOKE;JSON" "PREFIX" "ARGS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  set(extra)
  if(TARGET memo::lpsolve)
    list(APPEND extra memo::lpsolve)
  endif()
  foreach(source IN LISTS sources)
    get_filename_component(name ${source} NAME_WE)
    memo_add_tool(${name} SOURCES ${source} LIBS ${extra})
    if(MEMO_BUILD_TESTS AND arg_SMOKE)
      set(smoke_args ${arg_ARGS})
      file(STRINGS ${source} declared REGEX "^// smoke-args:" LIMIT_COUNT 1)
      if(declared)
        string(REGEX REPLACE "^// smoke-args:[ ]*" "" declared "${declared}")
        separate_arguments(smoke_args UNIX_COMMAND "${declared}")
      endif()
      set(work ${CMAKE_CURRENT_BINARY_DIR}/smoke/${name})
      file(MAKE_DIRECTORY ${work})
      add_test(NAME ${arg_PREFIX}${name}
        COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:${name}> "-DARGS=${smoke_args}"
                -DJSON=${arg_JSON} -P ${PROJECT_SOURCE_DIR}/cmake/MemoRunSmoke.cmake
        WORKING_DIRECTORY ${work})
      set_tests_properties(${arg_PREFIX}${name} PROPERTIES LABELS "smoke" TIMEOUT 600)
    endif()
  endforeach()
endfunction()
