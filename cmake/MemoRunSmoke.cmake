# cmake -DPROGRAM=... -DARGS=a;b -DJSON=ON|OFF -P MemoRunSmoke.cmake
# Runs a program; fails on a non-zero exit, and with JSON=ON unless its
# standard output is one JSON object.
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE result
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} ${ARGS} exited with ${result}\n${out}\n${err}")
endif()
if(JSON)
  string(STRIP "${out}" out)
  string(JSON type ERROR_VARIABLE json_error TYPE "${out}")
  if(json_error OR NOT type STREQUAL "OBJECT")
    message(FATAL_ERROR "${PROGRAM} ${ARGS} did not print one JSON object: ${json_error}\n${out}")
  endif()
endif()
message(STATUS "${PROGRAM} ${ARGS}: ok")
