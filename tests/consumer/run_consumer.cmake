# cmake -DMEMO_SOURCE_DIR=... -DCONSUMER_SOURCE_DIR=... -DWORK_DIR=... -P run_consumer.cmake
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# The same configure, build and install steps as ports/memo/portfile.cmake
# (vcpkg with no features) and conanfile.py (default options, no lp_solve
# difference: it is found when present).
run(${CMAKE_COMMAND} -S ${MEMO_SOURCE_DIR} -B ${WORK_DIR}/memo-build -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=${prefix}
    -DMEMO_BUILD_TESTS=OFF -DMEMO_BUILD_EXAMPLES=OFF -DMEMO_BUILD_BENCH=OFF
    -DMEMO_ENABLE_CUDA=OFF -DMEMO_ENABLE_MPI=OFF)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/memo-build)
run(${CMAKE_COMMAND} --install ${WORK_DIR}/memo-build)
if(NOT EXISTS ${prefix}/share/memo/memoConfig.cmake OR NOT EXISTS ${prefix}/include/memo/memo.hpp)
  message(FATAL_ERROR "install did not produce share/memo/memoConfig.cmake and include/memo/memo.hpp")
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build -G "${GENERATOR}"
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/memo_consumer)
message(STATUS "${last_output}")
if(NOT last_output MATCHES "memo consumer: ok")
  message(FATAL_ERROR "consumer ran but did not report success:\n${last_output}")
endif()
