# Compiles SOURCE and passes only if the compiler refuses it with a message matching REGEX:
# a compile-fail test that fails for the wrong reason (a typo, a missing include) fails here.
execute_process(
  COMMAND ${COMPILER} -std=c++20 -fsyntax-only -I${INCLUDE_DIR} ${SOURCE}
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must be refused with /${REGEX}/")
endif()
if(NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "${SOURCE} was refused, but not with /${REGEX}/:\n${err}")
endif()
message(STATUS "refused as expected: /${REGEX}/")
