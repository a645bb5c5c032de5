# Helpers for memo's own tests, tools and benchmarks (not installed).
include_guard(GLOBAL)

find_package(doctest QUIET)

# Warnings for memo's own translation units; consumers get none forced on them.
add_library(memo_warnings INTERFACE)
target_compile_options(memo_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>)

# Sanitizer flags: MEMO_SANITIZE is "" (none), "thread", or "address,undefined".
add_library(memo_sanitize INTERFACE)
if(MEMO_SANITIZE)
  target_compile_options(memo_sanitize INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${MEMO_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(memo_sanitize INTERFACE -fsanitize=${MEMO_SANITIZE})
endif()

# Which sanitizer group a build serves: tests that exercise threads (the host
# backend and everything built on its streams) run under ThreadSanitizer, the
# rest under AddressSanitizer + UndefinedBehaviorSanitizer.
function(_memo_group_wanted group out)
  if(NOT MEMO_SANITIZE)
    set(${out} ON PARENT_SCOPE)
  elseif(MEMO_SANITIZE MATCHES "thread")
    if(group STREQUAL "thread")
      set(${out} ON PARENT_SCOPE)
    else()
      set(${out} OFF PARENT_SCOPE)
    endif()
  else()
    if(group STREQUAL "thread")
      set(${out} OFF PARENT_SCOPE)
    else()
      set(${out} ON PARENT_SCOPE)
    endif()
  endif()
endfunction()

# memo_add_test(<name> SOURCES <files...> [THREADS] [LIBS <targets...>] [LABELS <labels...>])
#
# One doctest executable, its test cases registered individually with ctest.
# THREADS puts it in the ThreadSanitizer group (label "threads"); every test
# is otherwise in the Address/UB sanitizer group (label "memory").
function(memo_add_test name)
  cmake_parse_arguments(arg "THREADS" "" "SOURCES;LIBS;LABELS" ${ARGN})
  set(group address)
  set(labels ${arg_LABELS} memory)
  if(arg_THREADS)
    set(group thread)
    set(labels ${arg_LABELS} threads)
  endif()
  _memo_group_wanted(${group} wanted)
  if(NOT wanted)
    return()
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE memo::memo doctest::doctest memo_warnings memo_sanitize
                        memo_doctest_main ${arg_LIBS})
  doctest_discover_tests(${name} PROPERTIES LABELS "${labels}"
                         ADD_LABELS 0 TEST_PREFIX "${name}: ")
endfunction()

# memo_add_tool(<name> SOURCES <files...> [LIBS ...]) — examples, CLIs, benches.
function(memo_add_tool name)
  cmake_parse_arguments(arg "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE memo::memo memo_warnings memo_sanitize ${arg_LIBS})
endfunction()
