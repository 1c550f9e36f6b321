function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_BUILD})
run(${CMAKE_COMMAND} --install ${PROJECT_BUILD} --prefix ${PREFIX})
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BUILD} -DCMAKE_PREFIX_PATH=${PREFIX}
    -DCMAKE_CXX_COMPILER=${CXX})
run(${CMAKE_COMMAND} --build ${CONSUMER_BUILD})
run(${CONSUMER_BUILD}/my_shape)
if(NOT last_output MATCHES "heads=12, kv_heads=4, head_dim=64")
  message(FATAL_ERROR "consumer printed an unexpected shape:\n${last_output}")
endif()
message(STATUS "${last_output}")

# The researcher's workflow (examples/custom_shape): its own shape, a GGUF written with seeded
# random weights, the Engine, and the shape's kernels and whole forward pass static against
# dynamic (its exit status says the two forms' logits agreed).
file(REMOVE_RECURSE ${CUSTOM_SHAPE_BUILD})
run(${CMAKE_COMMAND} -S ${CUSTOM_SHAPE_SOURCE} -B ${CUSTOM_SHAPE_BUILD}
    -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${CUSTOM_SHAPE_BUILD})
run(${CUSTOM_SHAPE_BUILD}/custom_shape ${CUSTOM_SHAPE_BUILD}/custom_shape.gguf 64 8)
if(NOT last_output MATCHES "pp64 [0-9.]+ tokens/s, tg8 [0-9.]+ tokens/s \\(length\\)"
   OR NOT last_output MATCHES "attention decode ctx 1024"
   OR NOT last_output MATCHES "decode tg8 +\\| +[0-9.]+ \\| +[0-9.]+ \\|")
  message(FATAL_ERROR "custom_shape printed no pp/tg figures, kernel table or whole-model "
                      "static/dynamic rows:\n${last_output}")
endif()
message(STATUS "${last_output}")
