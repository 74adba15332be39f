# Installs the build at BUILD_DIR into WORK_DIR/prefix, then configures and
# builds CONSUMER_DIR against it. Fails on any non-zero step.
file(REMOVE_RECURSE ${WORK_DIR})
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}")
  endif()
endfunction()
run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
foreach(header entrokv/client/client.h entrokv/client/session.h
               entrokv/core/config.h lib/cmake/entrokv/entrokv-config.cmake)
  if(NOT EXISTS ${WORK_DIR}/prefix/include/${header} AND
     NOT EXISTS ${WORK_DIR}/prefix/${header})
    message(FATAL_ERROR "not installed: ${header}")
  endif()
endforeach()
run_step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build
  -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
  -DENTROKV_EXAMPLE_SOURCE=${EXAMPLE})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build -j 2)
if(NOT EXISTS ${WORK_DIR}/build/consumer_engine)
  message(FATAL_ERROR "consumer_engine was not built")
endif()
message(STATUS "find_package(entrokv) consumer built")
