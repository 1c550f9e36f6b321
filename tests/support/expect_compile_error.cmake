# Compiles SOURCE and passes only if the compiler refuses it with a message matching REGEX:
# a compile-fail test that fails for the wrong reason (a typo, a missing include) fails here.
# FLAGS ("|"-separated) replaces the default "-std=c++20 -fsyntax-only" (nvcc has no
# -fsyntax-only); EXTRA_INCLUDES ("|"-separated directories) adds include paths.
if(NOT DEFINED FLAGS)
  set(FLAGS -std=c++20 -fsyntax-only)
else()
  string(REPLACE "|" ";" FLAGS "${FLAGS}")
endif()
string(REPLACE "|" ";" EXTRA_INCLUDES "${EXTRA_INCLUDES}")
set(extra "")
foreach(dir IN LISTS EXTRA_INCLUDES)
  list(APPEND extra -I${dir})
endforeach()
execute_process(
  COMMAND ${COMPILER} ${FLAGS} -I${INCLUDE_DIR} ${extra} ${SOURCE}
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must be refused with /${REGEX}/")
endif()
if(NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "${SOURCE} was refused, but not with /${REGEX}/:\n${err}")
endif()
message(STATUS "refused as expected: /${REGEX}/")
