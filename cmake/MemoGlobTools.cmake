# memo_add_tools_in_directory(): one executable per *.cpp in the calling
# directory, named after the file. Optional components are linked when built.
include_guard(GLOBAL)
function(memo_add_tools_in_directory)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  set(extra)
  if(TARGET memo::lpsolve)
    list(APPEND extra memo::lpsolve)
  endif()
  foreach(source IN LISTS sources)
    get_filename_component(name ${source} NAME_WE)
    memo_add_tool(${name} SOURCES ${source} LIBS ${extra})
  endforeach()
endfunction()
